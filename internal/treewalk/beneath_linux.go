package treewalk

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/portable"
)

// OpenBeneath opens name (relative, slash-separated) beneath the
// directory open at dirfd, following no symlink on the way and never
// leaving it: openat2 with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS.
// Where the kernel has no openat2 — or a sandbox answers it ENOSYS, as
// awcp's does (its mode cannot be checked there for set-id bits) — it
// walks the name a component at a time with O_NOFOLLOW, refusing "..",
// which resolves the same.
func OpenBeneath(dirfd int, name string, flags int) (int, error) {
	if portable.Selected {
		return openByComponents(dirfd, name, flags)
	}
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
