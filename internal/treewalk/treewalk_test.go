package treewalk

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

func tree(t *testing.T) (root string, dirs []string) {
	t.Helper()
	root = t.TempDir()
	dirs = []string{"."}
	for i := range 30 {
		d := path.Join(fmt.Sprintf("a%d", i%4), fmt.Sprintf("b%d", i), "c")
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		for p := d; p != "."; p = path.Dir(p) {
			if !slices.Contains(dirs, p) {
				dirs = append(dirs, p)
			}
		}
	}
	slices.Sort(dirs)
	return root, dirs
}

// collect walks root descending into every subdirectory and returns the
// directories visited, sorted.
func collect(t *testing.T, root string) []string {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	err := Walk(root, func(rel string, _ int, ents []os.DirEntry) ([]string, error) {
		mu.Lock()
		seen = append(seen, rel)
		mu.Unlock()
		var sub []string
		for _, e := range ents {
			if e.IsDir() {
				sub = append(sub, path.Join(rel, e.Name()))
			}
		}
		return sub, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	return seen
}

// TestEveryDirectoryOnce: each directory is visited once, whatever order
// the goroutines take them in.
func TestEveryDirectoryOnce(t *testing.T) {
	root, dirs := tree(t)
	for range 5 {
		if got := collect(t, root); !slices.Equal(got, dirs) {
			t.Fatalf("visited %v, want %v", got, dirs)
		}
	}
}

// TestNeverThroughASymlink: a directory handed back to descend into that is
// a symlink (one leading out, one leading inside), or is gone, is not entered.
func TestNeverThroughASymlink(t *testing.T) {
	root, _ := tree(t)
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(outside, "secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Symlink(outside, filepath.Join(root, "out"))
	os.Symlink("a1", filepath.Join(root, "in"))
	var mu sync.Mutex
	var seen []string
	err := Walk(root, func(rel string, _ int, ents []os.DirEntry) ([]string, error) {
		mu.Lock()
		seen = append(seen, rel)
		mu.Unlock()
		if rel == "." { // as if both links had been directories when listed, and one more since removed
			return []string{"out", "in", "gone"}, nil
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(seen); !slices.Equal(seen, []string{"."}) {
		t.Fatalf("entered %v", seen)
	}
}

// TestStops: SkipAll ends the walk without an error, another error ends it
// with that error, and the walk returns only once every reader has.
func TestStops(t *testing.T) {
	root := t.TempDir()
	const wide = 5 * Workers // far more than a stop can let through
	for i := range wide {
		if err := os.Mkdir(filepath.Join(root, fmt.Sprint("d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, stop := range []error{SkipAll, errors.New("refused")} {
		want := stop
		if stop == SkipAll {
			want = nil
		}
		var mu sync.Mutex
		n := 0
		err := Walk(root, func(rel string, _ int, ents []os.DirEntry) ([]string, error) {
			mu.Lock()
			n++
			mu.Unlock()
			if rel != "." {
				return nil, stop
			}
			var sub []string
			for _, e := range ents {
				sub = append(sub, e.Name())
			}
			return sub, nil
		})
		if err != want {
			t.Errorf("stopped by %v: Walk returned %v", stop, err)
		}
		// The root, then at most one directory a reader had taken when
		// the first of them stopped the walk.
		if n > 1+Workers {
			t.Errorf("stopped by %v: %d of %d directories read, at most %d were started before the stop", stop, n, 1+wide, 1+Workers)
		}
	}
	if err := Walk(filepath.Join(root, "missing"), func(string, int, []os.DirEntry) ([]string, error) { return nil, nil }); err == nil {
		t.Error("a missing root: no error")
	}
}

// TestPages: a directory of more than PageSize names is handed over a page
// at a time, every name once; an empty one is visited once.
func TestPages(t *testing.T) {
	root := t.TempDir()
	wide := filepath.Join(root, "wide")
	os.Mkdir(wide, 0o755)
	os.Mkdir(filepath.Join(root, "empty"), 0o755)
	const n = 2*PageSize + 100
	for i := range n {
		if err := os.WriteFile(filepath.Join(wide, fmt.Sprint("f", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	visits := map[string]int{}
	names := map[string]bool{}
	err := Walk(root, func(rel string, _ int, ents []os.DirEntry) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		visits[rel]++
		if len(ents) > PageSize {
			t.Errorf("%s: a page of %d", rel, len(ents))
		}
		var sub []string
		for _, e := range ents {
			if e.IsDir() {
				sub = append(sub, path.Join(rel, e.Name()))
			} else if rel == "wide" {
				if names[e.Name()] {
					t.Errorf("%s handed over twice", e.Name())
				}
				names[e.Name()] = true
			}
		}
		return sub, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if visits["wide"] != 3 || len(names) != n || visits["empty"] != 1 || visits["."] != 1 {
		t.Fatalf("visits %v, %d names", visits, len(names))
	}
}
