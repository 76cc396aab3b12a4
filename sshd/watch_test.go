//go:build linux

package sshd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// TestWatchReportsOthersChanges: watch@awcp's first answer drops every
// cache; then it names what changed in the export by other hands — in a
// directory made meanwhile too — and never a hidden path, nor what the
// session itself changed.
func TestWatchReportsOthersChanges(t *testing.T) {
	slow(t)
	for _, fan := range []bool{true, false} {
		name := map[bool]string{true: "fanotify", false: "inotify"}[fan]
		t.Run(name, func(t *testing.T) {
			defer func(was bool) { preferFanotify = was }(preferFanotify)
			preferFanotify = fan
			testWatchReportsOthersChanges(t, fan, false)
		})
	}
	// The portable source, macOS's and FreeBSD's, polled each 40 ms.
	t.Run("poll", func(t *testing.T) {
		defer func(was bool, every time.Duration) { preferPoll, pollEvery = was, every }(preferPoll, pollEvery)
		preferPoll, pollEvery = true, 40*time.Millisecond
		testWatchReportsOthersChanges(t, false, false)
	})
}

// late: the source sees a write into a file made a moment before only at
// its directory's next look (kqueue's trigger).
func testWatchReportsOthersChanges(t *testing.T, exact, late bool) {
	f := newFixture(t)
	dir := t.TempDir()
	c := sessionOn(t, f, "dlg_watch", Export{Dir: dir, Policy: wire.ExportPolicy{Hide: []string{"*.key"}}})
	if !c.Watches() {
		t.Fatal("the server does not announce watch@awcp")
	}
	collect := watching(t, c, exact)
	if got := collect(500 * time.Millisecond); !slices.Equal(got, []string{"<overflow>"}) {
		t.Fatalf("first answer %q, want an overflow", got)
	}

	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(dir, "id.key"), []byte("secret"), 0o600)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	time.Sleep(100 * time.Millisecond) // the new directory is watched
	os.WriteFile(filepath.Join(dir, "sub", "deep.txt"), []byte("d"), 0o644)
	if got := collect(300 * time.Millisecond); !slices.Equal(got, []string{"a.txt", "sub", "sub/deep.txt"}) {
		t.Fatalf("reported %q, want a.txt, sub and sub/deep.txt (and not id.key)", got)
	}

	// A directory renamed inside the export is watched under its new name;
	// one moved out of it is no longer watched.
	os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "moved"))
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(filepath.Join(dir, "moved", "after.txt"), nil, 0o644)
	got := collect(300 * time.Millisecond)
	if late {
		// The directory's next look finds deep.txt's contents, written
		// after its creation raised the trigger: reported late, not lost
		// (under the directory's old name or its new one).
		got = slices.DeleteFunc(got, func(p string) bool { return p == "sub/deep.txt" || p == "moved/deep.txt" })
	}
	if !slices.Equal(got, []string{"moved", "moved/after.txt", "sub"}) {
		t.Fatalf("after a directory's rename, reported %q", got)
	}
	outside := filepath.Join(t.TempDir(), "out")
	os.Rename(filepath.Join(dir, "moved"), outside)
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(filepath.Join(outside, "gone.txt"), nil, 0o644)
	if got := collect(300 * time.Millisecond); !slices.Equal(got, []string{"moved"}) {
		t.Fatalf("after a directory moved out, reported %q", got)
	}

	// The session's own changes are not reported back to it.
	mine, err := c.OpenFile("mine.txt", wire.FlagWrite|wire.FlagCreat|wire.FlagTrunc, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mine.WriteAt([]byte("mine"), 0); err != nil {
		t.Fatal(err)
	}
	if err := mine.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.PosixRename("mine.txt", "mine2.txt"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "theirs.txt"), nil, 0o644)
	if got := collect(300 * time.Millisecond); !slices.Equal(got, []string{"theirs.txt"}) {
		t.Fatalf("reported %q, want only theirs.txt", got)
	}
}

// watchClient is an SFTP session of ours on a new directory lent as id.
func watchClient(t *testing.T, f *fixture, id string) (string, *sftpc.Client) {
	t.Helper()
	dir := t.TempDir()
	return dir, sessionOn(t, f, id, Export{Dir: dir})
}

// TestWatchBounds: what one watch holds is bounded. Changes pile up to 512
// paths while the client does not ask; past that the answer is "drop
// everything", not a longer list. An export of more than 8,192
// directories is not watched at all (the client keeps its timeouts).
func TestWatchBounds(t *testing.T) {
	slow(t)
	defer func(was bool) { preferWholeFS = was }(preferWholeFS)
	preferWholeFS = false // a mark a directory, as a delegator not run as root has
	f := newFixture(t)
	dir, c := watchClient(t, f, "dlg_watch_piles")
	ctx := context.Background()
	if ch, err := c.Watch(ctx); err != nil || !ch.Overflow {
		t.Fatalf("first answer: overflow %v, %v", ch.Overflow, err)
	}
	for i := range 600 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), nil, 0o644)
	}
	time.Sleep(200 * time.Millisecond)
	if ch, err := c.Watch(ctx); err != nil || !ch.Overflow || len(ch.Paths) != 0 {
		t.Fatalf("after 600 changes unasked: %d paths, overflow %v, %v", len(ch.Paths), ch.Overflow, err)
	}
	os.WriteFile(filepath.Join(dir, "one"), nil, 0o644)
	if ch, err := c.Watch(ctx); err != nil || ch.Overflow || !slices.Equal(ch.Paths, []string{"one"}) {
		t.Fatalf("after the overflow, one change: %q, overflow %v, %v", ch.Paths, ch.Overflow, err)
	}

	dir, c = watchClient(t, f, "dlg_watch_big")
	for i := range maxWatchDirs + 1 {
		if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("d%05d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Watch(ctx); !errors.Is(err, sftpc.ErrNoWatch) {
		t.Fatalf("an export of %d directories: %v, want it not watched", maxWatchDirs+2, err)
	}
}

// watching runs c's watch until the test ends; reported gathers what it
// reports within d, sorted, without repeats ("<overflow>" for an
// overflow, "<exact false>" for an answer that is not exact where one was
// expected, and the other way round).
func watching(t *testing.T, c *sftpc.Client, exact bool) (reported func(d time.Duration) []string) {
	answers := make(chan sftpc.Changes, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ch, err := c.Watch(ctx)
			if err != nil {
				return
			}
			answers <- ch
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func(d time.Duration) []string {
		var got []string
		deadline := time.After(d)
		for {
			select {
			case ch := <-answers:
				got = append(got, ch.Paths...)
				if ch.Overflow {
					got = append(got, "<overflow>")
				}
				if ch.Exact != exact {
					got = append(got, fmt.Sprintf("<exact %v>", ch.Exact))
				}
			case <-deadline:
				slices.Sort(got)
				return slices.Compact(got)
			}
		}
	}
}

// writeVia writes data to name through c, as a mount would.
func writeVia(t *testing.T, c *sftpc.Client, name, data string) {
	t.Helper()
	f, err := c.OpenFile(name, wire.FlagWrite|wire.FlagCreat|wire.FlagTrunc, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(data), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// owner runs script in dir as the delegator's user would: in another
// process (this one is the server's, whose changes the watch attributes
// to its sessions).
func owner(t *testing.T, script, dir string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-ec", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", script, err, out)
	}
}

// TestWatchIsExact: on a local file system of a Linux with fanotify
// (5.13 on, as every machine running these tests), the watch is exact:
// the kernel says which process made each change, so the owner's change
// to a file the session has just written is reported, however soon after
// — with inotify the session's own-change window hid it. Of this
// process's own changes, a session is told those another session made,
// on the same export too; and where two sessions change a file of the
// same name at once, each is told. A directory the session makes is
// watched before its mkdir is answered; one the owner makes is reported
// once watched, with what was made in it before.
func TestWatchIsExact(t *testing.T) {
	slow(t)
	f := newFixture(t)
	dir := t.TempDir()
	a := sessionOn(t, f, "dlg_exact_a", Export{Dir: dir})
	b := sessionOn(t, f, "dlg_exact_b", Export{Dir: dir})
	fromA, fromB := watching(t, a, true), watching(t, b, true)
	if got := fromA(300 * time.Millisecond); !slices.Equal(got, []string{"<overflow>"}) {
		t.Fatalf("first answer %q, want an exact overflow", got)
	}
	fromB(100 * time.Millisecond)

	// The owner's write 5 ms after the session's own, to the same file.
	writeVia(t, a, "x.txt", "agent")
	time.Sleep(5 * time.Millisecond)
	owner(t, "printf owner > x.txt", dir)
	if got := fromA(300 * time.Millisecond); !slices.Equal(got, []string{"x.txt"}) {
		t.Fatalf("after the owner's write right behind the session's: %q, want x.txt", got)
	}
	// b made none of it: it is told of both.
	if got := fromB(100 * time.Millisecond); !slices.Equal(got, []string{"x.txt"}) {
		t.Fatalf("the other session was told %q, want x.txt", got)
	}

	// Only a's own write: a is not told; b is.
	writeVia(t, a, "y.txt", "agent")
	if got := fromA(300 * time.Millisecond); len(got) != 0 {
		t.Fatalf("a was told of its own write: %q", got)
	}
	if got := fromB(100 * time.Millisecond); !slices.Equal(got, []string{"y.txt"}) {
		t.Fatalf("b was told %q of a's write, want y.txt", got)
	}

	// Both write z.txt at once: each is told, since either may have made
	// the last change.
	writeVia(t, a, "z.txt", "a")
	writeVia(t, b, "z.txt", "b")
	if got := fromA(300 * time.Millisecond); !slices.Equal(got, []string{"z.txt"}) {
		t.Fatalf("a was told %q after both wrote z.txt, want z.txt", got)
	}
	if got := fromB(100 * time.Millisecond); !slices.Equal(got, []string{"z.txt"}) {
		t.Fatalf("b was told %q after both wrote z.txt, want z.txt", got)
	}

	// A directory a makes is watched once made: the owner's file in it,
	// right after, is reported.
	if err := a.StartMkdir("made", 0o755).Err(); err != nil {
		t.Fatal(err)
	}
	owner(t, ": > made/owner.txt", dir)
	if got := fromA(300 * time.Millisecond); !slices.Contains(got, "made/owner.txt") {
		t.Fatalf("after the owner wrote in a directory a made: %q, want made/owner.txt", got)
	}
	// The owner's directories, and a file made in them at once, whatever
	// the watch's timing: the directory is reported once watched.
	owner(t, "mkdir -p theirs/deep && : > theirs/deep/f", dir)
	// (What the watcher finds made in it by then is not listed: the
	// client drops a named directory with all below it.)
	if got := fromA(300 * time.Millisecond); !slices.Contains(got, "theirs") {
		t.Fatalf("after the owner's new directories: %q, want theirs", got)
	}
	owner(t, ": > theirs/deep/g", dir)
	if got := fromA(300 * time.Millisecond); !slices.Equal(got, []string{"theirs/deep/g"}) {
		t.Fatalf("after a file in the owner's new directory: %q", got)
	}
}

// TestWatchBoundedAgainstTheAgent: an agent that makes directories without
// end cannot make the watch hold marks without end. Past the ceiling
// (maxFanotifyMarks) the watch says so — an overflow that is no longer
// exact — and the client keeps its timeouts; the session goes on.
func TestWatchBoundedAgainstTheAgent(t *testing.T) {
	slow(t)
	t.Run("a mark a directory", func(t *testing.T) {
		defer func(was bool) { preferWholeFS = was }(preferWholeFS)
		preferWholeFS = false
		watchBoundedAgainstTheAgent(t, maxFanotifyMarks)
	})
	t.Run("one mark for the file system", func(t *testing.T) {
		defer func(was int) { maxWatchDirsWhole = was }(maxWatchDirsWhole)
		maxWatchDirsWhole = 3000 // its bound, lowered to be reached soon
		watchBoundedAgainstTheAgent(t, maxWatchDirsWhole)
	})
}

func watchBoundedAgainstTheAgent(t *testing.T, bound int) {
	f := newFixture(t)
	dir := t.TempDir()
	c := sessionOn(t, f, "dlg_watch_agent", Export{Dir: dir})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ch, err := c.Watch(ctx); err != nil || !ch.Exact {
		t.Fatalf("first answer: exact %v, %v", ch.Exact, err)
	}
	lost := make(chan sftpc.Changes, 1)
	go func() {
		for {
			ch, err := c.Watch(ctx)
			if err != nil || !ch.Exact {
				lost <- ch
				return
			}
		}
	}()
	const batch = 512
	for made := 0; made < bound+batch; made += batch {
		calls := make([]*sftpc.Call, batch)
		for i := range calls {
			calls[i] = c.StartMkdir(fmt.Sprintf("d%05d", made+i), 0o755)
		}
		for _, call := range calls {
			if err := call.Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case ch := <-lost:
		if ch.Exact || !ch.Overflow {
			t.Fatalf("past %d directories: exact %v, overflow %v; want an overflow no longer exact", bound, ch.Exact, ch.Overflow)
		}
	case <-ctx.Done():
		t.Fatalf("past %d directories the watch still says it is exact", bound)
	}
	if _, err := c.Lstat("d00000"); err != nil {
		t.Fatalf("the session after the watch gave up: %v", err)
	}
}

// TestWatchWholeFileSystem: where one mark covers the export's file
// system (the server runs as root), an export of far more directories
// than a mark each allows is watched, exactly: a change in its deepest
// directory is reported, one beside the export on the same file system is
// not.
func TestWatchWholeFileSystem(t *testing.T) {
	slow(t)
	if os.Geteuid() != 0 {
		t.Fatal("not root: a file system's fanotify mark needs CAP_SYS_ADMIN")
	}
	f := newFixture(t)
	root := t.TempDir()
	dir, beside := filepath.Join(root, "export"), filepath.Join(root, "beside")
	os.Mkdir(beside, 0o755)
	deep := dir
	for i := range 40 {
		deep = filepath.Join(deep, fmt.Sprintf("level%02d", i))
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * maxWatchDirs {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("p%02d", i/1000), fmt.Sprintf("d%04d", i%1000)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := sessionOn(t, f, "dlg_watch_whole", Export{Dir: dir})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if ch, err := c.Watch(ctx); err != nil || !ch.Exact || !ch.Overflow {
		t.Fatalf("first answer of an export of %d directories: exact %v, overflow %v, %v", 3*maxWatchDirs+41, ch.Exact, ch.Overflow, err)
	}
	os.WriteFile(filepath.Join(beside, "not-lent"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(deep, "deepest"), []byte("x"), 0o644)
	want := strings.TrimPrefix(filepath.Join(deep, "deepest"), dir+"/")
	ch, err := c.Watch(ctx)
	if err != nil || !ch.Exact || ch.Overflow || !slices.Equal(ch.Paths, []string{want}) {
		t.Fatalf("after a change in the deepest directory and one beside the export: %q, exact %v, overflow %v, %v", ch.Paths, ch.Exact, ch.Overflow, err)
	}
}

// BenchmarkWatchDirsHeld is what a watch holds at most where one mark
// covers the file system: the keys (file system id and a 16-byte ext4
// file handle) and names of maxWatchDirsWhole directories (`make bench`
// reports the heap).
func BenchmarkWatchDirsHeld(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := &watcher{dirs: map[string]string{}}
		for i := range maxWatchDirsWhole {
			key := fmt.Sprintf("fsid%04d%016d", i%7, i) // 8 + 4 + 16 bytes, as fanotify.add makes it
			w.dirs[key] = fmt.Sprintf("pkg%02d/mod%03d/sub%06d", i/1000%100, i%1000, i)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
		runtime.KeepAlive(w)
	}
}
