package fs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// statfs is answered from the last statvfs for a second — df and file
// servers ask it many times a second — but space freed through the mount
// shows in the next answer: a remove voids what was kept.
func TestStatfsKeptBriefly(t *testing.T) {
	slow(t)
	f := newMount(t, false)
	asked := func() float64 {
		return f.asked(t, "statvfs")
	}
	statfs := func() syscall.Statfs_t {
		t.Helper()
		var st syscall.Statfs_t
		if err := syscall.Statfs(f.mnt, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	big := filepath.Join(f.mnt, "big")
	if err := os.WriteFile(big, make([]byte, 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	statfs()
	n := asked()
	for range 10 {
		statfs()
	}
	if got := asked() - n; got != 0 {
		t.Errorf("10 statfs within a second asked the delegator %v times", got)
	}
	before := statfs()
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	after := statfs()
	if got := asked() - n; got != 1 {
		t.Errorf("the statfs after a remove asked %v times, want once", got)
	}
	if freed := int64(after.Bavail-before.Bavail) * after.Bsize; freed < 32<<20 {
		t.Errorf("the 64 MiB removed show as %d bytes freed", freed)
	}
	time.Sleep(statfsFresh + 100*time.Millisecond)
	statfs()
	if got := asked() - n; got != 2 {
		t.Errorf("a statfs after a second asked %v times in all, want 2", got)
	}
}
