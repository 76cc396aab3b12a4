//go:build linux

package delegator

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// serialAdmission is what admission counted when it walked the tree one
// directory at a time, in name order (filepath.WalkDir): the parallel walk
// must count the same.
func serialAdmission(t *testing.T, root string, hide []string) WorkspaceStats {
	t.Helper()
	m := wire.NewMatcher(hide)
	var st WorkspaceStats
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if m.Hidden(rel) {
			if st.HiddenCount++; len(st.Hidden) < maxHiddenListed {
				st.Hidden = append(st.Hidden, rel)
			}
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				parent := filepath.Dir(rel)
				if parent == "." {
					parent = ""
				}
				st.Repos = append(st.Repos, parent)
			}
			if archive.Skip(d.Name()) {
				return fs.SkipDir
			}
			return nil
		}
		st.Files++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			st.Bytes += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func write(t *testing.T, p string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAdmissionWalksSideBySideAndCountsAsInOrder: directories read by
// several goroutines at once, the counts, the hidden paths named and the
// repositories found are those of a walk in name order, every time.
func TestAdmissionWalksSideBySideAndCountsAsInOrder(t *testing.T) {
	root := t.TempDir()
	for i := range 60 {
		d := filepath.Join(root, fmt.Sprintf("p%02d", i%7), fmt.Sprintf("q%d", i))
		for j := range 5 {
			write(t, filepath.Join(d, fmt.Sprintf("f%d.go", j)), i*10+j)
		}
		if i%3 == 0 {
			write(t, filepath.Join(d, ".env"), 3) // hidden, 20 of them
		}
		if i%11 == 0 {
			write(t, filepath.Join(d, "key.pem"), 5)
		}
	}
	write(t, filepath.Join(root, "a", "x.txt"), 1)
	write(t, filepath.Join(root, "a-c"), 1) // '-' sorts before '/' as a string, after "a" as a name
	write(t, filepath.Join(root, ".env"), 1)
	write(t, filepath.Join(root, "secrets", "deep", "inside.txt"), 100) // a hidden directory: not entered
	for _, repo := range []string{"", "p03/q3", "a", ".config/tool"} {
		write(t, filepath.Join(root, repo, ".git", "HEAD"), 20) // not counted: .git is not entered
	}
	write(t, filepath.Join(root, "node_modules", "m", "index.js"), 1000)   // not entered
	if err := os.Symlink("p01", filepath.Join(root, "link")); err != nil { // a file, not followed
		t.Fatal(err)
	}
	hide := []string{".env", "*.pem", "secrets"}
	want := serialAdmission(t, root, hide)
	if want.HiddenCount <= maxHiddenListed || len(want.Repos) != 4 {
		t.Fatalf("the tree is not what the test means: %+v", want)
	}
	for range 10 {
		phys, got, err := Admit(root, AdmissionLimits{}, hide)
		if err != nil {
			t.Fatal(err)
		}
		if phys != root {
			t.Fatalf("physical path %q, want %q", phys, root)
		}
		if got.Files != want.Files || got.Bytes != want.Bytes || got.HiddenCount != want.HiddenCount ||
			!slices.Equal(got.Hidden, want.Hidden) || !slices.Equal(got.Repos, want.Repos) {
			t.Fatalf("admission counted\n %+v\nin order it is\n %+v", got, want)
		}
	}
}

// TestAdmissionLimitsNameTheFault: past each limit, the spec's code, and
// for a file too large, that file — the largest, whichever goroutine met it.
func TestAdmissionLimitsNameTheFault(t *testing.T) {
	root := t.TempDir()
	for i := range 40 {
		write(t, filepath.Join(root, fmt.Sprintf("d%d", i%8), fmt.Sprintf("f%d", i)), 100+i)
	}
	write(t, filepath.Join(root, "d3", "big.bin"), 5000)
	for _, c := range []struct {
		lim  AdmissionLimits
		says string
	}{
		{AdmissionLimits{MaxFileCount: 10}, "more than 10 files"},
		{AdmissionLimits{MaxTotalBytes: 2000}, "exceeds size limits"},
		{AdmissionLimits{MaxFileBytes: 4000}, "File d3/big.bin is too large"},
	} {
		_, _, err := Admit(root, c.lim, nil)
		var pe *control.ProtocolError
		if !errors.As(err, &pe) || pe.Code != control.CodeWorkspaceTooLarge || !strings.Contains(pe.Message, c.says) {
			t.Errorf("limits %+v: %v, want %s saying %q", c.lim, err, control.CodeWorkspaceTooLarge, c.says)
		}
	}
	if _, st, err := Admit(root, AdmissionLimits{}, nil); err != nil || st.Files != 41 {
		t.Fatalf("within the limits: %+v, %v", st, err)
	}

	// Too large: the largest files named, with the --hide that keeps each
	// out and the other ways on; the same five whichever goroutine met
	// them (f39, f38… are 139, 138… bytes, f31 and d3/big.bin in d3 too).
	write(t, filepath.Join(root, "d5", "we*ird name"), 4000)
	for range 10 {
		_, _, err := Admit(root, AdmissionLimits{MaxTotalBytes: 2000}, nil)
		var pe *control.ProtocolError
		if !errors.As(err, &pe) || !strings.HasSuffix(pe.Message, "; the largest files: d3/big.bin (4KB), d5/we*ird name (3KB), d7/f39 (139B), d6/f38 (138B), d5/f37 (137B)") ||
			!strings.Contains(pe.Hint, `--hide d3/big.bin --hide 'd5/we\*ird name' --hide d7/f39 --hide d6/f38 --hide d5/f37 keeps the largest out; or lend it live (--transport live)`) {
			t.Fatalf("size limit: %v\nhint: %s", err, pe.Hint)
		}
	}
	_, _, err := Admit(root, AdmissionLimits{MaxFileBytes: 3000}, nil)
	var pe *control.ProtocolError
	if !errors.As(err, &pe) || !strings.Contains(pe.Hint, `--hide d3/big.bin --hide 'd5/we\*ird name' keeps it out`) {
		t.Fatalf("file limit: %v\nhint: %s", err, pe.Hint)
	}
}
