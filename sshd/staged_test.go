package sshd

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pkg/sftp"

	"github.com/awcp/awcp/internal/stage"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// treeSum is every entry of dir with its mode and content (or link
// target), for comparing a tree before and after.
func treeSum(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			v += " " + hex.EncodeToString(sum[:]) + " " + fi.ModTime().String()
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readAll(t *testing.T, c *sftp.Client, name string) string {
	t.Helper()
	f, err := c.Open(name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

func names(t *testing.T, c *sftp.Client, dir string) []string {
	t.Helper()
	ents, err := c.ReadDir(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// A staged export as the agent sees it: it writes, creates, deletes,
// renames a directory and reads all of it back, while the owner's
// directory stays byte for byte as it was; the owner's later edit of a
// file the agent did not touch shows through, live. The area records
// each touched path with the owner's entry at the first touch.
func TestStagedViewLeavesTheOwnersTree(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"a.txt": "owner a\n", "keep.txt": "keep\n", "src/b.txt": "b\n", "src/c.txt": "c\n", "src/deep/d.txt": "d\n",
	})
	os.Symlink("src/b.txt", filepath.Join(dir, "link"))
	before := treeSum(t, dir)
	area, err := stage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := f.sftp(t, "dlg_staged", f.grant(t, "dlg_staged", Export{Dir: dir, Stage: area}))

	put := func(name, content string, flags int) {
		t.Helper()
		fh, err := c.OpenFile(name, flags)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		if _, err := fh.Write([]byte(content)); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		fh.Close()
	}
	put("a.txt", "agent a\n", os.O_WRONLY|os.O_TRUNC)
	fh, err := c.OpenFile("src/b.txt", os.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	fh.Seek(0, io.SeekEnd)
	fh.Write([]byte("more\n"))
	fh.Close()
	if _, err := c.OpenFile("new/dir/n.txt", os.O_WRONLY|os.O_CREATE); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("creating a file in a missing directory: %v", err)
	}
	if err := c.MkdirAll("new/dir"); err != nil {
		t.Fatal(err)
	}
	put("new/dir/n.txt", "new\n", os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err := c.Remove("src/c.txt"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove("keep.txt"); err != nil {
		t.Fatal(err)
	}
	if err := c.PosixRename("src", "lib"); err != nil {
		t.Fatal(err)
	}
	if err := c.Chmod("lib/deep/d.txt", 0o600); err != nil {
		t.Fatal(err)
	}

	if got := treeSum(t, dir); !sameTree(got, before) {
		t.Fatalf("the owner's directory changed:\nbefore %v\nafter  %v", before, got)
	}
	if got := readAll(t, c, "a.txt"); got != "agent a\n" {
		t.Errorf("a.txt reads %q", got)
	}
	if got := readAll(t, c, "lib/b.txt"); got != "b\nmore\n" {
		t.Errorf("lib/b.txt reads %q", got)
	}
	if got := readAll(t, c, "new/dir/n.txt"); got != "new\n" {
		t.Errorf("new/dir/n.txt reads %q", got)
	}
	if got, want := names(t, c, "."), []string{"a.txt", "lib", "link", "new"}; !slices.Equal(got, want) {
		t.Errorf("the root lists %v, want %v", got, want)
	}
	if got, want := names(t, c, "lib"), []string{"b.txt", "deep"}; !slices.Equal(got, want) {
		t.Errorf("lib lists %v, want %v", got, want)
	}
	for _, gone := range []string{"src", "src/b.txt", "keep.txt", "src/c.txt"} {
		if _, err := c.Lstat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want not found", gone, err)
		}
	}
	if fi, err := c.Stat("lib/deep/d.txt"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lib/deep/d.txt: %v %v", fi, err)
	}
	// The owner edits a file the agent never touched: the agent sees it.
	os.WriteFile(filepath.Join(dir, "link-target-free.txt"), []byte("later\n"), 0o644)
	if got := readAll(t, c, "link-target-free.txt"); got != "later\n" {
		t.Errorf("the owner's new file reads %q through the view", got)
	}

	paths, base := area.Changes()
	for _, want := range []string{"a.txt", "src/b.txt", "src/c.txt", "keep.txt", "src", "lib", "lib/b.txt", "new", "new/dir/n.txt"} {
		if _, ok := base[want]; !ok {
			t.Errorf("the area did not record %s (it has %v)", want, paths)
		}
	}
	if e := base["a.txt"]; e == nil || e.Size != int64(len("owner a\n")) {
		t.Errorf("a.txt's base is %+v, want the owner's", e)
	}
	if e := base["new/dir/n.txt"]; e != nil {
		t.Errorf("a created file's base is %+v, want none", e)
	}
	if b, err := os.ReadFile(filepath.Join(area.BaseDir(), "a.txt")); err != nil || string(b) != "owner a\n" {
		t.Errorf("the owner's a.txt kept as %q, %v", b, err)
	}
}

// sameTree compares two tree sums.
func sameTree(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The attacker holds a staged delegation's certificate. It writes past
// the write limit (through the copy-up of a large file of the owner's, and
// by plain writes), reaches hidden paths directly, through a symlink and
// by renaming the directory above them, and leads a symlink out of the
// export and writes through it. Every attempt is refused or stays in the
// staging area: the owner's directory is unchanged and nothing hidden is
// ever copied into the area.
func TestStagedViewAttacker(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	outside := t.TempDir()
	writeTree(t, dir, map[string]string{
		"big.bin": strings.Repeat("x", 64<<10), "small.txt": "s\n",
		".aws/credentials": "secret", "conf/.env": "TOKEN=1", "conf/app.json": "{}",
	})
	before := treeSum(t, dir)
	outBefore := treeSum(t, outside)
	area, err := stage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	policy := wire.ExportPolicy{Hide: append(slices.Clone(wire.DefaultHide), ".env"), MaxWriteBytes: 16 << 10}
	c := f.sftp(t, "dlg_stage_attack", f.grant(t, "dlg_stage_attack", Export{Dir: dir, Stage: area, Policy: policy}))

	// Past the write limit: the copy-up of 64 KiB is refused.
	if fh, err := c.OpenFile("big.bin", os.O_WRONLY|os.O_APPEND); err == nil {
		_, werr := fh.Write([]byte("y"))
		fh.Close()
		t.Errorf("appending to a 64 KiB file under a 16 KiB limit: open allowed, write %v", werr)
	}
	fh, err := c.OpenFile("fill.bin", os.O_WRONLY|os.O_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	_, werr := fh.Write(make([]byte, 32<<10))
	fh.Close()
	if werr == nil {
		t.Error("writing 32 KiB under a 16 KiB limit was allowed")
	}
	// Hidden paths.
	for _, p := range []string{".aws/credentials", "conf/.env", ".aws/new", "conf/.env.local"} {
		if _, err := c.OpenFile(p, os.O_WRONLY|os.O_CREATE); err == nil {
			t.Errorf("opening hidden %s for writing was allowed", p)
		}
	}
	if err := c.Symlink(".aws", "aws"); err == nil {
		if _, err := c.OpenFile("aws/credentials", os.O_WRONLY); err == nil {
			t.Error("writing .aws/credentials through a symlink was allowed")
		}
		if _, err := c.Open("aws/credentials"); err == nil {
			t.Error("reading .aws/credentials through a symlink was allowed")
		}
	}
	for _, mv := range [][2]string{{".aws", "aws2"}, {"conf", "conf2"}} {
		c.PosixRename(mv[0], mv[1])
		c.Rename(mv[0], mv[1])
	}
	for _, p := range []string{"aws2/credentials", "conf2/.env", "conf2/app.json/../.env"} {
		if _, err := c.Open(p); err == nil {
			t.Errorf("%s could be read after a rename of its parent", p)
		}
	}
	// Out of the export.
	if err := c.Symlink(outside, "out"); err == nil {
		if _, err := c.OpenFile("out/planted", os.O_WRONLY|os.O_CREATE); err == nil {
			t.Error("creating a file through a symlink leading out was allowed")
		}
	}
	if err := c.Symlink("../../../../../../../"+outside, "up"); err == nil {
		c.OpenFile("up/planted", os.O_WRONLY|os.O_CREATE)
	}

	if got := treeSum(t, dir); !sameTree(got, before) {
		t.Errorf("the owner's directory changed:\nbefore %v\nafter  %v", before, got)
	}
	if got := treeSum(t, outside); !sameTree(got, outBefore) {
		t.Errorf("a directory outside the export changed: %v", got)
	}
	filepath.WalkDir(area.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && (d.Name() == "credentials" || d.Name() == ".env") {
			t.Errorf("a hidden file was copied into the staging area: %s", p)
		}
		if err == nil && d.Name() == "big.bin" && !d.IsDir() && strings.Contains(p, "upper") {
			t.Errorf("the refused copy-up left %s", p)
		}
		return nil
	})
}
