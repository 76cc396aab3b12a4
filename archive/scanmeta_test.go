package archive

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestScanMetaSideBySideIsTheWalksScan: the scan that reads directories
// side by side finds what the package's walk, one directory at a time in
// name order, finds: the same entries, the same rules (node_modules and
// .git left out, a symlink leading out and a FIFO left out), every time.
func TestScanMetaSideBySideIsTheWalksScan(t *testing.T) {
	dir := t.TempDir()
	for i := range 40 {
		d := filepath.Join(dir, fmt.Sprintf("p%d", i%6), fmt.Sprintf("q%d", i))
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", j)), make([]byte, i+j), fs.FileMode(0o600+j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range []string{".git/HEAD", "node_modules/m/index.js", "p1/node_modules/x", "p2/.git/config"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"p0/in": "../p1", "p0/q0/out": "../../../etc/passwd", "abs": "/etc"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "p3", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := Manifest{}
	if _, _, err := walk(dir, nil, func(rel string, info fs.FileInfo, target string, _ func() (*os.File, error)) error {
		e := entryOf(info, target)
		if e.Kind == KindFile {
			e.Hash = fmt.Sprintf("mtime:%d", info.ModTime().UnixNano())
		}
		want[rel] = e
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := want["p0/in"]; !ok || len(want) < 200 {
		t.Fatalf("the tree is not what the test means: %d entries", len(want))
	}
	for range 5 {
		got, err := ScanMeta(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			for p, e := range want {
				if got[p] != e {
					t.Errorf("%s: %+v, the walk found %+v", p, got[p], e)
				}
			}
			for p := range got {
				if _, ok := want[p]; !ok {
					t.Errorf("%s: found, the walk left it out", p)
				}
			}
			t.FailNow()
		}
	}
}
