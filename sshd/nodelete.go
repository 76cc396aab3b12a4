package sshd

import (
	"strings"
	"sync"
	"syscall"
)

// What --no-delete promises (wire.ExportPolicy.NoDelete): nothing that was
// in the export before the delegation goes away. The owner's files and
// directories are not removed, renamed or moved, replaced by a rename,
// nor made shorter (an open that truncates, a SETSTAT of a smaller size);
// they may still be written. What the delegation made itself — created,
// made a directory, linked or symlinked, by any of its sessions — it may
// remove, rename and truncate as it likes.

// madeSet is the paths a delegation made, shared by its sessions (a
// grant's). It holds at most maxMade: past that, what the delegation
// makes is the owner's as far as no-delete is concerned (refused, never
// lost).
type madeSet struct {
	mu    sync.Mutex
	paths map[string]struct{}
}

const maxMade = 1 << 16

func newMadeSet() *madeSet { return &madeSet{paths: map[string]struct{}{}} }

func (m *madeSet) add(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.paths) < maxMade {
		m.paths[p] = struct{}{}
	}
}

// has reports whether p, or a directory above it, was made by the
// delegation.
func (m *madeSet) has(p string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for q := p; ; {
		if _, ok := m.paths[q]; ok {
			return true
		}
		i := strings.LastIndexByte(q, '/')
		if i < 0 {
			return false
		}
		q = q[:i]
	}
}

// moved records that from (and what is below it) is now to.
func (m *madeSet) moved(from, to string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.paths {
		if p == from {
			delete(m.paths, p)
			m.paths[to] = struct{}{}
		} else if rest, ok := strings.CutPrefix(p, from+"/"); ok {
			delete(m.paths, p)
			m.paths[to+"/"+rest] = struct{}{}
		}
	}
}

// gone forgets p.
func (m *madeSet) gone(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.paths, p)
}

// keeps reports, under NoDelete, whether name (a real path) is the owner's
// and so must stay: err is errNoDelete then, else nil.
func (s *sftpServer) keeps(name string) error {
	if !s.policy.NoDelete || s.made.has(name) {
		return nil
	}
	return errNoDelete
}

// madeNow records that the delegation made name.
func (s *sftpServer) madeNow(name string) {
	if s.policy.NoDelete {
		s.made.add(name)
	}
}

// shrinks reports, under NoDelete, a truncation of an owner's file to
// size, which is smaller than what the file holds: errNoDelete.
func (s *sftpServer) shrinks(name string, st *syscall.Stat_t, size uint64) error {
	if !s.policy.NoDelete || size >= uint64(st.Size) {
		return nil
	}
	return s.keeps(name)
}

// inodeCost is what each name the delegation adds counts against
// MaxWriteBytes besides its own bytes: a directory entry and an inode.
const inodeCost = 256

// spend counts n bytes the delegation adds against MaxWriteBytes: the
// write limit counts every byte, not only file data (5,000 symlinks with
// 4 KB targets passed a 1 KiB limit). It refuses what would pass it.
func (s *sftpServer) spend(n int64) error {
	if s.policy.MaxWriteBytes <= 0 || n <= 0 {
		return nil
	}
	if s.written.Add(n) > s.policy.MaxWriteBytes {
		s.written.Add(-n)
		return errWriteLimit
	}
	return nil
}

// refund gives back what spend took for something that was not made.
func (s *sftpServer) refund(n int64) {
	if s.policy.MaxWriteBytes > 0 && n > 0 {
		s.written.Add(-n)
	}
}

// adding makes name (with target, a symlink's) by op: its name, target
// and inode count against the write limit, and under NoDelete it is the
// delegation's own.
func (s *sftpServer) adding(name, target string, op func() error) error {
	n := int64(len(name)-strings.LastIndexByte(name, '/')-1+len(target)) + inodeCost
	if err := s.spend(n); err != nil {
		return err
	}
	if err := op(); err != nil {
		s.refund(n)
		return err
	}
	s.madeNow(s.realName(name))
	return nil
}

// moveKeeping renames from to to (replacing what is there unless
// noReplace): under NoDelete only what the delegation made moves. The new
// name counts against the write limit.
func (s *sftpServer) moveKeeping(from, to string, noReplace bool) (replaced bool, _ error) {
	realFrom := s.realName(from)
	if err := s.keeps(realFrom); err != nil {
		return false, err
	}
	n := int64(len(to) - strings.LastIndexByte(to, '/') - 1)
	if err := s.spend(n); err != nil {
		return false, err
	}
	replaced, err := s.rename(from, to, noReplace)
	if err != nil {
		s.refund(n)
		return false, err
	}
	if s.policy.NoDelete {
		s.made.moved(realFrom, s.realName(to))
	}
	return replaced, nil
}
