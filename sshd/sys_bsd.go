//go:build darwin || freebsd

package sshd

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setFileTimes sets f's access and modification times: futimes, to the
// microsecond (macOS and FreeBSD's futimens would do nanoseconds; the
// mount's clients ask for seconds and the nanoseconds of mtime).
func setFileTimes(f *os.File, ts [2]unix.Timespec) error {
	tv := []syscall.Timeval{
		syscall.NsecToTimeval(time.Unix(ts[0].Sec, ts[0].Nsec).UnixNano()),
		syscall.NsecToTimeval(time.Unix(ts[1].Sec, ts[1].Nsec).UnixNano()),
	}
	return syscall.Futimes(int(f.Fd()), tv)
}

// newFileTakesDirGroup: a new file takes its directory's group, as on
// every BSD, whatever the directory's set-group-ID bit.
const newFileTakesDirGroup = true

// noAtime: no such open flag here.
const noAtime = 0

// startWriteback: no call here starts writeback without waiting; the
// client's fsync does it all at once.
func startWriteback(int) {}

// procPins: no /proc here. A setstat pinned to the file it checked acts
// on the descriptor itself, opened for what it does: read-write to
// truncate, read-only to change modes and times.
const procPins = false

// (Never blocking on a FIFO's open, nor taking a terminal.)
func pinFlags(truncating bool) int {
	if truncating {
		return os.O_RDWR | unix.O_NONBLOCK | unix.O_NOCTTY
	}
	return os.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
}
