package fs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWalkReadsAhead: a walk of a tree the mount has not listed finds most
// directories' listings read ahead (asked for at once, in the
// background), not asked for one after another; and a listing read ahead
// never shows what changed since — on the owner's side, or through the
// mount.
func TestWalkReadsAhead(t *testing.T) {
	slow(t)
	f := newMountWith(t, false, nil)
	waitExact(t, f)
	owner(t, f.dir, `for a in $(seq 10); do for b in $(seq 20); do mkdir -p t$a/d$b && : > t$a/d$b/f; done; done`)
	time.Sleep(2 * renotifyAfter) // the watch's reports of making it, told twice

	listed := func() float64 { return f.asked(t, "list") }
	before := listed()
	used := f.mount.fsys.dirsAhead.used.Load()
	dirs := 0
	err := filepath.WalkDir(f.mnt, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			dirs++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	hits := int(f.mount.fsys.dirsAhead.used.Load() - used)
	t.Logf("%d directories walked, %d listings read ahead and used, %v listings asked for", dirs, hits, listed()-before)
	if dirs != 211 {
		t.Fatalf("walked %d directories, want 211", dirs)
	}
	if hits < dirs*3/4 {
		t.Errorf("%d of %d listings were read ahead, want three quarters at least", hits, dirs)
	}

	// Each case lists u$i, which reads its subdirectories ahead, waits
	// for them, changes one, and lists it.
	readAhead := func(p string) {
		t.Helper()
		if _, err := os.ReadDir(filepath.Join(f.mnt, filepath.Dir(p))); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(2 * time.Second); !f.mount.fsys.dirsAhead.holds("/" + p); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not read ahead", p)
			}
		}
	}
	inMount := func(p string) []string { t.Helper(); return names(t, filepath.Join(f.mnt, p)) }
	// A tree the mount has not listed yet.
	owner(t, f.dir, `for a in $(seq 10); do for b in $(seq 5); do mkdir -p u$a/d$b && : > u$a/d$b/f; done; done`)
	time.Sleep(2 * renotifyAfter)

	readAhead("u1/d3")
	owner(t, f.dir, ": > u1/d3/theirs")
	for start := time.Now(); !slices.Equal(inMount("u1/d3"), []string{"f", "theirs"}); time.Sleep(time.Millisecond) {
		if time.Since(start) > 50*time.Millisecond {
			t.Fatalf("the owner's new file not listed after 50 ms: %v", inMount("u1/d3"))
		}
	}

	readAhead("u2/d3")
	if err := os.WriteFile(filepath.Join(f.mnt, "u2/d3/ours"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := inMount("u2/d3"); !slices.Equal(got, []string{"f", "ours"}) {
		t.Errorf("after the mount made a file: listed %v", got)
	}

	readAhead("u3/d3")
	if err := os.Rename(filepath.Join(f.mnt, "u3/d3"), filepath.Join(f.mnt, "u3/gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.mnt, "u3/d3"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := inMount("u3/d3"); len(got) != 0 {
		t.Errorf("a new directory where one was renamed from: listed %v, want it empty", got)
	}

	readAhead("u4/d3")
	if err := os.Remove(filepath.Join(f.mnt, "u4/d3/f")); err != nil {
		t.Fatal(err)
	}
	if got := inMount("u4/d3"); len(got) != 0 {
		t.Errorf("after the mount removed its file: listed %v, want none", got)
	}
	// Any report of the watch voids every listing read ahead: one
	// whose directory the kernel has no node of is not reached otherwise.
	readAhead("u5/d3")
	owner(t, f.dir, ": > elsewhere")
	for start := time.Now(); f.mount.fsys.dirsAhead.holds("/u5/d3"); time.Sleep(time.Millisecond) {
		if time.Since(start) > 50*time.Millisecond {
			t.Fatal("a listing read ahead outlived the watch's report of a change")
		}
	}
	for i := 5; i <= 10; i++ {
		if got := inMount(fmt.Sprintf("u%d/d3", i)); !slices.Equal(got, []string{"f"}) {
			t.Errorf("u%d/d3: listed %v", i, got)
		}
	}
}

// holds reports whether p's listing is read ahead and kept.
func (a *listAhead) holds(p string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.kept[p] != nil
}
