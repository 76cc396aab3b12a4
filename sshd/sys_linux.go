package sshd

import (
	"github.com/awcp/awcp/internal/openflag"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What the server asks of the system that each names its own way: this
// file is Linux's; sys_darwin.go and sys_freebsd.go are the others'.

// newFileTakesDirGroup: a new file takes the process's group, or its
// directory's where that has the set-group-ID bit (file systems mounted
// with grpid aside).
const newFileTakesDirGroup = false

// renameNoReplace renames without replacing what the new name holds:
// renameat2's RENAME_NOREPLACE. EINVAL or ENOSYS: the file system has
// none (the caller checks, then renames).
func renameNoReplace(fromFd int, fromBase string, toFd int, toBase string) error {
	return unix.Renameat2(fromFd, fromBase, toFd, toBase, unix.RENAME_NOREPLACE)
}

// statvfsRest are statvfs's fields beyond what every Statfs_t has: the
// fragment size, the file system's id, the longest name.
func statvfsRest(st *syscall.Statfs_t) (frsize, fsid, namemax uint64) {
	return uint64(st.Frsize), uint64(st.Fsid.X__val[0]), uint64(st.Namelen)
}

// setFileTimes sets f's access and modification times to the nanosecond:
// utimensat on the descriptor itself (a NULL path).
func setFileTimes(f *os.File, ts [2]unix.Timespec) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall6(unix.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// noAtime is the open flag that reads without moving the access time.
const noAtime = unix.O_NOATIME

// startWriteback starts the disk writing what fd has written so far,
// without waiting for it.
func startWriteback(fd int) {
	unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}

// fdPathOf is the path the kernel has for the open file fd: its
// /proc/self/fd link.
func fdPathOf(fd int) (string, error) {
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
}

// procPins: a descriptor opened with pinFlags stands for its very file
// as a path, through its /proc/self/fd link (setstat's pin).
const procPins = true

func pinFlags(truncating bool) int { return openflag.Search }
