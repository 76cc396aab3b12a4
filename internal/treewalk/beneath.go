package treewalk

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/openflag"
)

// openByComponents is OpenBeneath without openat2: a component at a time
// with O_NOFOLLOW, refusing "..", which resolves the same. The portable
// way (macOS, FreeBSD), and Linux's where openat2 is refused.
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
		next, err := unix.Openat(at, p, openflag.Search|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
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
