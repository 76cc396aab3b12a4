//go:build !linux

package sshd

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// hasOpenat2: there is no openat2 beyond Linux. The server then walks
// with os.Root, which opens a component at a time, following no symlink
// out of the root (kernelRoot's fallbacks).
func hasOpenat2(int) bool { return false }

// openHow is never reached where hasOpenat2 is false.
func (b *kernelRoot) openHow(name string, flags int, perm fs.FileMode, noSymlinks bool) (int, error) {
	return -1, &fs.PathError{Op: "open", Path: name, Err: unix.ENOSYS}
}

// readUmask: macOS and FreeBSD show no process's umask without setting
// it; every bit is then taken as cut, and modes are set after creation.
func readUmask() (fs.FileMode, bool) { return 0, false }
