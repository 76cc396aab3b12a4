package sshd

import (
	"errors"
	"io"
	"os"
	"syscall"

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
// reading it ahead of the agent is still the executor reading it, marked
// as fetched ahead (Op.Ahead): the agent may never have opened it.
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
		info, ok := statAt(dirFd, e.Name())
		if !ok {
			continue // gone meanwhile
		}
		need := 4 + len(e.Name()) + attrsRoom + 1
		carried := info.Mode().IsRegular() && info.Size() <= int64(small)
		if carried {
			need += 4 + int(info.Size())
		}
		if count > 0 && len(b)+need > budget {
			break // the next page starts with it, contents and all
		}
		var data []byte
		if carried && len(b)+need <= budget {
			if data, info = readSmall(dirFd, info); data != nil {
				s.recordReal(Op{Kind: OpRead, Path: joinRel(name, e.Name()), Bytes: int64(len(data)), Ahead: true})
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

// readSmall is the whole contents of listed, a regular file of at most
// listReadSmall bytes in the directory open at dirFd, with what its
// descriptor says of it after the read; nil and listed if it is no longer
// that file (same device and inode), grew, or cannot be read. Opened by
// its name beside the directory, never through a link, and without
// waiting on a FIFO swapped in; its access time is left alone where the
// server may (readUntouched).
func readSmall(dirFd int, listed *statInfo) ([]byte, *statInfo) {
	fd, err := unix.Openat(dirFd, listed.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, listed
	}
	f := os.NewFile(uintptr(fd), listed.name)
	defer f.Close()
	data := make([]byte, listed.st.Size+1) // one more: a file that grew is seen to
	n, err := readUntouched(f, data)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, listed
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, listed
	}
	after, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() || after.Ino != listed.st.Ino || after.Dev != listed.st.Dev ||
		after.Size != int64(n) || n > listReadSmall {
		return nil, listed
	}
	return data[:n], &statInfo{name: listed.name, st: *after}
}
