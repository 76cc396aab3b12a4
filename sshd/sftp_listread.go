package sshd

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
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
	ents, err := s.listed(f, name)
	if err != nil {
		s.errStatus(id, err)
		return
	}
	small, budget = min(max(small, 0), listReadSmall), min(max(budget, 0), listReadBudget)
	b := newBuf()
	b.Byte(wire.ExtendedReply)
	b.U32(id)
	b, _ = s.putPage(b, f, name, ents, start, small, budget, false)
	s.send(b)
}

// listed is the visible entries of directory f (name, relative to the
// root) in name order; the listing is recorded in the audit log.
func (s *sftpServer) listed(f *os.File, name string) ([]fs.DirEntry, error) {
	s.recordReal(Op{Kind: OpList, Path: name})
	ents, err := f.ReadDir(-1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	ents = s.visible(name, ents)
	sortByName(ents)
	return ents, nil
}

// putPage appends to b a page of directory f's entries ents (f is name,
// relative to the root), from the start'th on, as wire.ListRead lays it
// out: the directory's entry count, the page's, then each entry with the
// contents of a regular file of at most small bytes, until b would pass
// budget bytes. A page holds at least one entry unless none is left, or
// orNone says an empty page is wanted rather than one past the budget.
// subdirs are the names of the directories it holds.
func (s *sftpServer) putPage(b buf, f *os.File, name string, ents []fs.DirEntry, start, small, budget int, orNone bool) (_ buf, subdirs []string) {
	if start < 0 || start > len(ents) {
		start = len(ents)
	}
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
		if (count > 0 || orNone) && len(b)+need > budget {
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
		if info.IsDir() {
			subdirs = append(subdirs, e.Name())
		}
		count++
	}
	b.SetU32(countAt, uint32(count))
	return b, subdirs
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

const (
	// treeReadDirs is the most directories one wire.TreeRead answer
	// holds: what a request costs the server stays bounded where the
	// directories are empty.
	treeReadDirs = 4096
	// treeReadStarts is the most directories a wire.TreeRead request
	// may name.
	treeReadStarts = 1024
	// treeReadRoom is what an answer must have left for one more
	// directory: its record and an entry or two.
	treeReadRoom = 1 << 10
)

// treeStart is a directory a wire.TreeRead request names, as the client
// named it (the answer's records refer to it by index), and the index of
// its first entry wanted.
type treeStart struct {
	name  string // relative to the root
	start int
}

// treeDir is a directory the walk is to list: under which of the
// request's directories, by what path below it, and from which entry.
type treeDir struct {
	from  int
	sub   string
	name  string // relative to the root
	start int
}

// treeRead answers wire.TreeRead: pages of the named directories and of
// every directory below them, breadth first, as many as the answer's
// budget holds — a walk of the lent tree fetched in a few round trips,
// not one per level of it. Each directory is opened as a LIST-READ's is
// (inside the export, checked against the policy, recorded in the audit
// log), found by its own listing: a subdirectory is an entry the kernel
// stated as a directory (a symlink is never followed), and hidden names
// are not listed, so nothing is walked that a LIST-READ could not read.
func (s *sftpServer) treeRead(id uint32, r *reader) {
	small, budget, n := int(r.U32()), int(r.U32()), r.U32()
	if r.Err != nil || n == 0 || n > treeReadStarts {
		s.status(id, wire.BadMessage, "tree-read: a malformed request, or past its bounds")
		return
	}
	queue := make([]treeDir, 0, n)
	for i := range int(n) {
		p := s.rel(r.Str())
		queue = append(queue, treeDir{from: i, name: p, start: int(r.U32())})
	}
	if r.Err != nil {
		s.errStatus(id, errBadMessage)
		return
	}
	small, budget = min(max(small, 0), listReadSmall), min(max(budget, 0), listReadBudget)
	b := newBuf()
	b.Byte(wire.ExtendedReply)
	b.U32(id)
	dirsAt := len(b)
	b.U32(0)
	dirs := 0
	for len(queue) > 0 && dirs < treeReadDirs {
		d := queue[0]
		if dirs > 0 && len(b)+12+len(d.sub)+treeReadRoom > budget {
			break // the client asks for the rest
		}
		queue = queue[1:]
		b = growBuf(b, 12+len(d.sub))
		b.U32(uint32(d.from))
		b.Str(d.sub)
		var subdirs []string
		b, subdirs = s.treePage(b, d, small, budget, dirs > 0)
		dirs++
		for _, sub := range subdirs {
			queue = append(queue, treeDir{from: d.from, sub: path.Join(d.sub, sub), name: joinRel(d.name, sub)})
		}
	}
	b.SetU32(dirsAt, uint32(dirs))
	s.send(b)
}

// treePage appends directory d's record after its name: a status, and if
// it is SSH_FX_OK a page of its entries (putPage); subdirs are the
// directories the page holds, by name.
func (s *sftpServer) treePage(b buf, d treeDir, small, budget int, orNone bool) (buf, []string) {
	f, name, err := s.openDir(d.name, nil)
	var ents []fs.DirEntry
	if err == nil {
		defer f.Close()
		ents, err = s.listed(f, name)
	}
	if err != nil {
		if isRefusal(err) && s.audit != nil {
			msg, _ := refusal(err)
			s.record(Op{Kind: OpList, Path: d.name, Err: msg, Refused: true})
		}
		code, _ := statusOf(err)
		b.U32(code)
		return b, nil
	}
	b.U32(wire.OK)
	return s.putPage(b, f, name, ents, d.start, small, budget, orNone)
}
