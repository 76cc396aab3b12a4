package treewalk

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenBeneath opens name (relative, slash-separated) beneath the
// directory open at dirfd, following no symlink on the way and never
// leaving it: openat2 with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS.
// Where the kernel has no openat2 — or a sandbox answers it ENOSYS, as
// awcp's does (its mode cannot be checked there for set-id bits) — it
// walks the name a component at a time with O_NOFOLLOW, refusing "..",
// which resolves the same.
func OpenBeneath(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: uint64(flags) | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
		switch {
		case err == unix.EAGAIN || err == unix.EINTR: // a rename raced the lookup
			continue
		case errors.Is(err, unix.ENOSYS):
			return openByComponents(dirfd, name, flags)
		}
		return fd, err
	}
}

// openByComponents is OpenBeneath without openat2.
func openByComponents(dirfd int, name string, flags int) (int, error) {
	parts := strings.Split(name, "/")
	at, owned := dirfd, false
	defer func() {
		if owned {
			unix.Close(at)
		}
	}()
	for i, p := range parts {
		switch p {
		case "", ".":
			if i < len(parts)-1 {
				continue
			}
			return unix.Openat(at, ".", flags|unix.O_CLOEXEC, 0)
		case "..":
			return -1, unix.EXDEV // RESOLVE_BENEATH's answer
		}
		if i == len(parts)-1 {
			return unix.Openat(at, p, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		next, err := unix.Openat(at, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		if owned {
			unix.Close(at)
		}
		at, owned = next, true
	}
	return unix.Openat(at, ".", flags|unix.O_CLOEXEC, 0)
}
