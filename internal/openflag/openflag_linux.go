package openflag

import "golang.org/x/sys/unix"

// Search opens a directory to walk from, without read permission on it.
const Search = unix.O_PATH
