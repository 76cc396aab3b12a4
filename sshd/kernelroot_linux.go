package sshd

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// hasOpenat2 reports whether openat2 with RESOLVE_BENEATH works on the
// directory open at dirfd (Linux 5.6; a sandbox may refuse it).
func hasOpenat2(dirfd int) bool {
	fd, err := unix.Openat2(dirfd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// openHow is openat2 of name beneath the root, following no symlink
// where noSymlinks.
func (b *kernelRoot) openHow(name string, flags int, perm fs.FileMode, noSymlinks bool) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	if noSymlinks {
		how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(perm.Perm()) // openat2 refuses a mode without O_CREAT
	}
	for {
		fd, err := unix.Openat2(int(b.dir.Fd()), name, &how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // a rename raced the walk: the kernel asks to retry
		}
		if errors.Is(err, unix.EXDEV) {
			err = errEscape
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return fd, nil
	}
}

// readUmask reads the umask from /proc/self/status.
func readUmask() (fs.FileMode, bool) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return fs.FileMode(m) & fs.ModePerm, true
			}
		}
	}
	return 0, false
}
