package sftpc_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/fs/sftpc"
	"github.com/awcp/awcp/sshd"
	"github.com/awcp/awcp/sshd/sshdtest"
)

// session serves a fresh directory with our real SSH server and opens a
// client session on it, as the mount does.
func session(t *testing.T) (dir string, sshc *gossh.Client, c *sftpc.Client) {
	t.Helper()
	return sessionVia(t, func(addr string) string { return addr })
}

// sessionVia is session with the client dialling via(the server's
// address).
func sessionVia(t *testing.T, via func(addr string) string) (dir string, sshc *gossh.Client, c *sftpc.Client) {
	t.Helper()
	dir = t.TempDir()
	const id = "dlg_sftpc"
	l := sshdtest.Lend(t, id, dir)
	signer, err := fs.CertSigner(l.Cred.PrivateKey, l.Cred.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	sshc, c, err = fs.Dial(fs.Options{Addr: via(l.Addr.String()), User: id, Export: sshd.Locator(id), Signer: signer, HostKey: l.Authority.HostKey().PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); sshc.Close() })
	return dir, sshc, c
}

// The mount sends SETSTAT (or MKDIR) and the LSTAT that reads its result
// back to back, without waiting in between. That is only right if the
// server runs them in order; every LSTAT here must see its SETSTAT.
func TestBackToBackRequestsOnOnePathStayInOrder(t *testing.T) {
	dir, _, c := session(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base := uint32(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	for i := range uint32(300) {
		set := c.StartSetstat("/f", sftpc.Attrs{Flags: sftpc.AttrTimes | sftpc.AttrPermissions,
			Atime: base, Mtime: base + i, Mode: 0o600 | i%2*0o44})
		stat := c.StartLstat("/f")
		if err := set.Err(); err != nil {
			t.Fatal(err)
		}
		a, err := stat.Attrs()
		if err != nil {
			t.Fatal(err)
		}
		if a.Mtime != base+i || a.Mode&0o777 != 0o600|i%2*0o44 {
			t.Fatalf("round %d: LSTAT saw mtime %d mode %o: it ran before its SETSTAT", i, a.Mtime-base, a.Mode&0o777)
		}
	}
	for i := range 50 {
		p := fmt.Sprintf("/d%d", i)
		mk, stat := c.StartMkdir(p, 0o750), c.StartLstat(p)
		if err := mk.Err(); err != nil {
			t.Fatal(err)
		}
		if a, err := stat.Attrs(); err != nil || !a.IsDir() {
			t.Fatalf("LSTAT right behind MKDIR %s: %+v, %v", p, a, err)
		}
	}
	// Links and symlinks are routed by the name they make, not by the
	// extension's name or the target, so the LSTAT behind them sees it.
	for i := range 50 {
		hard, soft := fmt.Sprintf("/hard%d", i), fmt.Sprintf("/soft%d", i)
		link, lstat := c.StartLink("/f", hard), c.StartLstat(hard)
		symlink, lstat2 := c.StartSymlink("f", soft), c.StartLstat(soft)
		if err := link.Err(); err != nil {
			t.Fatal(err)
		}
		if err := symlink.Err(); err != nil {
			t.Fatal(err)
		}
		if a, err := lstat.Attrs(); err != nil || a.Nlink != uint32(i+2) {
			t.Fatalf("LSTAT right behind a link: %+v, %v", a, err)
		}
		if a, err := lstat2.Attrs(); err != nil || a.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			t.Fatalf("LSTAT right behind SYMLINK: %+v, %v", a, err)
		}
	}
}

// What the executor's tools create gets exactly the mode they asked for,
// whatever the delegator's umask; an existing file keeps its own.
func TestExactModes(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir, _, c := session(t)
	for _, perm := range []uint32{0o664, 0o666, 0o444, 0o600} {
		name := fmt.Sprintf("/f%o", perm)
		f, o, err := c.OpenRead(name, sftpc.OpenWrite|sftpc.OpenCreate|sftpc.OpenExcl, perm, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		fi, _ := os.Stat(filepath.Join(dir, name))
		if uint32(fi.Mode().Perm()) != perm || o.Attrs.Mode&0o777 != perm {
			t.Errorf("created with %o: mode %o on disk, %o in the reply", perm, fi.Mode().Perm(), o.Attrs.Mode&0o777)
		}
	}
	// O_CREAT without O_EXCL: new files get perm, existing ones keep theirs.
	os.WriteFile(filepath.Join(dir, "kept"), nil, 0o600)
	for name, want := range map[string]os.FileMode{"kept": 0o600, "new": 0o666} {
		f, err := c.OpenFile("/"+name, sftpc.OpenWrite|sftpc.OpenCreate|sftpc.OpenTrunc, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Mode().Perm() != want {
			t.Errorf("%s opened with O_CREAT 0666: mode %o, want %o", name, fi.Mode().Perm(), want)
		}
	}
	mk, stat := c.StartMkdir("/d", 0o775), c.StartLstat("/d")
	if err := mk.Err(); err != nil {
		t.Fatal(err)
	}
	if a, err := stat.Attrs(); err != nil || a.Mode&0o777 != 0o775 {
		t.Fatalf("MKDIR 0775: %+v, %v", a, err)
	}
}

// With the server's write barrier the mount sends FSETSTAT, FSTAT and CLOSE
// right behind a file's writes, which the server runs on several workers.
// Each of those must see every write sent before it: the truncation must
// not be undone by a late write, the size must count them all, and the
// bytes must all be there once CLOSE is answered.
func TestWriteBarrier(t *testing.T) {
	dir, _, c := session(t)
	if !c.WriteBarrier() {
		t.Fatal("our server does not announce write-barrier@awcp")
	}
	const piece, pieces = 64 << 10, 24 // spread over the server's workers
	data := make([]byte, piece*pieces)
	rand.Read(data)
	for round := range 20 {
		f, err := c.OpenFile(fmt.Sprintf("/f%d", round), sftpc.OpenRead|sftpc.OpenWrite|sftpc.OpenCreate, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		var calls []*sftpc.Call
		for i := range pieces {
			calls = append(calls, f.StartWrite(data[i*piece:(i+1)*piece], int64(i*piece)))
		}
		trunc := f.StartSetstat(sftpc.Attrs{Flags: sftpc.AttrSize, Size: piece})
		stat := f.StartStat()
		for i := range pieces {
			calls = append(calls, f.StartWrite(data[i*piece:(i+1)*piece], int64(len(data)+i*piece)))
		}
		closed := f.StartClose()
		for _, call := range append(calls, trunc, closed) {
			if err := call.Err(); err != nil {
				t.Fatal(err)
			}
		}
		if a, err := stat.Attrs(); err != nil || a.Size != piece {
			t.Fatalf("round %d: FSTAT right behind the writes and the truncation saw size %d (%v), want %d", round, a.Size, err, piece)
		}
		// Answered CLOSE: every write is in, and the truncation was not
		// undone by one of the writes before it.
		want := append(append(bytes.Clone(data[:piece]), make([]byte, len(data)-piece)...), data...)
		if on, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%d", round))); !bytes.Equal(on, want) {
			t.Fatalf("round %d: the file has %d bytes, not what was written in order", round, len(on))
		}
	}
}

// Small writes sent behind while another is unanswered are held and go
// out together. What sends them: the answer to the last one in flight, a
// packet's worth held, another request, and waiting for one of them (not
// polling it); never a delay. The server's replies are held here, so the file's size on its
// disk tells what was sent.
func TestWritesBehindHeld(t *testing.T) {
	slow(t)
	var gate *sshdtest.ReplyGate
	dir, _, c := sessionVia(t, func(addr string) string {
		gate = sshdtest.NewReplyGate(t, addr)
		return gate.Addr
	})
	f, err := c.OpenFile("/f", sftpc.OpenWrite|sftpc.OpenCreate, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte("x"), 4096)
	var calls []*sftpc.Call
	blocks := 0
	write := func(n int) {
		for range n {
			calls = append(calls, f.StartWriteBehind(block, int64(blocks*len(block))))
			blocks++
		}
	}
	reaches := func(what string, n int) {
		t.Helper()
		want := int64(n * len(block))
		var size int64
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if fi, err := os.Stat(filepath.Join(dir, "f")); err == nil {
				if size = fi.Size(); size == want {
					return
				}
			}
		}
		t.Fatalf("%s: the server's file has %d bytes, want %d", what, size, want)
	}
	stays := func(what string, n int) {
		t.Helper()
		time.Sleep(300 * time.Millisecond)
		fi, err := os.Stat(filepath.Join(dir, "f"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(n*len(block)) {
			t.Fatalf("%s: the server's file has %d bytes, want %d: a held write went out", what, fi.Size(), n*len(block))
		}
	}

	release := gate.Hold()
	defer release()
	write(1)
	reaches("the first write behind goes out at once", 1)
	write(3)
	stays("three more while it is unanswered", 1)
	select {
	case <-calls[len(calls)-1].Done(): // a poll sends nothing
	default:
	}
	stays("a poll", 1)
	waited := make(chan error, 1)
	go func() { waited <- calls[len(calls)-1].Err() }()
	reaches("one of them waited for", 4)

	write(2)
	stays("two more", 4)
	c.StartLstat("/") // a request that is not a write behind
	reaches("another request started", 6)

	write(7) // less than a packet's worth
	stays("seven more", 6)
	write(1)
	reaches("a packet's worth held", 14)

	write(1)
	stays("one more", 14)
	release()
	reaches("the ones in flight answered", 15)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	for _, call := range calls {
		if err := call.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if on, _ := os.ReadFile(filepath.Join(dir, "f")); !bytes.Equal(on, bytes.Repeat(block, blocks)) {
		t.Fatalf("the file has %d bytes, not the %d written", len(on), blocks*len(block))
	}
}

// A file opened under a handle the client names is written, stamped and
// closed without waiting for the open: the server runs all of them after
// it, though its writes go to several workers. An open that fails takes
// the requests behind it down with it, and changes nothing.
func TestOpenNamed(t *testing.T) {
	dir, _, c := session(t)
	if !c.OpensNamed() {
		t.Fatal("our server does not announce open-named@awcp")
	}
	const piece, pieces = 64 << 10, 8 // spread over the server's workers
	data := make([]byte, piece*pieces)
	rand.Read(data)
	stamp := uint32(time.Date(2021, 6, 7, 8, 9, 10, 0, time.UTC).Unix())
	for round := range 40 {
		name := fmt.Sprintf("f%d", round)
		f, open := c.StartOpenNamed("/"+name, sftpc.OpenWrite|sftpc.OpenCreate|sftpc.OpenExcl, 0o640, time.Time{})
		calls := []*sftpc.Call{open}
		for i := range pieces {
			calls = append(calls, f.StartWrite(data[i*piece:(i+1)*piece], int64(i*piece)))
		}
		calls = append(calls, f.StartSetstat(sftpc.Attrs{Flags: sftpc.AttrTimes, Atime: stamp, Mtime: stamp}), f.StartClose())
		for i, call := range calls {
			if err := call.Err(); err != nil {
				t.Fatalf("round %d, request %d behind the open: %v", round, i, err)
			}
		}
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o640 || fi.ModTime().Unix() != int64(stamp) {
			t.Fatalf("round %d: mode %v, mtime %v", round, fi.Mode(), fi.ModTime())
		}
		if on, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(on, data) {
			t.Fatalf("round %d: the file has %d bytes, not what was written", round, len(on))
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "taken"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, open := c.StartOpenNamed("/taken", sftpc.OpenWrite|sftpc.OpenCreate|sftpc.OpenExcl, 0o600, time.Time{})
	write := f.StartWrite([]byte("mine!!"), 0)
	closed := f.StartClose()
	if err := open.Err(); err == nil {
		t.Fatal("an exclusive open of an existing file succeeded")
	}
	if write.Err() == nil || closed.Err() == nil {
		t.Fatal("requests behind a failed open succeeded")
	}
	if on, _ := os.ReadFile(filepath.Join(dir, "taken")); string(on) != "theirs" {
		t.Fatalf("the existing file holds %q", on)
	}

	// Times sent with the open are the new file's, to the nanosecond: the
	// mount tells its kernel of them before the answer.
	made := time.Unix(1_700_000_000, 123_456_789)
	f, open = c.StartOpenNamed("/timed", sftpc.OpenWrite|sftpc.OpenCreate|sftpc.OpenExcl, 0o600, made)
	if err := errors.Join(open.Err(), f.StartClose().Err()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "timed")); err != nil || !fi.ModTime().Equal(made) {
		t.Fatalf("the file made with times %v has mtime %v (%v)", made, fi.ModTime(), err)
	}
}

// Small requests are queued for the sending goroutine and large writes go
// out from the caller's buffer; on the wire they stay in the order they
// were started. Our server runs writes to the same 64 KiB in order, so a
// small write started before the last large one must not show in the file.
func TestSendOrder(t *testing.T) {
	dir, _, c := session(t)
	f, err := c.OpenFile("/mixed", sftpc.OpenWrite|sftpc.OpenCreate, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// Made first, then started in a tight loop: small writes are still
	// queued when a large one is started.
	type write struct {
		b   []byte
		off int64
	}
	var writes []write
	for i := range 201 {
		w := write{b: make([]byte, 4<<10), off: int64(i%16) * 4 << 10} // queued
		if i%3 == 2 {
			w = write{b: make([]byte, 300<<10)} // sent by the caller
		}
		rand.Read(w.b)
		writes = append(writes, w)
	}
	var calls []*sftpc.Call
	for _, w := range writes {
		calls = append(calls, f.StartWrite(w.b, w.off))
	}
	calls = append(calls, f.StartClose())
	for _, call := range calls {
		if err := call.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if on, _ := os.ReadFile(filepath.Join(dir, "mixed")); !bytes.Equal(on, writes[200].b) {
		t.Fatalf("the file (%d bytes) is not the large write started last", len(on))
	}
}

// OpenRead brings the handle, the attributes and the file's start in one
// reply: all of a small file (EOF), the asked-for part of a larger one.
func TestOpenRead(t *testing.T) {
	dir, _, c := session(t)
	small, large := []byte("package main\n"), make([]byte, 200_000)
	rand.Read(large)
	for name, data := range map[string][]byte{"small.go": small, "large.bin": large, "empty": nil} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		want []byte
		eof  bool
	}{{"small.go", small, true}, {"large.bin", large[:64<<10], false}, {"empty", nil, true}} {
		f, o, err := c.OpenRead("/"+tc.name, sftpc.OpenRead, 0, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(o.Head, tc.want) || o.EOF != tc.eof {
			t.Errorf("%s: head of %d bytes, eof %v; want %d bytes, eof %v", tc.name, len(o.Head), o.EOF, len(tc.want), tc.eof)
		}
		fi, _ := os.Stat(filepath.Join(dir, tc.name))
		if o.Attrs.Size != uint64(fi.Size()) || o.Attrs.Mode&0o777 != 0o640 || o.Attrs.Mtime != uint32(fi.ModTime().Unix()) {
			t.Errorf("%s: attributes %+v, want size %d mode 640", tc.name, o.Attrs, fi.Size())
		}
		// The handle is a real one: the rest reads on from it.
		rest := make([]byte, 10)
		if n, err := f.ReadAt(rest, int64(len(o.Head))); tc.eof != (n == 0 && err == io.EOF) {
			t.Errorf("%s: READ after the head: %d, %v", tc.name, n, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Opened for writing only: a handle and the attributes, no data.
	f, o, err := c.OpenRead("/small.go", sftpc.OpenWrite, 0, 64<<10)
	if err != nil || len(o.Head) != 0 || o.Attrs.Size != uint64(len(small)) {
		t.Fatalf("write-only OpenRead: %d bytes, %+v, %v", len(o.Head), o.Attrs, err)
	}
	f.Close()
	if _, _, err := c.OpenRead("/missing", sftpc.OpenRead, 0, 64<<10); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("OpenRead of a missing file: %v, want ErrNotExist", err)
	}
}

// The start an open brings along is read before anyone asked for it: it
// does not touch the file's access time on the delegator's side (a file
// opened and not read was not accessed); a READ asked for does.
func TestOpenReadLeavesAccessTime(t *testing.T) {
	dir, _, c := session(t)
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	// An access time before the modification: relatime updates it at
	// the next read.
	mtime := time.Now().Add(-time.Minute).Truncate(time.Second)
	if err := os.Chtimes(path, mtime.Add(-time.Hour), mtime); err != nil {
		t.Fatal(err)
	}
	atime := func() int64 {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Atim.Sec
	}
	f, o, err := c.OpenRead("/f", sftpc.OpenRead, 0, 64<<10)
	if err != nil || string(o.Head) != "data" {
		t.Fatalf("OpenRead: %q, %v", o.Head, err)
	}
	defer f.Close()
	if got := atime(); got != mtime.Add(-time.Hour).Unix() {
		t.Fatalf("the open's read moved the access time to %v", time.Unix(got, 0))
	}
	if _, err := f.ReadAt(make([]byte, 4), 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if got := atime(); got < mtime.Unix() {
		t.Fatalf("a READ left the access time at %v, before the modification", time.Unix(got, 0))
	}
}

// A large file written through the server goes to disk while it arrives:
// the server starts the disk write every few MiB, so the fsync or close at
// the end does not find all of it still in memory.
func TestLargeWriteGoesToDiskAsItArrives(t *testing.T) {
	dir, _, c := session(t)
	var fsst unix.Statfs_t
	if err := unix.Statfs(dir, &fsst); err != nil {
		t.Fatal(err)
	}
	if fsst.Type == unix.TMPFS_MAGIC {
		t.Skip("the test directory is on tmpfs, which has no disk to write to")
	}
	f, err := c.OpenFile("/big", sftpc.OpenWrite|sftpc.OpenCreate|sftpc.OpenExcl, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 32 << 20
	chunk := make([]byte, 1<<20)
	rand.Read(chunk)
	for off := 0; off < size; off += len(chunk) {
		if _, err := f.WriteAt(chunk, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	local, err := os.Open(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(local.Fd()), &unix.CachestatRange{}, &st, 0); err != nil {
		t.Fatal(err)
	}
	// Without the server's help every page would still be dirty: the
	// kernel starts on its own only past a tenth of memory, or after 30 s.
	if pages := uint64(size / os.Getpagesize()); st.Dirty > pages/2 {
		t.Fatalf("%d of the file's %d pages are still only in memory", st.Dirty, pages)
	}
}

func TestReadWrite(t *testing.T) {
	dir, _, c := session(t)
	f, err := c.OpenFile("/big", sftpc.OpenRead|sftpc.OpenWrite|sftpc.OpenCreate|sftpc.OpenExcl, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3*sftpc.MaxData+12345)
	rand.Read(data)
	// Written in pieces sent without waiting, the way the mount writes.
	var calls []*sftpc.Call
	for off := 0; off < len(data); off += 100_000 {
		calls = append(calls, f.StartWrite(data[off:min(off+100_000, len(data))], int64(off)))
	}
	for _, call := range calls {
		if err := call.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := f.WriteAt(data[:10], int64(len(data))); n != 10 || err != nil {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	data = append(data, data[:10]...)
	if on, _ := os.ReadFile(filepath.Join(dir, "big")); !bytes.Equal(on, data) {
		t.Fatalf("the delegator's file differs (%d bytes, want %d)", len(on), len(data))
	}
	var got []byte
	buf := make([]byte, sftpc.MaxData)
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		got = append(got, buf[:n]...)
		off += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || n != len(buf) {
			t.Fatalf("ReadAt %d: %d, %v", off, n, err)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
	if a, err := f.Stat(); err != nil || a.Size != uint64(len(data)) || a.Mode&0o777 != 0o600 {
		t.Fatalf("FSTAT: %+v, %v", a, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	dir, _, c := session(t)
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	os.WriteFile(filepath.Join(dir, "d", "x"), nil, 0o644)
	if _, err := c.Lstat("/missing"); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("LSTAT of a missing file: %v", err)
	}
	var st *sftpc.StatusError
	if err := c.RemoveDirectory("/d"); !errors.As(err, &st) || st.Code != sftpc.StatusFailure {
		t.Errorf("RMDIR of a full directory: %v", err)
	}
	if _, err := c.OpenFile("/d/x", sftpc.OpenWrite|sftpc.OpenCreate|sftpc.OpenExcl, 0o644); !errors.As(err, &st) {
		t.Errorf("exclusive create of an existing file: %v", err)
	}
	if _, err := c.Lstat("/../../etc/passwd"); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("a path above the root is the root's: %v", err)
	}
}

// A directory is listed whole and in name order: a small one in one
// request (list@awcp), one past wire.ListMax by pages (our server answers
// 256 names a page); an empty one is empty; a file is no directory.
func TestReadDirPages(t *testing.T) {
	dir, _, c := session(t)
	for _, d := range []string{"small", "large", "empty"} {
		os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	for i := range 600 {
		// Written out of order: the listing's order is the server's.
		name := fmt.Sprintf("f%03d", (i*7)%600)
		os.WriteFile(filepath.Join(dir, "large", name), []byte("x"), 0o644)
		if i < 20 {
			os.WriteFile(filepath.Join(dir, "small", name), []byte("x"), 0o644)
		}
	}
	for d, want := range map[string]int{"/small": 20, "/large": 600, "/empty": 0} {
		ents, err := c.ReadDir(d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		for i, e := range ents {
			if e.Name == "." || e.Name == ".." || e.Attrs.Size != 1 || (i > 0 && ents[i-1].Name >= e.Name) {
				t.Fatalf("%s: entry %d %q (%+v), out of order or wrong", d, i, e.Name, e.Attrs)
			}
		}
		if len(ents) != want {
			t.Fatalf("%s: %d names, want %d", d, len(ents), want)
		}
	}
	if _, err := c.ReadDir("/large/f001"); err == nil {
		t.Fatal("listing a file succeeded")
	}
}

// A request in flight when the connection goes, and every one after, fails
// with ErrConnLost, which the mount re-dials on: nothing hangs.
func TestConnectionLost(t *testing.T) {
	_, sshc, c := session(t)
	f, err := c.OpenFile("/f", sftpc.OpenWrite|sftpc.OpenCreate, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	inFlight := f.StartWrite(make([]byte, sftpc.MaxData), 0)
	sshc.Close()
	select {
	case <-inFlight.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a request in flight did not end with the connection")
	}
	if err := inFlight.Err(); err != nil && !errors.Is(err, sftpc.ErrConnLost) {
		t.Fatalf("in flight: %v", err)
	}
	if _, err := c.Lstat("/f"); !errors.Is(err, sftpc.ErrConnLost) {
		t.Fatalf("after: %v", err)
	}
}

// TestTimesToTheNanosecond: a SETSTAT or FSETSTAT that carries times@awcp
// sets the modification time to its nanosecond (the mount tells its
// kernel such a time before the delegator sets it); one without sets whole
// seconds, as version 3 says.
func TestTimesToTheNanosecond(t *testing.T) {
	dir, _, c := session(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base := uint32(time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC).Unix())
	f, err := c.OpenFile("/f", sftpc.OpenWrite, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, set := range []func(a sftpc.Attrs) error{
		func(a sftpc.Attrs) error { return c.StartSetstat("/f", a).Err() },
		func(a sftpc.Attrs) error { return f.StartSetstat(a).Err() },
	} {
		nsec := uint32(123456789 + i)
		if err := set(sftpc.Attrs{Flags: sftpc.AttrTimes, Atime: base, Mtime: base + 1, MtimeNsec: nsec, HasTimes: true}); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, "f"))
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Unix(int64(base+1), int64(nsec)); !fi.ModTime().Equal(want) {
			t.Errorf("set %d: mtime %v, want %v", i, fi.ModTime(), want)
		}
		if err := set(sftpc.Attrs{Flags: sftpc.AttrTimes, Atime: base, Mtime: base + 2, MtimeNsec: nsec}); err != nil {
			t.Fatal(err)
		}
		if fi, _ = os.Stat(filepath.Join(dir, "f")); !fi.ModTime().Equal(time.Unix(int64(base+2), 0)) {
			t.Errorf("set %d without times@awcp: mtime %v, want whole seconds", i, fi.ModTime())
		}
	}
}

// TestRemoveAfterOpen: a file created by a named open and removed right
// behind it, neither answered yet, is gone once both are: the REMOVE runs
// after the open (remove-after-open@awcp), though the open runs by its
// handle and the remove by its path. git makes and drops index.lock so at
// every status.
func TestRemoveAfterOpen(t *testing.T) {
	dir, _, c := session(t)
	if !c.RemovesAfterOpens() {
		t.Fatal("our server does not announce remove-after-open@awcp")
	}
	for round := range 300 {
		name := fmt.Sprintf("lock%d", round%7)
		f, open := c.StartOpenNamed("/"+name, sftpc.OpenWrite|sftpc.OpenCreate|sftpc.OpenExcl, 0o644, time.Time{})
		write := f.StartWrite([]byte("held"), 0)
		rm := c.StartRemove("/" + name)
		closed := f.StartClose()
		if err := errors.Join(open.Err(), write.Err(), rm.Err(), closed.Err()); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("round %d: %s is still there (%v): the remove overtook the create", round, name, err)
		}
	}
}
