//go:build !linux

package sshd

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// errNoWatch: no exact watch is built here yet for macOS (FSEvents) or
// FreeBSD (kqueue). The export is then not watched: the mount's client
// keeps its caches for their time, as it does for any export its server
// cannot watch.
var errNoWatch = errors.New("no exact watch on this system yet")

func localFS(*unix.Statfs_t) bool { return false }

func openSource(*os.File, *unix.Statfs_t) (source, int, error) { return nil, 0, errNoWatch }
