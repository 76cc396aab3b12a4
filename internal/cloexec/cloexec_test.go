package cloexec

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWalkMarksEveryDescriptor: the portable walk (macOS's and FreeBSD's
// way, through /dev/fd, which Linux has too) leaves no descriptor a child
// would inherit.
func TestWalkMarksEveryDescriptor(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
	walk("/dev/fd")
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("descriptor %d after the walk: flags %#x, %v", fd, flags, err)
	}
}
