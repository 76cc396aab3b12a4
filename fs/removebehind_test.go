package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/sshd/sshdtest"
)

// newGatedMount is a read-write mount whose delegator's replies pass a
// sshdtest.ReplyGate.
func newGatedMount(t *testing.T) (*mountFixture, *sshdtest.ReplyGate) {
	t.Helper()
	var gate *sshdtest.ReplyGate
	f := newMountWith(t, false, func(o *Options) {
		gate = sshdtest.NewReplyGate(t, o.Addr)
		o.Addr = gate.Addr
		o.KeepAlive = 10 * time.Second // holding replies is not an outage
		o.NoWatch = true               // a held watch answer would be counted as held
	})
	return f, gate
}

// rm -rf through the mount: the unlinks and rmdirs return without waiting
// for the delegator (which answers nothing meanwhile), and land there in
// order, the directories last.
func TestRemoveBehind(t *testing.T) {
	f, gate := newGatedMount(t)
	top := filepath.Join(f.mnt, "top")
	sub := filepath.Join(top, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{top, sub} {
		for i := range 20 {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprint("f", i)), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Listed: the mount knows what the directories hold, and the writes
	// are settled.
	var names [2][]string
	for i, d := range []string{top, sub} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			names[i] = append(names[i], e.Name())
		}
	}

	release := gate.Hold()
	defer release()
	removed := make(chan error, 1)
	go func() {
		removed <- func() error {
			for _, n := range names[1] {
				if err := os.Remove(filepath.Join(sub, n)); err != nil {
					return err
				}
			}
			if err := os.Remove(sub); err != nil {
				return err
			}
			for _, n := range names[0] {
				if n == "sub" {
					continue
				}
				if err := os.Remove(filepath.Join(top, n)); err != nil {
					return err
				}
			}
			return os.Remove(top)
		}()
	}()
	select {
	case err := <-removed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		release()
		t.Fatalf("the removes waited for the delegator's answers (%v once it answered)", <-removed)
	}
	release()
	if _, err := os.Lstat(top); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("through the mount, top: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(f.dir, "top")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("on the delegator's side, top: %v", err)
	}
}

// A file unlinked behind that the delegator turned into a directory
// meanwhile is not removed: the unlink has returned, and once its answer
// is in, the name shows again, with what the delegator put there. (Without
// the delegator's watch: with it, the kernel learns of the change at once,
// and the unlink fails there and then.)
func TestRemoveBehindRefused(t *testing.T) {
	f := newMountWith(t, false, func(o *Options) { o.NoWatch = true })
	if err := os.WriteFile(filepath.Join(f.mnt, "name"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(f.mnt); err != nil { // the mount knows the names
		t.Fatal(err)
	}
	theirs := filepath.Join(f.dir, "name")
	if err := os.Remove(theirs); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(theirs, "kept"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The kernel still takes name for the file (within the entry
	// timeout): the unlink goes out behind, and is refused after it
	// returned.
	if err := os.Remove(filepath.Join(f.mnt, "name")); err != nil {
		t.Fatalf("the unlink did not go out behind: %v", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(f.mnt, &st); err != nil { // waits for every remove
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(theirs, "kept")); string(b) != "theirs" {
		t.Fatalf("the delegator's directory lost its file: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(f.mnt, "name")); err != nil || !fi.IsDir() {
		t.Fatalf("through the mount, after the refused unlink: %v, %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(f.mnt, "name", "kept")); string(b) != "theirs" {
		t.Fatalf("through the mount, name/kept: %q, %v", b, err)
	}
}

// A file created again right after its unlink went out behind is created
// after the remove, not removed by it. (In a directory the mount made, so
// that it knows the name is free and creates behind too.)
func TestCreateAfterRemoveBehind(t *testing.T) {
	f := newMount(t, false)
	for d := range 5 {
		dir := fmt.Sprint("d", d)
		if err := os.Mkdir(filepath.Join(f.mnt, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(f.mnt, dir, "again")
		for i := range 10 {
			want := fmt.Sprint("round ", i)
			fd, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatalf("%s, round %d: %v", dir, i, err)
			}
			_, werr := fd.Write([]byte(want))
			if err := errors.Join(werr, fd.Close()); err != nil {
				t.Fatalf("%s, round %d: %v", dir, i, err)
			}
			landed(t, filepath.Join(f.dir, dir, "again"), want)
			if err := os.Remove(p); err != nil {
				t.Fatalf("%s, round %d: %v", dir, i, err)
			}
		}
	}
}

// Removes sent behind on a session that ended under the mount, which has
// not noticed, are sent again on the next one: the files are gone, and
// the directory's rmdir, sent behind too, follows them.
func TestRemoveBehindAcrossReconnect(t *testing.T) {
	f := newMount(t, false)
	d := filepath.Join(f.mnt, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprint("f", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.ReadDir(d); err != nil {
		t.Fatal(err)
	}
	f.mount.conn.live().Close()
	for i := range 5 { // as rm -rf goes: the files, then the directory
		if err := os.Remove(filepath.Join(d, fmt.Sprint("f", i))); err != nil {
			t.Fatalf("unlink across a lost session: %v", err)
		}
	}
	if err := os.Remove(d); err != nil {
		t.Fatalf("rmdir across a lost session: %v", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(f.mnt, &st); err != nil { // waits for every remove
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(f.dir, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("on the delegator's side, d: %v", err)
	}
}

// A remove in flight does not stop the read ahead of another directory:
// git unlinks its temporary object file behind just before it opens the
// next source file. The files after the one opened are read while the
// remove is unanswered, so a change the delegator makes afterwards shows
// only after the attribute timeout.
func TestReadAheadPastRemoveBehind(t *testing.T) {
	f, gate := newGatedMount(t)
	src := filepath.Join(f.dir, "src")
	os.Mkdir(src, 0o755)
	for i := range 20 {
		os.WriteFile(filepath.Join(src, fmt.Sprintf("f%02d.go", i)), []byte("original\n"), 0o644)
	}
	other := filepath.Join(f.mnt, "other")
	if err := os.Mkdir(other, 0o755); err != nil { // made here: known empty, and removable behind
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "tmp"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(filepath.Join(f.mnt, "src"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil || len(names) != 20 {
		t.Fatalf("listing: %d names, %v", len(names), err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(f.mnt, "src", name))
		if err != nil {
			t.Error(err)
		}
		return string(b)
	}
	started := time.Now()
	release := gate.Hold()
	defer release()
	if err := os.Remove(filepath.Join(other, "tmp")); err != nil { // behind: returns unanswered
		t.Fatal(err)
	}
	opened := make(chan string, 1)
	go func() { opened <- read(names[0]) }() // the first in order: the files after it are asked for now
	time.Sleep(100 * time.Millisecond)       // the server reads them meanwhile
	release()
	if got := <-opened; got != "original\n" {
		t.Fatalf("%s: %q", names[0], got)
	}
	os.WriteFile(filepath.Join(src, names[3]), []byte("changed on the delegator\n"), 0o644)
	got := read(names[3])
	if time.Since(started) >= time.Second {
		t.Fatalf("the opens took %s, past the attribute timeout: the read ahead cannot be told", time.Since(started))
	}
	if got != "original\n" {
		t.Errorf("%s was not read ahead while the remove was in flight: the delegator's later change shows (%q)", names[3], got)
	}
	if _, err := os.Lstat(filepath.Join(f.dir, "other", "tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the remove did not land: %v", err)
	}
}
