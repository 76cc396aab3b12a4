package sshd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pkg/sftp"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// dirBytes is what the tree at dir holds: file sizes, symlink targets and
// names.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return nil
		}
		n += int64(len(fi.Name()))
		if fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			n += int64(len(target))
		} else if fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// The attacker holds a delegation's certificate under a 1 KiB write
// limit, and adds what is not file data: symlinks with 4 KB targets,
// directories, hard links, files grown by SETSTAT. What it adds stays
// within the limit.
func TestWriteLimitCountsEveryByte(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "owner.txt"), []byte("owner"), 0o644)
	before := dirBytes(t, dir)
	cred := f.grant(t, "dlg_limit", Export{Dir: dir, Policy: wire.ExportPolicy{MaxWriteBytes: 1 << 10}})
	c := f.sftp(t, "dlg_limit", cred)
	target := strings.Repeat("t", 4000)
	made := 0
	for i := range 200 {
		if c.Symlink(target, "l"+strings.Repeat("0", 200)+string(rune('a'+i%26))+strings.Repeat("x", i/26)) == nil {
			made++
		}
		c.Mkdir("d" + strings.Repeat("n", 200) + string(rune('a'+i%26)) + strings.Repeat("x", i/26))
		c.Link("owner.txt", "h"+strings.Repeat("n", 200)+string(rune('a'+i%26))+strings.Repeat("x", i/26))
	}
	if made > 0 {
		t.Errorf("%d symlinks with 4 KB targets were made under a 1 KiB limit", made)
	}
	if fh, err := c.Create("grow"); err == nil {
		fh.Close()
	}
	if err := c.Truncate("grow", 1<<30); err == nil {
		t.Error("a file was grown to 1 GiB by SETSTAT under a 1 KiB limit")
	}
	added := dirBytes(t, dir) - before
	// Names are counted with inodeCost each: what lands is within 1 KiB.
	if added > 1<<10 {
		t.Errorf("%d bytes were added under a 1 KiB limit", added)
	}
}

// --no-delete as the attacker tries it: nothing of the owner's goes away —
// not removed, not renamed or moved, not replaced, not truncated by an
// open or a SETSTAT — while the agent's own files come and go as it likes.
func TestNoDeleteKeepsEverythingOfTheOwners(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	owner := map[string]string{"main.go": "package main\n", "docs/guide.md": "# guide\n"}
	for name, content := range owner {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	cred := f.grant(t, "dlg_keep", Export{Dir: dir, Policy: wire.ExportPolicy{NoDelete: true}})
	c := f.sftp(t, "dlg_keep", cred)
	attempts := map[string]func() error{
		"remove main.go":          func() error { return c.Remove("main.go") },
		"rmdir docs":              func() error { return c.RemoveDirectory("docs") },
		"rename main.go away":     func() error { return c.Rename("main.go", "gone.go") },
		"posix-rename away":       func() error { return c.PosixRename("main.go", "gone.go") },
		"move docs":               func() error { return c.Rename("docs", "old-docs") },
		"truncate by SETSTAT":     func() error { return c.Truncate("main.go", 0) },
		"shorten by SETSTAT":      func() error { return c.Truncate("docs/guide.md", 2) },
		"truncate by open":        func() error { return openTrunc(c, "main.go") },
		"truncate by FSETSTAT":    func() error { return fTruncate(c, "docs/guide.md") },
		"replace by posix-rename": func() error { putFile(c, "mine", "x"); return c.PosixRename("mine", "main.go") },
	}
	for what, op := range attempts {
		if err := op(); err == nil {
			t.Errorf("%s: allowed under --no-delete", what)
		}
	}
	for name, content := range owner {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != content {
			t.Errorf("the owner's %s is %q (%v)", name, b, err)
		}
	}
	// The agent's own: made, renamed, emptied, removed.
	if err := c.Mkdir("scratch"); err != nil {
		t.Fatal(err)
	}
	if err := putFile(c, "scratch/tmp.txt", "temporary"); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		what string
		op   func() error
	}{
		{"rename its file", func() error { return c.Rename("scratch/tmp.txt", "scratch/tmp2.txt") }},
		{"truncate its file", func() error { return c.Truncate("scratch/tmp2.txt", 0) }},
		{"move its dir", func() error { return c.Rename("scratch", "scratch2") }},
		{"remove its file", func() error { return c.Remove("scratch2/tmp2.txt") }},
		{"remove its dir", func() error { return c.RemoveDirectory("scratch2") }},
	} {
		if err := step.op(); err != nil {
			t.Errorf("%s: %v", step.what, err)
		}
	}
}

func openTrunc(c *sftp.Client, name string) error {
	fh, err := c.OpenFile(name, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	return fh.Close()
}

func fTruncate(c *sftp.Client, name string) error {
	fh, err := c.OpenFile(name, os.O_WRONLY)
	if err != nil {
		return err
	}
	defer fh.Close()
	return fh.Truncate(0)
}

func putFile(c *sftp.Client, name, content string) error {
	fh, err := c.Create(name)
	if err != nil {
		return err
	}
	if _, err := fh.Write([]byte(content)); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
