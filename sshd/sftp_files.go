package sshd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

func (s *sftpServer) open(id uint32, r *reader) {
	h, _, err := s.openFile(r)
	if err != nil {
		s.errStatus(id, err)
		return
	}
	s.sendHandle(id, h)
}

// openRead is wire.OpenRead: OPEN, and the file's first bytes with its
// attributes, in one reply.
func (s *sftpServer) openRead(id uint32, r *reader) {
	h, fi, err := s.openFile(r)
	want := r.U32()
	if err == nil && r.Err != nil {
		h.f.Close()
		err = errBadMessage
	}
	if err != nil {
		s.errStatus(id, err)
		return
	}
	key := s.register(h)
	b := newBuf()
	b.Byte(wire.ExtendedReply)
	b.U32(id)
	b.Str(key)
	putAttrs(&b, fi)
	at := len(b)
	b.U32(0) // the data's length, filled in below
	if h.readable {
		n := int(min(want, maxReadLen))
		b = growBuf(b, n)[:at+4+n]
		got, err := readUntouched(h.f, b[at+4:])
		if err != nil && !errors.Is(err, io.EOF) {
			putBuf(b)
			s.mu.Lock()
			delete(s.handles, key)
			openHandles.Add(-1)
			s.mu.Unlock()
			h.f.Close()
			s.errStatus(id, err)
			return
		}
		b = b[:at+4+got]
		b.SetU32(at, uint32(got))
		h.readBytes.Add(int64(got))
		s.metrics.SFTPBytes("read", got)
	}
	s.send(b)
}

// readUntouched reads the start of f into b without updating f's access
// time where the server may (it owns f, or is root): the start sent with an
// open is read before anyone asked for it, and a file opened and never read
// (or read from what the mount keeps) is not accessed. Where O_NOATIME is
// refused it is a plain read.
func readUntouched(f *os.File, b []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return f.ReadAt(b, 0)
	}
	var flags int
	rc.Control(func(fd uintptr) {
		if flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0); err == nil {
			_, err = unix.FcntlInt(fd, unix.F_SETFL, flags|noAtime)
		}
	})
	if err == nil {
		// Set back for the READs the client asks for.
		defer rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETFL, flags) })
	}
	return f.ReadAt(b, 0)
}

// openNamed is wire.OpenNamed: OPEN under the handle the client named.
// The session's loop has made it the handle's barrier (ServeSFTP).
func (s *sftpServer) openNamed(id uint32, r *reader) {
	key := r.Str()
	// A handle name is the client's to choose, and kept as long as the
	// handle: a short one (ours are "n" and a base-36 count).
	if r.Err != nil || !strings.HasPrefix(key, wire.NamedPrefix) || len(key) > maxHandleName {
		s.errStatus(id, errBadMessage)
		return
	}
	s.mu.Lock()
	_, used := s.handles[key]
	s.mu.Unlock()
	if used {
		s.status(id, wire.Failure, "handle name in use")
		return
	}
	h, _, err := s.openFile(r)
	if err != nil {
		s.errStatus(id, err)
		return
	}
	// Only this worker registers key (requests naming it keep their
	// order), so it is still free.
	h.ownerLayer = s.ownerLayer
	s.mu.Lock()
	s.handles[key] = h
	openHandles.Add(1)
	s.mu.Unlock()
	s.status(id, wire.OK, "")
}

// openFile opens the file an OPEN (or wire.OpenRead) names, with what
// fstat says of it.
func (s *sftpServer) openFile(r *reader) (*handle, fs.FileInfo, error) {
	name := s.rel(r.Str())
	pflags := r.U32()
	a := wire.DecodeAttrs(r)
	if r.Err != nil {
		return nil, nil, errBadMessage
	}
	if err := s.handleRoom(); err != nil {
		return nil, nil, err
	}
	var flags int
	switch {
	case pflags&wire.FlagRead != 0 && pflags&wire.FlagWrite != 0:
		flags = os.O_RDWR
	case pflags&wire.FlagWrite != 0:
		flags = os.O_WRONLY
	default:
		flags = os.O_RDONLY
	}
	// APPEND is left out on purpose: writes come with their offsets, and
	// *os.File refuses WriteAt on an O_APPEND file.
	if pflags&wire.FlagCreat != 0 {
		flags |= os.O_CREATE
	}
	if pflags&wire.FlagTrunc != 0 {
		flags |= os.O_TRUNC
	}
	if pflags&wire.FlagExcl != 0 {
		flags |= os.O_EXCL
	}
	writing := flags&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC) != 0
	if writing && s.readOnly {
		s.record(Op{Kind: OpOpen, Path: name, Err: "read-only delegation", Refused: true})
		return nil, nil, errReadOnly
	}
	perm := fs.FileMode(0o644)
	if a.Flags&wire.AttrPermissions != 0 {
		perm = fs.FileMode(a.Mode) & fs.ModePerm
	}
	// Under a policy, what the open reaches is checked before anything
	// of it goes: the truncation is done here once the file is known to
	// be neither hidden (reached through a symlink) nor, under NoDelete,
	// the owner's.
	trunc := flags&os.O_TRUNC != 0
	checked := s.hide != nil || s.policy.NoDelete || s.guardsChanges()
	if checked {
		flags &^= os.O_TRUNC
	}
	// Whether the open creates the file, for the audit log and the
	// policy: certain with O_EXCL; else it is tried with O_EXCL first,
	// which costs a second open only where the file was there already.
	creating := flags&os.O_CREATE != 0
	var f *os.File
	var plain bool // the kernel's walk followed no symlink: f's path is name
	var err error
	if creating && flags&os.O_EXCL == 0 && (s.audit != nil || checked || s.policy.MaxWriteBytes > 0) {
		// A file is only ever made with O_EXCL, so that what this open
		// made is known: one there is opened without O_CREAT, and one
		// removed meanwhile (a symlinked directory swapped, say) is
		// tried again — else a file made by the second open would be
		// taken for the owner's, and not removed when refused.
		for range 8 {
			f, plain, err = s.fast.OpenCreating(name, flags|os.O_EXCL, perm)
			if !errors.Is(err, fs.ErrExist) {
				break
			}
			f, plain, err = s.fast.OpenCreating(name, flags&^os.O_CREATE, perm)
			if !errors.Is(err, fs.ErrNotExist) {
				creating = false
				break
			}
		}
	} else {
		f, plain, err = s.fast.OpenCreating(name, flags, perm)
	}
	if err != nil {
		if writing && s.audit != nil {
			msg, refused := refusal(err)
			s.record(Op{Kind: OpOpen, Path: name, Err: msg, Refused: refused})
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.IsDir() && flags != os.O_RDONLY {
		err = syscall.EISDIR
	}
	real := name
	if err == nil {
		var hidden bool
		if real, hidden = s.opened(f, name, plain); hidden {
			s.recordReal(Op{Kind: OpOpen, Path: real, Err: errHidden.Error(), Refused: true})
			err = errHidden
		} else if writing && s.guardsChanges() {
			// The kernel's path of what was opened: a symlinked
			// directory swapped after the request was checked
			// reaches no control path of git's, nothing outside the
			// scope, either.
			if err = s.changeRefused(OpOpen, real); err != nil {
				s.recordReal(Op{Kind: OpOpen, Path: real, Err: err.Error(), Refused: true})
			}
		}
	}
	if err == nil && creating {
		// A new name and inode count against the write limit.
		if err = s.spend(int64(len(path.Base(real))) + inodeCost); err != nil {
			s.recordReal(Op{Kind: OpCreate, Path: real, Err: err.Error(), Refused: true})
		}
	}
	if err != nil && creating && !errors.Is(err, errBadMessage) {
		s.root.Remove(real) // made by this open and refused: not left behind
	}
	if err == nil && trunc && checked && fi.Size() > 0 {
		if !creating {
			if err = s.keeps(real); err != nil {
				s.recordReal(Op{Kind: OpOpen, Path: real, Err: err.Error(), Refused: true})
			}
		}
		if err == nil {
			err = f.Truncate(0)
		}
	}
	if err == nil && creating {
		s.madeNow(real)
	}
	if err == nil && a.Flags&wire.AttrACModTime != 0 && (flags&os.O_EXCL != 0 || trunc) {
		// Times sent with an open that made or emptied the file (the
		// client told its kernel of them before our answer): what it
		// told is made true.
		if err = setTimes(f, a); err == nil {
			fi, err = f.Stat()
		}
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if creating {
		s.recordReal(Op{Kind: OpCreate, Path: real})
	}
	return &handle{f: f, readable: flags&os.O_WRONLY == 0 && !fi.IsDir(), name: real, truncated: trunc}, fi, nil
}

func (s *sftpServer) sendHandle(id uint32, h *handle) {
	b := newBuf()
	b.Byte(wire.Handle)
	b.U32(id)
	b.Str(s.register(h))
	s.send(b)
}

// register keeps h open under a new handle string, which it returns.
func (s *sftpServer) register(h *handle) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	key := fmt.Sprintf("%x", s.next)
	h.ownerLayer = s.ownerLayer
	s.handles[key] = h
	openHandles.Add(1)
	return key
}

func (s *sftpServer) get(key string) (*handle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.handles[key]
	if !ok {
		return nil, syscall.EBADF
	}
	return h, nil
}

func (s *sftpServer) close(id uint32, r *reader) {
	key := r.Str()
	s.mu.Lock()
	h, ok := s.handles[key]
	if ok {
		delete(s.handles, key)
		openHandles.Add(-1)
	}
	s.mu.Unlock()
	if !ok {
		s.errStatus(id, syscall.EBADF)
		return
	}
	err := h.f.Close()
	s.closed(h)
	s.errStatus(id, err)
}

func (s *sftpServer) read(id uint32, r *reader) {
	h, err := s.get(r.Str())
	off, n := r.U64(), r.U32()
	if err == nil && r.Err != nil {
		err = errBadMessage
	}
	if err == nil && h.dir {
		err = syscall.EISDIR
	}
	if err != nil {
		s.errStatus(id, err)
		return
	}
	n = min(n, maxReadLen)
	b := newBuf()
	b.Byte(wire.Data)
	b.U32(id)
	b.U32(0) // length, filled in below
	const head = 4 + 9
	b = growBuf(b, int(n))[:head+int(n)]
	got, err := h.f.ReadAt(b[head:], int64(off))
	if got == 0 && err != nil {
		putBuf(b)
		s.errStatus(id, err)
		return
	}
	b.SetU32(head-4, uint32(got))
	h.readBytes.Add(int64(got))
	s.metrics.SFTPBytes("read", got)
	s.send(b[:head+got])
}

func (s *sftpServer) write(id uint32, r *reader) {
	h, err := s.get(r.Str())
	off := r.U64()
	data := r.Bytes()
	if err == nil && r.Err != nil {
		err = errBadMessage
	}
	if err == nil {
		err = s.writable()
	}
	if err == nil && s.policy.MaxWriteBytes > 0 {
		if s.written.Add(int64(len(data))) > s.policy.MaxWriteBytes {
			s.written.Add(-int64(len(data)))
			err = errWriteLimit
			s.recordReal(Op{Kind: OpWrite, Path: h.name, Bytes: int64(len(data)), Err: err.Error(), Refused: true})
		}
	}
	if err == nil {
		_, err = h.f.WriteAt(data, int64(off))
	}
	if err == nil {
		h.wrote(len(data))
		h.writeBytes.Add(int64(len(data)))
		s.metrics.SFTPBytes("write", len(data))
	}
	s.errStatus(id, err)
}

// writebackEvery is how much a handle writes before the server asks the
// kernel to start writing the file's dirty pages to disk.
const writebackEvery = 8 << 20

// wrote counts n bytes written through h and, every writebackEvery, starts
// the disk write of the file's dirty pages without waiting for it
// (sync_file_range, SYNC_FILE_RANGE_WRITE). The kernel would otherwise
// start only past its background threshold (a tenth of memory) or after
// 30 s, so a large file written and fsynced through a mount went to disk
// all at the fsync, after the last byte had crossed the network: now the
// disk works while the rest arrives (dd conv=fsync of 256 MiB, ~0.71 →
// ~0.56 s). Its error is not ours to report: an fsync reports the disk's.
func (h *handle) wrote(n int) {
	if h.unsynced.Add(int64(n)) < writebackEvery {
		return
	}
	h.unsynced.Store(0)
	if rc, err := h.f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { startWriteback(int(fd)) })
	}
}
