package fs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/sshd"
	wire "github.com/awcp/awcp/sshd/sftpwire"
	"github.com/awcp/awcp/sshd/sshdtest"
)

// writeUntilRefused writes chunks of a pattern to name through the mount
// until a write fails or want bytes are written, then closes the file.
// It returns what the writer was told: the bytes written, the write's
// error, and close's.
func writeUntilRefused(t *testing.T, name string, want, chunk int) (pattern []byte, written int, werr, cerr error) {
	t.Helper()
	fd, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	pattern = make([]byte, want)
	for i := range pattern {
		pattern[i] = byte(i*7 + i/4096)
	}
	for written < want && werr == nil {
		var n int
		n, werr = fd.Write(pattern[written:min(written+chunk, want)])
		written += n
	}
	cerr = fd.Close()
	return pattern, written, werr, cerr
}

// TestWriteLimitFailsTheWrite: across a slow link, an agent writing past
// the export's write limit is refused by the write(2) that passes it —
// not by a later fsync or open, and not never — and what it was told it
// wrote is what the owner's file holds. A second file's first write, with
// no room left, is refused too.
func TestWriteLimitFailsTheWrite(t *testing.T) {
	const limit = 6 << 20
	f := newMountOf(t, sshd.Export{Policy: wire.ExportPolicy{MaxWriteBytes: limit}}, func(o *Options) {
		o.Addr = sshdtest.SlowLink(t, o.Addr, 20*time.Millisecond)
	})
	name := filepath.Join(f.mnt, "big.bin")
	pattern, written, werr, cerr := writeUntilRefused(t, name, 2*limit, 128<<10)
	if !errors.Is(werr, syscall.EDQUOT) {
		t.Fatalf("writing %d bytes past a %d-byte limit: %d written, write(2) said %v, want EDQUOT", 2*limit, limit, written, werr)
	}
	if cerr != nil {
		t.Errorf("close after the refusal: %v (the write(2) reported it already)", cerr)
	}
	if written > limit || written < limit-2<<20 {
		t.Errorf("%d bytes written before the refusal, want a little under the %d-byte limit", written, limit)
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != written || !bytes.Equal(b, pattern[:written]) {
		t.Errorf("the owner's file holds %d bytes (same as written: %v); the writer was told %d", len(b), bytes.Equal(b, pattern[:min(len(b), written)]), written)
	}
	// The next file: its first write finds no room.
	_, written, werr, _ = writeUntilRefused(t, filepath.Join(f.mnt, "more.bin"), 1<<20, 128<<10)
	if !errors.Is(werr, syscall.EDQUOT) {
		t.Errorf("a write with no room left: %d written, %v, want EDQUOT", written, werr)
	}
	if fi, err := os.Stat(filepath.Join(f.dir, "more.bin")); err != nil || fi.Size() != int64(written) {
		t.Errorf("more.bin on the owner's side: %v, %v; the writer was told %d", fi, err, written)
	}
}

// TestFullDiskFailsTheWrite: across a slow link, an agent filling the
// delegator's disk (a tmpfs of 8 MiB as the export) is refused by the
// write(2) that does not fit, with ENOSPC, as on a local disk; every byte
// it was told it wrote is in the owner's file.
func TestFullDiskFailsTheWrite(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("awcp-test", dir, "tmpfs", 0, "size=8m,mode=0755"); err != nil {
		t.Fatalf("a tmpfs for the export (the tests run as root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	f := newMountOf(t, sshd.Export{Dir: dir}, func(o *Options) {
		o.Addr = sshdtest.SlowLink(t, o.Addr, 20*time.Millisecond)
	})
	pattern, written, werr, cerr := writeUntilRefused(t, filepath.Join(f.mnt, "fill.bin"), 16<<20, 256<<10)
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 16 MiB to an 8 MiB disk: %d written, write(2) said %v (close: %v), want ENOSPC", written, werr, cerr)
	}
	if written < 4<<20 {
		t.Errorf("only %d bytes written before the disk was full", written)
	}
	b, err := os.ReadFile(filepath.Join(dir, "fill.bin"))
	if err != nil {
		t.Fatal(err)
	}
	// A write the disk took part of was refused whole: the file may hold
	// more than the writer was told, never less.
	if len(b) < written || !bytes.Equal(b[:written], pattern[:written]) {
		t.Errorf("the owner's file holds %d bytes; the writer was told %d", len(b), written)
	}
}

// TestFirstFileMadeBehind: the delegator says who a file made there
// belongs to (room@awcp), so the first file made in a directory goes out
// behind like the rest — git's index.lock, the first file an untar
// writes — instead of a round trip to learn it; and what the mount tells
// the kernel is what the file is: its owner, and in a set-group-ID
// directory that directory's group.
func TestFirstFileMadeBehind(t *testing.T) {
	dir := t.TempDir()
	owner(t, dir, `mkdir plain shared && chgrp 4242 shared && chmod 2775 shared`)
	f := newMountOf(t, sshd.Export{Dir: dir}, nil)
	waitExact(t, f)
	plainOpens := func() float64 { return f.asked(t, "open") + f.asked(t, "open-read") }
	opens, named := plainOpens(), f.asked(t, "open-named")
	told := map[string]syscall.Stat_t{}
	for _, p := range []string{"plain/new", "shared/new"} {
		fd, err := os.OpenFile(filepath.Join(f.mnt, p), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(fd.Fd()), &st); err != nil { // what the mount says before anything landed
			t.Fatal(err)
		}
		told[p] = st
		fd.WriteString("made\n")
		if err := fd.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for p := range told { // made behind: counted once they land
		landed(t, filepath.Join(dir, p), "made\n")
	}
	if n, m := plainOpens()-opens, f.asked(t, "open-named")-named; n != 0 || m != 2 {
		t.Errorf("the first files made in two directories: %v plain opens and %v named ones, want 0 and 2 (made behind)", n, m)
	}
	for p, here := range told {
		var there syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, p), &there); err != nil {
			t.Fatal(err)
		}
		if here.Uid != there.Uid || here.Gid != there.Gid || here.Mode != there.Mode {
			t.Errorf("%s: the mount said %d:%d %o, the file is %d:%d %o", p, here.Uid, here.Gid, here.Mode, there.Uid, there.Gid, there.Mode)
		}
	}
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join(dir, "shared/new"), &st); st.Gid != 4242 {
		t.Errorf("the file made in the set-group-ID directory has group %d, want 4242 (the test's premise)", st.Gid)
	}
}

// TestStatOfAFileJustWrittenAsksNothing: a file made and written here,
// then closed, is stated at once by what comes next — git stats its
// index.lock before renaming it over the index, a build what it wrote —
// and the mount answers from what it sent behind (the size written, the
// times it set on the delegator's file behind the writes), not after the
// writes landed and a round trip more; and that answer is what the file
// is once they land.
func TestStatOfAFileJustWrittenAsksNothing(t *testing.T) {
	dir := t.TempDir()
	owner(t, dir, `mkdir .git`)
	f := newMountOf(t, sshd.Export{Dir: dir}, nil)
	waitExact(t, f)
	p := filepath.Join(f.mnt, ".git", "index.lock")
	fd, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("DIRC"), 40000)
	if _, err := fd.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	before := f.asked(t, "lstat") + f.asked(t, "fstat") + f.asked(t, "stat")
	var here syscall.Stat_t
	if err := syscall.Stat(p, &here); err != nil {
		t.Fatal(err)
	}
	if n := f.asked(t, "lstat") + f.asked(t, "fstat") + f.asked(t, "stat") - before; n != 0 {
		t.Errorf("the stat of a file just written and closed asked the delegator %v times, want none", n)
	}
	landed(t, filepath.Join(dir, ".git", "index.lock"), string(data))
	var there syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, ".git", "index.lock"), &there); err != nil {
		t.Fatal(err)
	}
	if here.Size != there.Size || here.Mtim != there.Mtim || here.Mode != there.Mode {
		t.Errorf("the mount said size %d, mtime %v, mode %o; the file landed with %d, %v, %o",
			here.Size, here.Mtim, here.Mode, there.Size, there.Mtim, there.Mode)
	}
}
