package sshd

import (
	"errors"
	"io"
	"io/fs"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

const (
	// listReadSmall is the largest file whose contents a wire.ListRead
	// page carries, whatever the client asks.
	listReadSmall = 64 << 10
	// listReadBudget is the most a page's answer holds, under both ends'
	// packet bound.
	listReadBudget = maxPacket - 16<<10
	// attrsRoom is more than an entry's ATTRS take on the wire.
	attrsRoom = 160
)

// listRead answers wire.ListRead: a page of a directory's entries with
// their attributes, and the contents of the small regular files among
// them. Each file is opened beside the listed directory by its name, not
// following a symlink, and used only if it is still the regular file the
// listing stated: the directory was resolved inside the export and
// checked against the policy (openDir), and hidden names are left out of
// its listing, so nothing read here lies outside what an OPEN could read.
// What is read is recorded in the audit log as a read, as the mount
// reading it ahead of the agent is still the executor reading it.
func (s *sftpServer) listRead(id uint32, r *reader) {
	p := s.rel(r.Str())
	start, small, budget := int(r.U32()), int(r.U32()), int(r.U32())
	f, name, err := s.openDir(p, r.Err)
	if err != nil {
		s.errStatus(id, err)
		return
	}
	defer f.Close()
	s.recordReal(Op{Kind: OpList, Path: name})
	ents, err := f.ReadDir(-1)
	if err != nil && !errors.Is(err, io.EOF) {
		s.errStatus(id, err)
		return
	}
	ents = s.visible(name, ents)
	sortByName(ents)
	small, budget = min(max(small, 0), listReadSmall), min(max(budget, 0), listReadBudget)
	if start < 0 || start > len(ents) {
		start = len(ents)
	}
	b := newBuf()
	b.Byte(wire.ExtendedReply)
	b.U32(id)
	b.U32(uint32(len(ents)))
	countAt := len(b)
	b.U32(0)
	dirFd := int(f.Fd())
	count := 0
	for _, e := range ents[start:] {
		var st unix.Stat_t
		if unix.Fstatat(dirFd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // gone meanwhile
		}
		info := &statInfo{name: e.Name(), st: syscallStat(&st)}
		need := 4 + len(e.Name()) + attrsRoom + 1
		carried := st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size <= int64(small)
		if carried {
			need += 4 + int(st.Size)
		}
		if count > 0 && len(b)+need > budget {
			break // the next page starts with it, contents and all
		}
		withData := carried && len(b)+need <= budget
		var data []byte
		if withData {
			if data, info = s.readSmall(dirFd, e.Name(), &st); data != nil {
				s.recordReal(Op{Kind: OpRead, Path: joinRel(name, e.Name()), Bytes: int64(len(data))})
			}
		}
		b = growBuf(b, need+4+len(data))
		b.Str(e.Name())
		putAttrs(&b, info)
		if data != nil {
			b.Byte(1)
			b.Str(string(data))
		} else {
			b.Byte(0)
		}
		count++
	}
	b.SetU32(countAt, uint32(count))
	s.send(b)
}

// readSmall is the whole contents of name, a regular file of at most
// listReadSmall bytes in the directory open at dirFd that the listing
// stated as st, with what its descriptor says of it after the read; nil
// if it is no longer that file, grew, or cannot be read. Its access time
// is left alone where the server may (readUntouched's reasons).
func (s *sftpServer) readSmall(dirFd int, name string, st *unix.Stat_t) ([]byte, *statInfo) {
	listed := &statInfo{name: name, st: syscallStat(st)}
	fd, err := unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) { // O_NOATIME on a file not the server's
		fd, err = unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, listed
	}
	defer unix.Close(fd)
	data := make([]byte, st.Size+1) // one more: a file that grew is seen to
	n, err := io.ReadFull(fdReader(fd), data)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, listed
	}
	var after unix.Stat_t
	if unix.Fstat(fd, &after) != nil || after.Mode&unix.S_IFMT != unix.S_IFREG || after.Ino != st.Ino ||
		after.Dev != st.Dev || after.Size != int64(n) || n > listReadSmall {
		return nil, listed
	}
	return data[:n], &statInfo{name: name, st: syscallStat(&after)}
}

// fdReader reads a descriptor.
type fdReader int

func (r fdReader) Read(p []byte) (int, error) {
	n, err := unix.Read(int(r), p)
	if n == 0 && err == nil && len(p) > 0 {
		return 0, io.EOF
	}
	if n < 0 {
		n = 0
	}
	return n, err
}

// syscallStat is st as the syscall package's struct, which statInfo holds
// (the two are the same in memory: checked in sftp_dirs.go).
func syscallStat(st *unix.Stat_t) syscall.Stat_t {
	return *(*syscall.Stat_t)(unsafe.Pointer(st))
}

var _ fs.FileInfo = (*statInfo)(nil)
