package fs

import (
	"errors"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/awcp/awcp/sshd"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// On a live mount whose export protects git's control paths, the agent's
// git still works — it commits, branches and reads the history — while
// every change to what git runs or obeys fails in the agent's own call:
// `git config`, a hook written by hand, an info/attributes. The owner's
// repository keeps its config and gains the agent's commit.
func TestAgentCommitsButCannotTouchGitControl(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed (.ci/run installs it)")
	}
	f := newMountOf(t, sshd.Export{Policy: wire.ExportPolicy{ProtectGit: true}}, nil)
	owner := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", f.dir}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("owner's git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	os.WriteFile(filepath.Join(f.dir, "main.go"), []byte("package main\n"), 0o644)
	owner("init", "-q", "-b", "main")
	owner("add", "-A")
	owner("-c", "user.email=o@x", "-c", "user.name=owner", "commit", "-q", "-m", "base")
	config, _ := os.ReadFile(filepath.Join(f.dir, ".git", "config"))

	agent := func(args ...string) (string, error) {
		// -C, not the command's Dir: a child that changes into the mount
		// before its exec waits on this process's FUSE server, which a
		// collection stopping the world for the fork would never let run.
		cmd := exec.Command("git", append([]string{"-C", f.mnt, "-c", "user.email=a@x", "-c", "user.name=agent", "-c", "safe.directory=*"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	os.WriteFile(filepath.Join(f.mnt, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	for _, args := range [][]string{{"checkout", "-q", "-b", "agent"}, {"add", "-A"}, {"commit", "-q", "-m", "agent's work"}} {
		if out, err := agent(args...); err != nil {
			t.Fatalf("the agent's git %v: %v\n%s", args, err, out)
		}
	}
	if out, err := agent("config", "core.fsmonitor", "touch /tmp/pwned"); err == nil {
		t.Errorf("the agent's git config succeeded: %s", out)
	}
	if err := os.WriteFile(filepath.Join(f.mnt, ".git", "hooks", "post-checkout"), []byte("#!/bin/sh\n"), 0o755); !errors.Is(err, iofs.ErrPermission) {
		t.Errorf("writing a hook: %v, want EACCES", err)
	}
	if err := os.WriteFile(filepath.Join(f.mnt, ".git", "config"), []byte("[core]\n"), 0o644); !errors.Is(err, iofs.ErrPermission) {
		t.Errorf("writing .git/config: %v, want EACCES", err)
	}
	if err := os.Rename(filepath.Join(f.mnt, "main.go"), filepath.Join(f.mnt, ".git", "info", "attributes")); !errors.Is(err, iofs.ErrPermission) {
		t.Errorf("renaming into .git/info: %v, want EACCES", err)
	}
	if got, _ := os.ReadFile(filepath.Join(f.dir, ".git", "config")); string(got) != string(config) {
		t.Errorf("the owner's .git/config changed:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(f.dir, ".git", "hooks", "post-checkout")); err == nil {
		t.Error("a hook reached the owner's repository")
	}
	if log := owner("log", "--format=%s", "agent"); !strings.Contains(log, "agent's work") {
		t.Errorf("the agent's commit is not in the owner's repository: %s", log)
	}
}
