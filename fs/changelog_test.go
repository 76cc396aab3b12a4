package fs

import (
	"fmt"
	"testing"
)

// The log holds each path once and at most maxLogged of them: a task that
// makes more files costs the mount no more memory, and says it left some
// out.
func TestChangeLogIsBoundedAndSaysSo(t *testing.T) {
	m := &Mount{fsys: &filesystem{}}
	l := &m.fsys.changed
	for i := range maxLogged {
		l.add(fmt.Sprintf("/d/f%d", i))
		l.add(fmt.Sprintf("/d/f%d", i)) // again: still one
	}
	l.add("/") // the root is no file's path
	if paths, complete := m.Changed(); len(paths) != maxLogged || !complete {
		t.Fatalf("%d paths, complete %v; want %d, complete", len(paths), complete, maxLogged)
	}
	l.add("/d/f0") // logged already: nothing left out
	if l.full {
		t.Fatal("a path logged already counted as left out")
	}
	l.add("/d/one-more")
	paths, complete := m.Changed()
	if len(paths) != maxLogged || complete {
		t.Fatalf("%d paths, complete %v; want %d, incomplete", len(paths), complete, maxLogged)
	}
	for _, p := range paths {
		if p == "d/one-more" {
			t.Fatal("a path past the bound was kept")
		}
	}
}
