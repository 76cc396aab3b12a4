package fs

import (
	"fmt"
	"runtime"
	"strings"
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

// Long names fill the log by their bytes before their count.
func TestChangeLogIsBoundedInBytes(t *testing.T) {
	var l changeLog
	long := strings.Repeat("n", 4000)
	for i := range maxLogged {
		l.add(fmt.Sprintf("/%s/%d", long, i))
	}
	if !l.full || l.bytes > maxLoggedBytes || len(l.paths) >= maxLogged {
		t.Fatalf("%d paths of %d bytes in all, full %v; want at most %d bytes", len(l.paths), l.bytes, l.full, maxLoggedBytes)
	}
}

// BenchmarkChangeLogHeld: what a mount's change log holds at its bound,
// the worst case (names of 4 KiB): make bench's figure for maxLoggedBytes.
func BenchmarkChangeLogHeld(b *testing.B) {
	long := strings.Repeat("n", 4000)
	var held uint64
	for range b.N {
		before := heapNow()
		l := &changeLog{}
		for i := range 2 * maxLogged {
			l.add(fmt.Sprintf("/%s/%d", long, i))
		}
		after := heapNow()
		held = after - min(before, after)
		runtime.KeepAlive(l)
	}
	b.ReportMetric(float64(held)/(1<<20), "MiB-held")
}
