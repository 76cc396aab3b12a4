package fs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/sshd/sshdtest"
)

// TestAnAssemblersWritesAcrossASlowLink: an assembler writes its object
// file, seeks back, reads what it wrote and stats it, over and over. The
// kernel asks the file's attributes after each write (a read past the
// size it knew needs them): across a link each was a round trip. The
// mount answers them from what its one writer did, and sets the times it
// told on the delegator's file behind the writes, so the file the owner
// gets has the content, size and modification time the agent saw.
func TestAnAssemblersWritesAcrossASlowLink(t *testing.T) {
	f := newMountWith(t, false, func(o *Options) { o.Addr = sshdtest.SlowLink(t, o.Addr, 40*time.Millisecond) })
	waitExact(t, f)
	// The first file in a directory is made the plain way; the next
	// goes out behind.
	if err := os.WriteFile(filepath.Join(f.mnt, "first.o"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(f.mnt, "obj.o")
	fd, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	asked := func(op string) float64 {
		return f.asked(t, op)
	}
	stats := asked("fstat") + asked("lstat") + asked("stat")
	var want []byte
	var seen os.FileInfo
	for i := range 6 {
		part := bytes.Repeat([]byte{byte('a' + i)}, 100+i)
		if _, err := fd.Write(part); err != nil {
			t.Fatal(err)
		}
		want = append(want, part...)
		if _, err := fd.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4096)
		n, err := fd.Read(got)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:n], want) {
			t.Fatalf("write %d: read back %d bytes %q, want %q", i, n, got[:n], want)
		}
		if seen, err = fd.Stat(); err != nil {
			t.Fatal(err)
		}
		if seen.Size() != int64(len(want)) {
			t.Fatalf("write %d: fstat says %d bytes, %d written", i, seen.Size(), len(want))
		}
	}
	if d := asked("fstat") + asked("lstat") + asked("stat") - stats; d != 0 {
		t.Errorf("the read-backs and fstats of a file the mount is making asked the delegator %v times", d)
	}
	byPath, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if !byPath.ModTime().Equal(seen.ModTime()) || byPath.Size() != seen.Size() {
		t.Errorf("stat by path says %v, %d bytes; fstat said %v, %d", byPath.ModTime(), byPath.Size(), seen.ModTime(), seen.Size())
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	disk := landedWith(t, filepath.Join(f.dir, "obj.o"), func(fi os.FileInfo) bool {
		return fi.Size() == int64(len(want)) && fi.ModTime().Equal(seen.ModTime())
	})
	if disk == nil {
		fi, _ := os.Stat(filepath.Join(f.dir, "obj.o"))
		t.Fatalf("the delegator's file is %v; the agent last saw %v, %d bytes", fi, seen.ModTime(), seen.Size())
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, "obj.o")); !bytes.Equal(b, want) {
		t.Errorf("the delegator's file holds %q, want %q", b, want)
	}
	// Once its writes landed, the delegator's answer is the same.
	var st unix.Stat_t
	time.Sleep(50 * time.Millisecond)
	if err := unix.Stat(name, &st); err != nil {
		t.Fatal(err)
	}
	if mt := time.Unix(st.Mtim.Unix()); !mt.Equal(seen.ModTime()) {
		t.Errorf("the file's mtime moved by itself: the agent saw %v, later %v", seen.ModTime(), mt)
	}
}

// TestReaderOfAFileCreatedBehindAcrossASlowLink: a file written and closed
// (its create and writes still on the way), opened for reading and
// removed at once keeps its content for the reader — the reader's open,
// put off until needed, is made by path before the remove, and must not
// overtake the create.
func TestReaderOfAFileCreatedBehindAcrossASlowLink(t *testing.T) {
	slow(t)
	f := newMountWith(t, false, func(o *Options) { o.Addr = sshdtest.SlowLink(t, o.Addr, 40*time.Millisecond) })
	waitExact(t, f)
	if err := os.WriteFile(filepath.Join(f.mnt, "first"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{0, 7, 5000} {
		name := filepath.Join(f.mnt, "f"+string(rune('a'+i)))
		data := bytes.Repeat([]byte{'x'}, size)
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(name); err != nil {
			fd.Close()
			t.Fatal(err)
		}
		fi, err := fd.Stat()
		if err != nil {
			fd.Close()
			t.Fatalf("fstat of a %d-byte file removed while open: %v", size, err)
		}
		b, err := io.ReadAll(fd)
		fd.Close()
		if err != nil || !bytes.Equal(b, data) || fi.Size() != int64(size) {
			t.Errorf("a %d-byte file removed while open: fstat %d bytes, read %d bytes, %v", size, fi.Size(), len(b), err)
		}
	}
}

// TestLockFilesAcrossASlowLink: git makes index.lock, and drops or renames
// it, at every command; a build makes and removes temporary files. Made
// behind and removed behind, neither waiting for the other's answer, they
// must still land in order: nothing is left on the delegator's side, and
// the name can be made again at once.
func TestLockFilesAcrossASlowLink(t *testing.T) {
	f := newMountWith(t, false, func(o *Options) { o.Addr = sshdtest.SlowLink(t, o.Addr, 40*time.Millisecond) })
	waitExact(t, f)
	if err := os.Mkdir(filepath.Join(f.mnt, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.mnt, "git", "HEAD"), []byte("ref\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(f.mnt, "git", "index.lock")
	for round := range 5 {
		fd, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		fd.Write([]byte("index"))
		fd.Close()
		if err := os.Remove(lock); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	// The removes landed after their creates: the delegator's side has
	// the directory as before.
	if err := landedGone(t, filepath.Join(f.dir, "git", "index.lock")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "git", "HEAD")); err != nil {
		t.Fatal(err)
	}
}

// landedGone waits for p to be gone from the delegator's side, as a remove
// sent behind lands.
func landedGone(t testing.TB, p string) error {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	return errors.New(p + " is still there")
}
