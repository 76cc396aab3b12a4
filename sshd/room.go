package sshd

import (
	"os"
	"syscall"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// room answers wire.Room: the bytes left under the export's write limit
// and the bytes free on the file system the session writes to, then the
// owner a file the session creates is given. The mount
// writes behind (write(2) returns before the write is answered) only
// while both leave room for it; past them it waits for each write's
// answer, so that this server's refusal — the write limit, a full disk —
// fails the write(2) that caused it instead of a later call, or none.
func (s *sftpServer) room(id uint32) {
	left := wire.RoomUnbounded
	if limit := s.policy.MaxWriteBytes; limit > 0 {
		left = uint64(max(limit-s.written.Load(), 0))
	}
	if s.readOnly {
		left = 0
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.root.Name(), &st); err != nil {
		s.errStatus(id, err)
		return
	}
	frsize, _, _ := statvfsRest(&st)
	b := newBuf()
	b.Byte(wire.ExtendedReply)
	b.U32(id)
	b.U64(left)
	b.U64(uint64(st.Bavail) * frsize)
	// Who a file the session creates belongs to: the mount creates
	// behind only where it knows what it tells the kernel is so.
	b.U32(uint32(os.Geteuid()))
	b.U32(uint32(os.Getegid()))
	var flags uint32
	if newFileTakesDirGroup {
		flags |= wire.RoomDirGroup
	}
	b.U32(flags)
	s.send(b)
}
