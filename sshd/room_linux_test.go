package sshd

import (
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/stage"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// room@awcp says what a session may still write: the write limit less what
// the delegation's sessions wrote (names included), and the free bytes of
// the file system its writes go to — for a staged export the staging
// area's, not the owner's. An export without a limit has no bound, and a
// read-only one has no room.
func TestRoomSaysWhatIsLeft(t *testing.T) {
	f := newFixture(t)
	small := t.TempDir()
	if err := unix.Mount("awcp-test", small, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatalf("a tmpfs (the tests run as root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(small, unix.MNT_DETACH) })

	const limit = 1 << 20
	c := sessionOn(t, f, "dlg_room", Export{Dir: small, Policy: wire.ExportPolicy{MaxWriteBytes: limit}})
	r, err := c.Room()
	if err != nil {
		t.Fatal(err)
	}
	if r.Left != limit || r.Free == 0 || r.Free > 4<<20 {
		t.Fatalf("room of a fresh 1 MiB-limited export on a 4 MiB tmpfs: %+v", r)
	}
	fd, err := c.OpenFile("/f", wire.FlagWrite|wire.FlagCreat, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fd.WriteAt(make([]byte, 1000), 0); err != nil {
		t.Fatal(err)
	}
	fd.Close()
	// Who a file made there belongs to, as the file says.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(small, "f"), &st); err != nil {
		t.Fatal(err)
	}
	if !r.OwnerKnown || r.UID != st.Uid || r.GID != st.Gid || r.DirGroup {
		t.Errorf("the owner told: %+v; the file made is %d:%d (Linux: the process's group, not the directory's)", r, st.Uid, st.Gid)
	}
	after, err := c.Room()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(limit - 1000 - len("f") - inodeCost); after.Left != want {
		t.Errorf("left after a 1,000-byte file: %d, want %d", after.Left, want)
	}

	unbounded, err := sessionOn(t, f, "dlg_room_free", Export{Dir: t.TempDir()}).Room()
	if err != nil || unbounded.Left != wire.RoomUnbounded {
		t.Errorf("an export without a limit: %+v, %v", unbounded, err)
	}
	if ro, err := sessionOn(t, f, "dlg_room_ro", Export{Dir: t.TempDir(), ReadOnly: true}).Room(); err != nil || ro.Left != 0 {
		t.Errorf("a read-only export: %+v, %v", ro, err)
	}

	// Staged: the owner's directory is the small file system; the
	// staging area, where the writes go, is not.
	area, err := stage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	staged, err := sessionOn(t, f, "dlg_room_staged", Export{Dir: small, Stage: area}).Room()
	if err != nil || staged.Free <= 4<<20 {
		t.Errorf("a staged export on a 4 MiB owner's disk: %+v, %v; want the staging area's free bytes", staged, err)
	}
}
