package sshd

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// gitRepo makes a real repository in dir with one commit.
func gitRepo(t *testing.T, dir string) {
	t.Helper()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"}, {"config", "user.email", "o@x"}, {"config", "user.name", "owner"},
		{"add", "-A"}, {"commit", "-q", "-m", "base"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// The agent, holding the delegation's certificate, tries every way it
// has to make the owner's git run its command — write .git/config (its
// core.fsmonitor runs at the owner's next `git status`), plant a hook, an
// info/attributes, an alternates file, a `.git` file pointing elsewhere —
// named, through a symlinked directory, by rename, hard link and symlink,
// and by racing a symlink swap against its requests. Every one is refused
// (EACCES), nothing of it reaches the disk, and the owner's `git status`
// runs nothing; writing objects, refs and the index (a commit) still works.
func TestGitControlIsReadOnlyToTheExecutor(t *testing.T) {
	slow(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed (.ci/run installs it)")
	}
	f := newFixture(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644)
	gitRepo(t, dir)
	os.MkdirAll(filepath.Join(dir, "vendor", "lib"), 0o755)
	os.WriteFile(filepath.Join(dir, "vendor", "lib", "x.go"), []byte("package lib\n"), 0o644)
	gitRepo(t, filepath.Join(dir, "vendor", "lib"))
	config, _ := os.ReadFile(filepath.Join(dir, ".git", "config"))
	sample, _ := os.Stat(filepath.Join(dir, ".git", "hooks", "pre-commit.sample"))
	marker := filepath.Join(t.TempDir(), "pwned")
	evil := "[core]\n\tfsmonitor = \"touch " + marker + "; false\"\n"

	policy := wire.ExportPolicy{Hide: slices.Clone(wire.DefaultHide), ProtectGit: true}
	cred := f.grant(t, "dlg_git", Export{Dir: dir, Policy: policy})
	c := f.sftp(t, "dlg_git", cred)
	put := func(p, content string) error {
		fh, err := c.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
		if err != nil {
			return err
		}
		_, err = fh.Write([]byte(content))
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		return err
	}
	if err := put("evil", evil); err != nil {
		t.Fatal(err)
	}
	c.Mkdir("x")
	c.Mkdir("x/hooks")
	if err := c.Symlink(".git", "g"); err != nil {
		t.Fatal(err)
	}
	c.Mkdir("fake")
	put("fake/config", evil)
	attacks := map[string]func() error{
		"write .git/config": func() error { return put(".git/config", evil) },
		"append .git/config": func() error {
			fh, err := c.OpenFile(".git/config", os.O_WRONLY|os.O_APPEND)
			if err == nil {
				fh.Close()
			}
			return err
		},
		"create a hook":                  func() error { return put(".git/hooks/post-checkout", "#!/bin/sh\ntouch "+marker+"\n") },
		"create info/attributes":         func() error { return put(".git/info/attributes", "* filter=x\n") },
		"create objects/info/alternates": func() error { return put(".git/objects/info/alternates", "/etc\n") },
		"write a nested repo's config":   func() error { return put("vendor/lib/.git/config", evil) },
		"write config through g":         func() error { return put("g/config", evil) },
		"create a hook through g":        func() error { return put("g/hooks/pre-commit", "#!/bin/sh\n") },
		"rename onto .git/config":        func() error { return c.Rename("evil", ".git/config") },
		"posix-rename onto .git/config":  func() error { return c.PosixRename("evil", ".git/config") },
		"posix-rename into hooks via g":  func() error { return c.PosixRename("evil", "g/hooks/post-merge") },
		"link .git/config out":           func() error { return c.Link(".git/config", "cfg") },
		"link evil in as a hook":         func() error { return c.Link("evil", ".git/hooks/pre-push") },
		"symlink as a hook":              func() error { return c.Symlink("../../evil", ".git/hooks/post-commit") },
		"a .git file pointing elsewhere": func() error { return put("vendor/.git", "gitdir: ../fake\n") },
		"a .git symlink":                 func() error { return c.Symlink("../fake", "x/.git") },
		"rename a dir to .git":           func() error { return c.PosixRename("fake", "x/.git") },
		"rename .git away":               func() error { return c.PosixRename(".git", "dotgit") },
		"remove .git/config":             func() error { return c.Remove(".git/config") },
		"chmod a hook sample":            func() error { return c.Chmod(".git/hooks/pre-commit.sample", 0o777) },
		"truncate .git/config":           func() error { return c.Truncate(".git/config", 0) },
		"mkdir .git/modules/m":           func() error { return c.Mkdir(".git/modules/m") },
		"rename objects away":            func() error { return c.PosixRename(".git/objects", "objs") },
	}
	for name, attack := range attacks {
		if err := attack(); err == nil {
			t.Errorf("%s: allowed", name)
		} else if !os.IsPermission(err) {
			t.Errorf("%s: %v, want permission denied", name, err)
		}
	}

	// The race: one session flips g between x (a plain directory with
	// hooks/) and .git while another renames and creates through it.
	c2 := f.sftp(t, "dlg_git", cred)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			c2.Remove("g2")
			target := "x"
			if i%2 == 1 {
				target = ".git"
			}
			c2.Symlink(target, "g2")
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		put("src", "#!/bin/sh\ntouch "+marker+"\n")
		c.PosixRename("src", "g2/hooks/post-checkout")
		put("g2/hooks/pre-commit", "#!/bin/sh\n")
		put("g2/config", evil)
		c.Link("evil", "g2/hooks/post-merge")
		c.Symlink("../evil", "g2/hooks/pre-rebase")
		c.Truncate("g2/config", 1)
		c.Chmod("g2/config", 0o777)
	}
	stop.Store(true)
	wg.Wait()

	if got, _ := os.ReadFile(filepath.Join(dir, ".git", "config")); string(got) != string(config) {
		t.Errorf(".git/config changed:\n%s", got)
	}
	for _, p := range []string{".git/hooks/post-checkout", ".git/hooks/pre-commit", ".git/hooks/post-merge", ".git/hooks/pre-rebase",
		".git/hooks/pre-push", ".git/hooks/post-commit", ".git/info/attributes", ".git/objects/info/alternates",
		"vendor/.git", "x/.git", "cfg", ".git/modules"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was made", p)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, ".git", "hooks", "pre-commit.sample")); fi == nil || fi.Mode() != sample.Mode() {
		t.Error("a hook sample's mode changed")
	}
	if out, err := exec.Command("git", "-C", dir, "status", "--short").CombinedOutput(); err != nil {
		t.Errorf("git status: %v\n%s", err, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the owner's git status ran the agent's command")
	}

	// What a commit writes is still the agent's: objects, refs, the
	// index by its lock and rename, and a new repository's directory.
	for p, content := range map[string]string{".git/objects/ab/cdef0123": "x", ".git/refs/heads/agent": "0000\n", ".git/index.lock": "idx"} {
		c.MkdirAll(filepath.Dir(p))
		if err := put(p, content); err != nil {
			t.Errorf("write %s: %v", p, err)
		}
	}
	if err := c.PosixRename(".git/index.lock", ".git/index"); err != nil {
		t.Errorf("rename the index into place: %v", err)
	}
	if err := c.Mkdir("new"); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir("new/.git"); err != nil {
		t.Errorf("mkdir new/.git: %v", err)
	}
}
