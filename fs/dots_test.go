package fs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/awcp/awcp/sshd"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// The mount next to sshfs and a local disk: a listing holds "." and
// "..", and every inode number, the root's included, is a real one (ls
// -i prints "?" for 0).
func TestListingsHoldDotsAndInodes(t *testing.T) {
	f := newMount(t, false)
	os.Mkdir(filepath.Join(f.dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(f.dir, "sub", "a"), []byte("a"), 0o644)
	for _, dir := range []string{f.mnt, filepath.Join(f.mnt, "sub")} {
		out, err := exec.Command("ls", "-a1", dir).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), ".\n..\n") {
			t.Errorf("ls -a %s: %v\n%s", dir, err, out)
		}
	}
	var root, sub syscall.Stat_t
	if err := syscall.Stat(f.mnt, &root); err != nil || root.Ino == 0 {
		t.Errorf("the root's inode: %d, %v", root.Ino, err)
	}
	if err := syscall.Stat(filepath.Join(f.mnt, "sub"), &sub); err != nil || sub.Ino == 0 || sub.Ino == root.Ino {
		t.Errorf("sub's inode: %d (root %d), %v", sub.Ino, root.Ino, err)
	}
	out, err := exec.Command("ls", "-ia1", filepath.Join(f.mnt, "sub")).CombinedOutput()
	if err != nil || strings.Contains(string(out), "?") {
		t.Errorf("ls -ia sub: %v\n%s", err, out)
	}
}

// A hidden file that git tracks is refused (EACCES), never missing: git
// in the mount warns about it, and never takes it for deleted — so `git
// commit -a` by an agent cannot record the owner's secret as removed.
func TestHiddenTrackedFileUnderGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (the CI installs it)")
	}
	f := newMountOf(t, sshd.Export{Policy: wire.ExportPolicy{Hide: []string{".env"}}}, nil)
	dir := f.dir
	// git -C, never cmd.Dir: a child that chdirs into this process's own
	// mount before its exec asks the mount while the parent waits in a
	// raw syscall for that exec — and a garbage collection then can never
	// stop the world: the whole test process hangs.
	git := func(in string, args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-C", in, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "safe.directory=*"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	os.WriteFile(filepath.Join(dir, ".env"), []byte("SECRET=1\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644)
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-qm", "init"}} {
		if out, err := git(dir, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if _, err := os.ReadFile(filepath.Join(f.mnt, ".env")); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("reading the hidden file: %v, want EACCES", err)
	}
	out, _ := git(f.mnt, "status", "--porcelain")
	t.Logf("git status in the mount:\n%s", out)
	if strings.Contains(out, "D .env") || strings.Contains(out, "deleted") {
		t.Fatalf("git in the mount takes the hidden file for deleted:\n%s", out)
	}
	git(f.mnt, "commit", "-qam", "by the agent")
	if out, _ := git(dir, "ls-files"); !strings.Contains(out, ".env") {
		t.Fatalf("the owner's repository lost .env:\n%s", out)
	}
}
