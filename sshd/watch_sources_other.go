//go:build darwin || freebsd

package sshd

import (
	"os"

	"golang.org/x/sys/unix"
)

// localFS: the file systems whose every change the portable watch sees
// by reading them (a network one would show only what its cache holds).
func localFS(st *unix.Statfs_t) bool {
	switch unix.ByteSliceToString(st.Fstypename[:]) {
	case "apfs", "hfs", "ufs", "zfs", "tmpfs":
		return true
	}
	return false
}

// openSource is the portable source, told at once of directories'
// changes by kqueue (kqueueTrigger), polling alone where kqueue fails.
func openSource(*os.File, *unix.Statfs_t) (source, int, error) {
	trig, err := newDirTrigger()
	if err != nil {
		trig = nil
	}
	return newPollSource(pollEvery, trig), maxWatchDirs, nil
}
