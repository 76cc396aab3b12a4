package sshd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWatchTriggeredByDirectories: the portable source with kqueue's
// trigger (as macOS and FreeBSD run it), its period an hour: every change
// of a directory's entries is reported at once, in new and renamed
// directories too, without waiting for the period — and a write into a
// file that changes no entry is not, until the period (the trigger's
// stated limit: kqueue names no file).
func TestWatchTriggeredByDirectories(t *testing.T) {
	slow(t)
	defer func(was bool, every time.Duration, trig func() (dirTrigger, error)) {
		preferPoll, pollEvery, pollTrigger = was, every, trig
	}(preferPoll, pollEvery, pollTrigger)
	preferPoll, pollEvery, pollTrigger = true, time.Hour, newInotifyDirTrigger
	testWatchReportsOthersChanges(t, false, true)

	f := newFixture(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("one"), 0o644)
	c := sessionOn(t, f, "dlg_watch_trig", Export{Dir: dir})
	collect := watching(t, c, false)
	if got := collect(300 * time.Millisecond); !slices.Equal(got, []string{"<overflow>"}) {
		t.Fatalf("first answer %q, want an overflow", got)
	}
	os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("two"), 0o644)
	if got := collect(300 * time.Millisecond); len(got) != 0 {
		t.Fatalf("a write into a file reported %q before the period: kqueue says nothing of it", got)
	}
	os.Remove(filepath.Join(dir, "kept.txt"))
	if got := collect(300 * time.Millisecond); !slices.Equal(got, []string{"kept.txt"}) {
		t.Fatalf("a removal: reported %q", got)
	}
}
