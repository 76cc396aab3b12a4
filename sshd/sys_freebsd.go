package sshd

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// renameNoReplace: FreeBSD has no such flag; ENOSYS makes the caller
// check the new name, then rename, under the export's lock of
// link-shaping requests.
func renameNoReplace(int, string, int, string) error { return unix.ENOSYS }

func statvfsRest(st *syscall.Statfs_t) (frsize, fsid, namemax uint64) {
	return uint64(st.Bsize), uint64(uint32(st.Fsid.Val[0])), uint64(st.Namemax)
}

// errNoFdPath: FreeBSD tells an open file's path only through F_KINFO's
// kinfo_file, which golang.org/x/sys does not describe. Where the export
// hides paths or protects git's, what needs the kernel's path of an open
// file is then refused rather than checked by the request's path.
var errNoFdPath = errors.New("the path of an open file is not known on FreeBSD")

func fdPathOf(int) (string, error) { return "", errNoFdPath }
