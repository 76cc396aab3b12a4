//go:build darwin || freebsd

package openflag

import "golang.org/x/sys/unix"

// Search opens a directory to walk from, without read permission on it:
// O_SEARCH, POSIX's, where Linux has O_PATH.
const Search = unix.O_SEARCH
