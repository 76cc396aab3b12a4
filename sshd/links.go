package sshd

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/openflag"

	"github.com/awcp/awcp/internal/confine"
)

// The requests that can put a symlink somewhere — SYMLINK, the renames and
// the hard link — keep confine's rule: a link's target may climb no higher
// than the root from where the link lies. They run one at a time per
// export directory (shapeLocks), across all its sessions, so that a link
// checked at its depth cannot be moved up meanwhile by another request:
// nothing else can make a symlink, so a directory made by MKDIR holds none
// the check has not seen.

// shapeLocks are the locks of the export directories served, by identity,
// with the number of sessions using each.
var shapeLocks = struct {
	mu sync.Mutex
	m  map[confine.Root]*shapeLock
}{m: map[confine.Root]*shapeLock{}}

type shapeLock struct {
	sync.Mutex
	users int
}

// acquireShapeLock returns the lock of the export root and a release for
// the session's end.
func acquireShapeLock(root confine.Root) (*sync.Mutex, func()) {
	shapeLocks.mu.Lock()
	defer shapeLocks.mu.Unlock()
	l := shapeLocks.m[root]
	if l == nil {
		l = &shapeLock{}
		shapeLocks.m[root] = l
	}
	l.users++
	return &l.Mutex, func() {
		shapeLocks.mu.Lock()
		defer shapeLocks.mu.Unlock()
		if l.users--; l.users == 0 {
			delete(shapeLocks.m, root)
		}
	}
}

// symlink makes link point to target where confine's rule allows it.
func (s *sftpServer) symlink(target, link string) error {
	s.shape.Lock()
	defer s.shape.Unlock()
	fd, base, release, err := s.fast.dirOf(link)
	if err != nil {
		return err
	}
	defer release()
	return s.rootID.Symlink(target, fd, base)
}

// rename moves from to to — replacing what is there unless noReplace —
// where what moves keeps confine's rule at its new place: a symlink is
// checked at its new depth, a directory moved up has every link in it
// checked at theirs.
func (s *sftpServer) rename(from, to string, noReplace bool) (replaced bool, _ error) {
	if from == "." || to == "." {
		return false, unix.EBUSY
	}
	s.shape.Lock()
	defer s.shape.Unlock()
	err := s.moving("rename", from, to, func(fromFd int, fromBase string, toFd int, toBase string) error {
		if !noReplace {
			// What the new name held, for the change list: under
			// s.shape, nothing of ours moves it meanwhile.
			var st unix.Stat_t
			replaced = unix.Fstatat(toFd, toBase, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
			return unix.Renameat(fromFd, fromBase, toFd, toBase)
		}
		err := renameNoReplace(fromFd, fromBase, toFd, toBase)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) { // a file system without it
			var st unix.Stat_t
			if unix.Fstatat(toFd, toBase, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				return unix.EEXIST
			}
			err = unix.Renameat(fromFd, fromBase, toFd, toBase)
		}
		return err
	})
	return replaced, err
}

// link makes to a hard link of from (a symlink itself, not its target).
func (s *sftpServer) link(from, to string) error {
	s.shape.Lock()
	defer s.shape.Unlock()
	return s.moving("link", from, to, func(fromFd int, fromBase string, toFd int, toBase string) error {
		return unix.Linkat(fromFd, fromBase, toFd, toBase, 0)
	})
}

// moving runs op (a rename or link of from to to) on the two parent
// directories once what from names is found to keep the rule at to.
// The caller holds s.shape.
func (s *sftpServer) moving(what, from, to string, op func(fromFd int, fromBase string, toFd int, toBase string) error) error {
	fromFd, fromBase, releaseFrom, err := s.fast.dirOf(from)
	if err != nil {
		return err
	}
	defer releaseFrom()
	toFd, toBase, releaseTo, err := s.fast.dirOf(to)
	if err != nil {
		return err
	}
	defer releaseTo()
	var st unix.Stat_t
	if err := unix.Fstatat(fromFd, fromBase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.LinkError{Op: what, Old: from, New: to, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := confine.Readlink(fromFd, fromBase)
		if err != nil {
			return err
		}
		if err := s.rootID.Fits(target, toFd); err != nil {
			return err
		}
	case unix.S_IFDIR:
		fromDepth, err := s.rootID.Depth(fromFd)
		if err != nil {
			return err
		}
		toDepth, err := s.rootID.Depth(toFd)
		if err != nil {
			return err
		}
		if toDepth < fromDepth {
			dir, err := unix.Openat(fromFd, fromBase, openflag.Search|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			err = confine.CheckTree(dir, toDepth+1)
			unix.Close(dir)
			if err != nil {
				return err
			}
		}
	}
	if err := op(fromFd, fromBase, toFd, toBase); err != nil {
		return &os.LinkError{Op: what, Old: from, New: to, Err: err}
	}
	return nil
}
