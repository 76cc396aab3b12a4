package sshd

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// escapingLinks lists the symlinks under dir whose resolution leaves dir.
func escapingLinks(t *testing.T, dir string) []string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		// Resolve the link's directory, then the link: a target that
		// loops or dangles is fine as long as the part that resolves
		// stays inside.
		res, err := filepath.EvalSymlinks(p)
		if err != nil {
			target, _ := os.Readlink(p)
			res = filepath.Clean(filepath.Join(filepath.Dir(p), target))
			if parent, perr := filepath.EvalSymlinks(filepath.Dir(p)); perr == nil {
				res = filepath.Clean(filepath.Join(parent, target))
			}
			if !strings.Contains(target, "..") {
				return nil // descends only: whatever it names is inside
			}
		}
		if res != real && !strings.HasPrefix(res, real+"/") {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel+" -> "+res)
		}
		return nil
	})
	return out
}

// The planted-link attacks: each is refused, and no link in the tree
// leads out afterwards.
func TestNoEscapingSymlinkCanBePlanted(t *testing.T) {
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_links", false)
	sc := f.sftp(t, "dlg_links", cred)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s was allowed", what)
		} else if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s: %v, want permission denied", what, err)
		}
	}
	must("mkdir d", sc.Mkdir("/d"))
	must("mkdir a", sc.Mkdir("/a"))
	must("mkdir a/b", sc.Mkdir("/a/b"))
	must("mkdir lib", sc.Mkdir("/lib"))

	// Links that stay inside, as tools make them.
	must("dot -> .", sc.Symlink(".", "/dot"))
	must("d/up -> ..", sc.Symlink("..", "/d/up"))
	must("d/x -> ../lib/x", sc.Symlink("../lib/x", "/d/x"))
	must("a/b/top -> ../..", sc.Symlink("../..", "/a/b/top"))
	must("a/b/self -> ./../b", sc.Symlink("./../b", "/a/b/self"))

	// 1. Through a link made before: dot/.. is the root's parent.
	refused("par -> dot/..", sc.Symlink("dot/..", "/par"))
	refused("d/p -> up/..", sc.Symlink("up/..", "/d/p"))
	refused("par2 -> ..", sc.Symlink("..", "/par2"))
	refused("abs -> /etc", sc.Symlink("/etc", "/abs"))
	// 2. A link moved up: d/up -> .. is the root, up -> .. its parent.
	refused("rename d/up up", sc.Rename("/d/up", "/up"))
	refused("posix-rename d/up up", sc.PosixRename("/d/up", "/up"))
	refused("hard link d/up up", sc.Link("/d/up", "/up"))
	// Through a link in the path, the real depth counts: dot/d is d.
	refused("dot/d/p -> ../..", sc.Symlink("../..", "/dot/d/p"))
	// 3. A directory moved up that holds a link climbing out of it.
	refused("rename a/b b", sc.PosixRename("/a/b", "/b"))
	// Moves that keep every link's depth are fine.
	must("rename a/b a/c", sc.PosixRename("/a/b", "/a/c"))
	must("mkdir e", sc.Mkdir("/e"))
	must("rename d e/d (deeper)", sc.PosixRename("/d", "/e/d"))
	must("hard link e/d/x e/d/y", sc.Link("/e/d/x", "/e/d/y"))

	if bad := escapingLinks(t, dir); len(bad) > 0 {
		t.Fatalf("links leading out of the export: %v", bad)
	}
	for _, name := range []string{"par", "par2", "up", "b", "abs"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s exists after being refused", name)
		}
	}
}

// Random sequences of link-shaping requests never leave a link that leads
// out of the export.
func TestRandomLinkOperationsStayInside(t *testing.T) {
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_random", false)
	sc := f.sftp(t, "dlg_random", cred)
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "c", "a/a", "a/b", "b/a", "a/a/a", "c/b/a", "x/y", "x/y/z", "x/l", "x/y/l"}
	for _, d := range []string{"/a", "/b", "/c", "/x", "/x/y", "/a/a", "/c/b"} {
		sc.Mkdir(d)
	}
	targets := []string{".", "..", "../..", "../../..", "a", "a/..", "b/../..", "../a", "./..", "../a/..", "c/b"}
	pick := func(l []string) string { return l[rng.IntN(len(l))] }
	for range 3000 {
		from, to := "/"+pick(names), "/"+pick(names)
		switch rng.IntN(6) {
		case 0:
			sc.Mkdir(from)
		case 1:
			sc.Symlink(pick(targets), from)
		case 2:
			sc.PosixRename(from, to)
		case 3:
			sc.Link(from, to)
		case 4:
			sc.Symlink(pick(targets), "/"+pick(names)+"l")
		case 5:
			sc.Remove(from)
			sc.RemoveDirectory(from)
		}
	}
	links := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, _ error) error {
		if d != nil && d.Type()&fs.ModeSymlink != 0 {
			links++
		}
		return nil
	})
	if links == 0 {
		t.Fatal("the random requests made no link: the test checks nothing")
	}
	if bad := escapingLinks(t, dir); len(bad) > 0 {
		t.Fatalf("after random requests, links leading out of the export: %v", bad)
	}
	t.Logf("%d links, none leading out", links)
}
