package sshd

import (
	"sync"
	"sync/atomic"
	"syscall"
)

// Open handles are bounded per session and in the process: each holds a
// descriptor, and a certificate holder that opens handles without end
// (19,984 in under a second) would take the descriptors the daemon needs
// for its store, its listeners and other delegations. A session may hold
// maxHandles; the process's sessions together all but fdReserve of the
// descriptor limit. Past either, an open fails with EMFILE ("too many open
// files"), as it would on a local disk.
const (
	maxHandles = 1024
	fdReserve  = 512
)

// openHandles counts the handles of every session of the process.
var openHandles atomic.Int64

// handleCeiling is what all sessions may hold together: the descriptor
// limit less fdReserve (Go raises the soft limit to the hard one).
var handleCeiling = sync.OnceValue(func() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur <= 2*fdReserve {
		return fdReserve
	}
	return int64(rl.Cur) - fdReserve
})

// handleRoom refuses an open past the session's or the process's bound.
func (s *sftpServer) handleRoom() error {
	s.mu.Lock()
	n := len(s.handles)
	s.mu.Unlock()
	if n >= maxHandles || openHandles.Load() >= handleCeiling() {
		return syscall.EMFILE
	}
	return nil
}

// maxHandleName bounds a handle name the client chooses (open-named@awcp).
const maxHandleName = 64
