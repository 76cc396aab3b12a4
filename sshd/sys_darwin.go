package sshd

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// renameNoReplace is renameatx_np's RENAME_EXCL.
func renameNoReplace(fromFd int, fromBase string, toFd int, toBase string) error {
	return unix.RenameatxNp(fromFd, fromBase, toFd, toBase, unix.RENAME_EXCL)
}

// statvfsRest: APFS and HFS+ names are at most 255 bytes.
func statvfsRest(st *syscall.Statfs_t) (frsize, fsid, namemax uint64) {
	return uint64(st.Bsize), uint64(uint32(st.Fsid.Val[0])), 255
}

// fdPathOf is the path the kernel has for the open file fd: F_GETPATH.
func fdPathOf(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETPATH, int(uintptr(unsafe.Pointer(&buf[0]))))
	runtime.KeepAlive(buf)
	if err != nil {
		return "", err
	}
	return unix.ByteSliceToString(buf), nil
}
