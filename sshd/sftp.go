package sshd

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/confine"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// This file is our own SFTP v3 server. pkg/sftp's request server answers
// FSTAT and FSETSTAT by path (so an open, unlinked file is lost) and has no
// fsync@openssh.com; its plain server is not confined to a directory. So
// the server side is written here, on os.Root. The mount's client is ours
// too (fs/sftpc); pkg/sftp's client is kept for the interop tests.

const (
	maxPacket   = 1<<20 + 1024 // a 1 MiB write plus its header
	maxReadLen  = 1 << 20
	readdirPage = 256
	workers     = 8
)

// extensions are announced in VERSION.
var extensions = [][2]string{
	{"posix-rename@openssh.com", "1"},
	{"statvfs@openssh.com", "2"},
	{"fsync@openssh.com", "1"},
	{"hardlink@openssh.com", "1"},
	{wire.WriteBarrier, "1"},
	{wire.OpenRead, "1"},
	{wire.OpenNamed, "1"},
	{wire.RmdirInOrder, "1"},
	{wire.List, "1"},
}

// errBadMessage is a malformed packet.
var errBadMessage = wire.ErrMalformed

// sftpServer serves one SFTP session on one directory.
type sftpServer struct {
	root     *os.Root
	fast     *beneath // opens and stats in one syscall where the kernel can
	readOnly bool
	log      *slog.Logger
	out      *responder
	alias    string       // "/" + the export's locator, another name of the root; "" for none
	env      string       // "/" + the locator of its environment root (envroot.go); "" for none
	rootID   confine.Root // the export directory's identity, for confine's depths
	shape    *sync.Mutex  // the export's lock of link-shaping requests (links.go)

	mu      sync.Mutex // guards handles and next
	handles map[string]*handle
	next    uint64
}

// handle is an open file or directory.
type handle struct {
	mu       sync.Mutex // serializes readdir on a directory
	f        *os.File
	dir      bool
	readable bool          // a file opened for reading
	listed   bool          // entries has been read
	entries  []os.DirEntry // directory listing, read at the first READDIR
	pos      int
	unsynced atomic.Int64 // bytes written since the disk write was last started (wrote)
}

// ServeSFTP runs an SFTP v3 session on rw, confined to root, until rw ends.
// It closes every handle it opened before returning. What the session
// holds is bounded by a budget of its own (connInFlight) and the process's
// (flow.go).
func ServeSFTP(rw io.ReadWriter, root *os.Root, readOnly bool, log *slog.Logger) error {
	return serveSFTP(rw, root, readOnly, log, newFlow(newBudget(connInFlight)), "")
}

// errStalled ends a session whose client stopped reading answers and whose
// channel then failed.
var errStalled = errors.New("sftp: answers could not be written")

// serveSFTP is ServeSFTP counting against fl, with the locators of
// delegation id (if not ""), Locator and EnvLocator, served as other
// names of the root and of its environment root.
func serveSFTP(rw io.ReadWriter, root *os.Root, readOnly bool, log *slog.Logger, fl flow, id string) error {
	s := &sftpServer{root: root, readOnly: readOnly, log: log, handles: map[string]*handle{}}
	if id != "" {
		s.alias, s.env = path.Clean("/"+Locator(id)), path.Clean("/"+EnvLocator(id))
	}
	s.fast = newBeneath(root)
	defer s.fast.Close()
	if s.fast.dir == nil {
		return errors.New("sftp: the export directory cannot be opened")
	}
	var err error
	if s.rootID, err = confine.RootOf(int(s.fast.dir.Fd())); err != nil {
		return err
	}
	shape, release := acquireShapeLock(s.rootID)
	defer release()
	s.shape = shape
	defer s.closeAll()
	s.out = startResponder(rw, log, fl)
	defer s.out.stop() // after the workers have queued their last response

	// Requests on one handle or path go to the same worker, so they keep
	// their order; others run side by side.
	queues := make([]chan job, workers)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan job, 64)
		wg.Add(1)
		go func(q chan job) {
			defer wg.Done()
			for j := range q {
				if j.after != nil {
					j.after.Wait()
				}
				s.handle(j.pkt)
				if j.done != nil {
					j.done.Done()
				}
				fl.give(j.held)
				putPacket(j.pkt)
			}
		}(queues[i])
	}
	defer func() {
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
	}()

	// order holds, by handle, the writes sent since its last barrier request
	// and that request (wire.WriteBarrier). Only this loop touches it.
	order := map[string]*handleOrder{}
	// emptying holds, by directory, the REMOVEs and RMDIRs of names in it
	// not yet handled, which its RMDIR waits for (wire.RmdirInOrder). Only
	// this loop touches the map.
	emptying := emptyingMap{}
	// Buffered: each read of an SSH channel may send a window adjustment
	// (a packet and a syscall) once more than a few packets wait unread,
	// which a burst of writes sent behind makes so; reading a header and a
	// body at a time, that was two adjustments per request.
	r := bufio.NewReaderSize(rw, 64<<10)
	var hdr [4]byte
	for {
		// Flow control: read nothing more while the session holds its
		// share (flow.go); the client's window then closes.
		if !fl.wait(s.out.broken) {
			return errStalled
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n < 1 || n > maxPacket {
			return fmt.Errorf("sftp: packet of %d bytes", n)
		}
		pkt := getPacket(int(n))
		if _, err := io.ReadFull(r, pkt); err != nil {
			putPacket(pkt)
			return err
		}
		if pkt[0] == wire.Init {
			putPacket(pkt)
			s.sendVersion()
			continue
		}
		j := job{pkt: pkt, held: cap(pkt) + answerBound(pkt)}
		fl.take(j.held) // given back by the worker, once the answer is queued
		switch key, ok := firstString(pkt); {
		case !ok:
		case pkt[0] == wire.Write:
			o := order[string(key)]
			if o == nil {
				if !s.has(key) { // unknown handles leave nothing behind
					break
				}
				o = &handleOrder{}
				order[string(key)] = o
			}
			if o.writes == nil {
				o.writes = new(sync.WaitGroup)
			}
			o.writes.Add(1)
			j.done, j.after = o.writes, o.barrier
		case pkt[0] == wire.Extended && string(key) == wire.OpenNamed:
			// The open is the handle's first barrier: its writes and
			// the rest wait for it. (A name used before waits for that
			// handle's writes; the open then refuses it.)
			name, ok := stringAt(pkt, 9+len(key))
			if !ok {
				break
			}
			o := order[string(name)]
			if o == nil {
				o = &handleOrder{}
				order[string(name)] = o
			}
			j.after, o.writes = o.writes, nil
			o.barrier = new(sync.WaitGroup)
			o.barrier.Add(1)
			j.done = o.barrier
		case pkt[0] == wire.Remove || pkt[0] == wire.Rmdir:
			name := s.rel(string(key))
			if pkt[0] == wire.Rmdir {
				if in := emptying[name]; in != nil {
					j.after = &in.wg
					delete(emptying, name)
				}
			}
			j.done = emptying.add(path.Dir(name))
		case pkt[0] == wire.Fstat || pkt[0] == wire.Fsetstat || pkt[0] == wire.Close:
			o := order[string(key)]
			if o == nil {
				break
			}
			j.after, o.writes = o.writes, nil
			if pkt[0] == wire.Close {
				delete(order, string(key))
				break
			}
			o.barrier = new(sync.WaitGroup)
			o.barrier.Add(1)
			j.done = o.barrier
		}
		queues[routeKey(pkt)%workers] <- j
	}
}

// job is a request on its way to a worker: it waits for after, if set,
// and is marked in done, if set, once handled.
//
// A handle's writes run side by side on several workers, but a barrier
// request on it (FSTAT, FSETSTAT, CLOSE: wire.WriteBarrier) waits for the writes
// sent before it, and the writes sent after it wait for it. A job only
// ever waits for jobs that came before it, and every worker takes its jobs
// in order, so no wait is circular.
type job struct {
	pkt   []byte
	held  int // what the job counts against the session's flow until handled
	after *sync.WaitGroup
	done  doner
}

// answerBound is how large the answer to pkt can be, counted against the
// session's flow from the moment pkt is read: a READ of 1 MiB is a small
// request with a large answer, and the answers of the requests queued for
// the workers must be counted before they are made.
func answerBound(pkt []byte) int {
	const small = 1 << 10 // a STATUS, HANDLE, ATTRS or one NAME
	r := newReader(pkt[1:])
	r.U32() // request id
	switch pkt[0] {
	case wire.Read:
		r.Str()
		r.U64()
		if n := r.U32(); r.Err == nil {
			return small + int(min(n, maxReadLen))
		}
	case wire.Readdir:
		return readdirPage * nameBound
	case wire.Extended:
		switch r.Str() {
		case wire.List:
			return wire.ListMax * nameBound
		case wire.OpenRead:
			r.Str()
			r.U32()
			wire.DecodeAttrs(&r)
			if n := r.U32(); r.Err == nil {
				return small + int(min(n, maxReadLen))
			}
			return small + maxReadLen
		}
	}
	return small
}

// nameBound is what one entry of a NAME answer takes at most: a name of
// 255 bytes twice (the long name repeats it) and its attributes.
const nameBound = 2*255 + 128

// pendingRemoves are the removes in one directory not yet handled: wg
// counts them for an RMDIR to wait on, n for the sweep to tell an idle
// entry.
type pendingRemoves struct {
	wg sync.WaitGroup
	n  atomic.Int64
}

func (p *pendingRemoves) Done() {
	p.n.Add(-1)
	p.wg.Done()
}

// emptyingMap is the read loop's pendingRemoves by directory.
type emptyingMap map[string]*pendingRemoves

// add counts a remove in dir and returns what marks it handled. Entries
// whose removes are all handled are swept past a bound: an RMDIR finding
// none waits for nothing, which is right for them.
func (m emptyingMap) add(dir string) doner {
	in := m[dir]
	if in == nil {
		if len(m) >= 1024 {
			for d, p := range m {
				if p.n.Load() == 0 {
					delete(m, d)
				}
			}
		}
		in = &pendingRemoves{}
		m[dir] = in
	}
	in.n.Add(1)
	in.wg.Add(1)
	return in
}

// doner is what a job marks once handled.
type doner interface{ Done() }

// handleOrder is the state of one handle's barrier.
type handleOrder struct {
	writes  *sync.WaitGroup // the writes since the last barrier request
	barrier *sync.WaitGroup // the last barrier request, until it is handled
}

// firstString is the packet's first string (a handle or a path), after
// its type and request id.
func firstString(pkt []byte) ([]byte, bool) { return stringAt(pkt, 5) }

// stringAt is the string at offset off of the packet.
func stringAt(pkt []byte, off int) ([]byte, bool) {
	if len(pkt) < off+4 {
		return nil, false
	}
	b := pkt[off:]
	n := binary.BigEndian.Uint32(b)
	if int(n) > len(b)-4 {
		return nil, false
	}
	return b[4 : 4+n], true
}

// has reports whether key is an open handle.
func (s *sftpServer) has(key []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.handles[string(key)]
	return ok
}

// Request packets are recycled once handled (nothing keeps a reference to
// one), in three sizes: most requests, writes of up to 64 KiB, and larger
// writes. A request counts against the session's budget at its buffer's
// size, so a flood of small requests is bounded by what it holds.
const (
	tinyPacket  = 4 << 10
	smallPacket = 64 << 10
)

var (
	tinyPackets  = sync.Pool{New: func() any { return new([tinyPacket]byte) }}
	smallPackets = sync.Pool{New: func() any { return new([smallPacket]byte) }}
	largePackets = sync.Pool{New: func() any { return new([maxPacket]byte) }}
)

func getPacket(n int) []byte {
	switch {
	case n <= tinyPacket:
		return tinyPackets.Get().(*[tinyPacket]byte)[:n]
	case n <= smallPacket:
		return smallPackets.Get().(*[smallPacket]byte)[:n]
	}
	return largePackets.Get().(*[maxPacket]byte)[:n]
}

func putPacket(pkt []byte) {
	switch cap(pkt) {
	case tinyPacket:
		tinyPackets.Put((*[tinyPacket]byte)(pkt[:tinyPacket]))
	case smallPacket:
		smallPackets.Put((*[smallPacket]byte)(pkt[:smallPacket]))
	case maxPacket:
		largePackets.Put((*[maxPacket]byte)(pkt[:maxPacket]))
	}
}

// routeKey picks a worker from the path or handle the request acts on:
// the packet's first string, but for SYMLINK the link and for an extension
// the string after its name (for a link or a rename, the new name).
// Reads and writes also mix in their offset, so the pipelined chunks of one
// file are served side by side: pread and pwrite at distinct offsets need
// no order, and the handle's other requests wait for its writes (job).
func routeKey(pkt []byte) uint32 {
	key, ok := firstString(pkt)
	if !ok {
		return 0
	}
	at := 5 + 4 + len(key)
	switch {
	case pkt[0] == wire.Extended:
		// By what it names, not by the extension's name: opens of many
		// files (wire.OpenRead) run side by side. A link or a rename by
		// its new name, which the client reads back right behind it.
		if name := string(key); name == "hardlink@openssh.com" || name == "posix-rename@openssh.com" {
			if from, ok := stringAt(pkt, at); ok {
				at += 4 + len(from)
			}
		}
		fallthrough
	case pkt[0] == wire.Symlink: // (target, link): by the link
		if named, ok := stringAt(pkt, at); ok {
			key = named
		}
	}
	var h uint32 = 2166136261
	for _, c := range key {
		h = (h ^ uint32(c)) * 16777619
	}
	if pkt[0] == wire.Read || pkt[0] == wire.Write {
		if rest := pkt[at:]; len(rest) >= 8 {
			h += uint32(binary.BigEndian.Uint64(rest) >> 16) // 64 KiB chunks
		}
	}
	return h
}

func (s *sftpServer) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, h := range s.handles {
		h.f.Close()
		delete(s.handles, k)
	}
}

func (s *sftpServer) sendVersion() {
	b := newBuf()
	b.Byte(wire.Version)
	b.U32(3)
	for _, e := range extensions {
		b.Str(e[0])
		b.Str(e[1])
	}
	s.send(b)
}

// send queues a response built on newBuf; its buffer is recycled once it
// is written.
func (s *sftpServer) send(b buf) {
	b.SetU32(0, uint32(len(b)-4))
	s.out.queue(b)
}

func (s *sftpServer) status(id uint32, code uint32, msg string) {
	b := newBuf()
	b.Byte(wire.Status)
	b.U32(id)
	b.U32(code)
	b.Str(msg)
	b.Str("")
	s.send(b)
}

// errStatus answers id with the status err maps to. Messages carry only
// the errno text: never a host path.
func (s *sftpServer) errStatus(id uint32, err error) {
	code, msg := statusOf(err)
	s.status(id, code, msg)
}

func statusOf(err error) (uint32, string) {
	var errno syscall.Errno
	switch {
	case err == nil:
		return wire.OK, "OK"
	case errors.Is(err, io.EOF):
		return wire.EOF, "EOF"
	case errors.Is(err, errReadOnly):
		return wire.PermissionDenied, "read-only delegation"
	case errors.Is(err, errBadMessage):
		return wire.BadMessage, "bad message"
	case errors.Is(err, errUnsupported):
		return wire.OpUnsupported, "operation unsupported"
	case errors.Is(err, fs.ErrNotExist):
		return wire.NoSuchFile, "no such file"
	case errors.Is(err, fs.ErrPermission):
		return wire.PermissionDenied, "permission denied"
	case errors.Is(err, confine.ErrEscape):
		return wire.PermissionDenied, confine.ErrEscape.Error()
	case errors.Is(err, errEscape), isEscape(err):
		return wire.PermissionDenied, "path leaves the delegated directory"
	case errors.As(err, &errno):
		return wire.Failure, errno.Error()
	}
	return wire.Failure, "failure"
}

var (
	errReadOnly    = errors.New("read-only")
	errUnsupported = errors.New("unsupported")
)

// isEscape reports os.Root's refusal of a path that leads out.
func isEscape(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes")
}

// rel maps a request path (absolute or relative to the root) to a name
// inside the root. ".." cannot climb above "/". The export's locator
// (ExportLocator: "awcp/<id>") names the root too, as START says it does,
// and so does "workspace" in its environment root (envroot.go); the other
// names there are mapped to names holding a NUL (see envRoot).
func (s *sftpServer) rel(p string) string {
	p = path.Clean("/" + p)
	if name, ok := s.envName(p); ok {
		if inEnv(name) {
			return name
		}
		p = name
	} else if s.alias != "" {
		if rest, ok := strings.CutPrefix(p, s.alias); ok && (rest == "" || rest[0] == '/') {
			p = path.Clean("/" + rest)
		}
	}
	if p = strings.TrimPrefix(p, "/"); p == "" {
		return "."
	}
	return p
}

// handle processes one request; it never panics out of the session.
func (s *sftpServer) handle(pkt []byte) {
	typ := pkt[0]
	r := newReader(pkt[1:])
	id := r.U32()
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("sftp: handler panic", "type", typ, "panic", fmt.Sprint(v))
			s.status(id, wire.Failure, "internal error")
		}
	}()
	if r.Err != nil {
		s.status(id, wire.BadMessage, "bad message")
		return
	}
	switch typ {
	case wire.Open:
		s.open(id, &r)
	case wire.Close:
		s.close(id, &r)
	case wire.Read:
		s.read(id, &r)
	case wire.Write:
		s.write(id, &r)
	case wire.Lstat, wire.Stat:
		name := s.rel(r.Str())
		if r.Err != nil {
			s.errStatus(id, errBadMessage)
			return
		}
		var fi fs.FileInfo
		var err error
		switch {
		case name == envRoot:
			fi, err = s.envRootInfo()
		case inEnv(name):
			err = fs.ErrNotExist
		case typ == wire.Lstat:
			fi, err = s.fast.Lstat(name)
		default:
			fi, err = s.fast.Stat(name)
		}
		s.attrsOrStatus(id, fi, err)
	case wire.Fstat:
		h, err := s.get(r.Str())
		if err != nil {
			s.errStatus(id, err)
			return
		}
		fi, err := h.f.Stat()
		s.attrsOrStatus(id, fi, err)
	case wire.Setstat:
		name := s.rel(r.Str())
		a := wire.DecodeAttrs(&r)
		s.errStatus(id, s.setstat(name, nil, a, r.Err))
	case wire.Fsetstat:
		h, err := s.get(r.Str())
		a := wire.DecodeAttrs(&r)
		if err != nil {
			s.errStatus(id, err)
			return
		}
		s.errStatus(id, s.setstat("", h.f, a, r.Err))
	case wire.Opendir:
		s.opendir(id, &r)
	case wire.Readdir:
		s.readdir(id, &r)
	case wire.Remove:
		s.errStatus(id, s.mutate(&r, func(name string) error { return s.fast.Remove(name, false) }))
	case wire.Rmdir:
		s.errStatus(id, s.mutate(&r, func(name string) error { return s.fast.Remove(name, true) }))
	case wire.Mkdir:
		name := s.rel(r.Str())
		a := wire.DecodeAttrs(&r)
		perm := fs.FileMode(0o755)
		if a.Flags&wire.AttrPermissions != 0 {
			perm = fs.FileMode(a.Mode) & fs.ModePerm
		}
		err := r.Err
		if err == nil {
			err = s.writable()
		}
		if err == nil {
			err = s.fast.Mkdir(name, perm)
		}
		s.errStatus(id, err)
	case wire.Realpath:
		p := r.Str()
		if r.Err != nil {
			s.errStatus(id, errBadMessage)
			return
		}
		switch name := s.rel(p); {
		case name == envRoot:
			s.name(id, s.env, nil)
		case inEnv(name):
			s.errStatus(id, fs.ErrNotExist)
		default:
			s.name(id, "/"+strings.TrimPrefix(name, "."), nil)
		}
	case wire.Rename:
		from, to := s.rel(r.Str()), s.rel(r.Str())
		err := r.Err
		if err == nil {
			err = s.writable()
		}
		if err == nil {
			// Plain v3 RENAME does not replace: that is posix-rename.
			err = s.rename(from, to, true)
		}
		s.errStatus(id, err)
	case wire.Readlink:
		name := s.rel(r.Str())
		if r.Err != nil {
			s.errStatus(id, errBadMessage)
			return
		}
		target, err := s.root.Readlink(name)
		if err != nil {
			s.errStatus(id, err)
			return
		}
		s.name(id, target, nil)
	case wire.Symlink:
		// OpenSSH (and pkg/sftp) send the target first, then the link path.
		target, link := r.Str(), s.rel(r.Str())
		err := r.Err
		if err == nil {
			err = s.writable()
		}
		if err == nil {
			err = s.symlink(target, link)
		}
		s.errStatus(id, err)
	case wire.Extended:
		s.extended(id, &r)
	default:
		s.status(id, wire.OpUnsupported, "operation unsupported")
	}
}

func (s *sftpServer) writable() error {
	if s.readOnly {
		return errReadOnly
	}
	return nil
}

// mutate runs fn on the request's path if writes are allowed.
func (s *sftpServer) mutate(r *reader, fn func(name string) error) error {
	name := s.rel(r.Str())
	if r.Err != nil {
		return errBadMessage
	}
	if err := s.writable(); err != nil {
		return err
	}
	return fn(name)
}

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
			s.mu.Unlock()
			h.f.Close()
			s.errStatus(id, err)
			return
		}
		b = b[:at+4+got]
		b.SetU32(at, uint32(got))
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
			_, err = unix.FcntlInt(fd, unix.F_SETFL, flags|unix.O_NOATIME)
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
	if r.Err != nil || !strings.HasPrefix(key, wire.NamedPrefix) {
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
	s.mu.Lock()
	s.handles[key] = h
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
	if flags&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC) != 0 && s.readOnly {
		return nil, nil, errReadOnly
	}
	perm := fs.FileMode(0o644)
	if a.Flags&wire.AttrPermissions != 0 {
		perm = fs.FileMode(a.Mode) & fs.ModePerm
	}
	f, err := s.fast.OpenCreating(name, flags, perm)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.IsDir() && flags != os.O_RDONLY {
		err = syscall.EISDIR
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return &handle{f: f, readable: flags&os.O_WRONLY == 0 && !fi.IsDir()}, fi, nil
}

func (s *sftpServer) opendir(id uint32, r *reader) {
	name := s.rel(r.Str())
	if name == envRoot && r.Err == nil {
		s.openEnvRoot(id)
		return
	}
	f, err := s.openDir(name, r.Err)
	if err != nil {
		s.errStatus(id, err)
		return
	}
	s.sendHandle(id, &handle{f: f, dir: true})
}

// openEnvRoot opens the environment root: a handle on the export's root
// (so that closing it is as for any directory) listing only the export.
func (s *sftpServer) openEnvRoot(id uint32) {
	ent, err := s.envEntry()
	if err != nil {
		s.errStatus(id, err)
		return
	}
	f, err := s.root.Open(".")
	if err != nil {
		s.errStatus(id, err)
		return
	}
	s.sendHandle(id, &handle{f: f, dir: true, listed: true, entries: []fs.DirEntry{ent}})
}

// openDir opens the directory name (OPENDIR, wire.List); decodeErr is the
// request's decoding error.
func (s *sftpServer) openDir(name string, decodeErr error) (*os.File, error) {
	if decodeErr != nil {
		return nil, errBadMessage
	}
	f, err := s.root.Open(name)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.IsDir() {
		err = syscall.ENOTDIR
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
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
	s.handles[key] = h
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
	delete(s.handles, key)
	s.mu.Unlock()
	if !ok {
		s.errStatus(id, syscall.EBADF)
		return
	}
	s.errStatus(id, h.f.Close())
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
	if err == nil {
		_, err = h.f.WriteAt(data, int64(off))
	}
	if err == nil {
		h.wrote(len(data))
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
		rc.Control(func(fd uintptr) {
			unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
		})
	}
}

func (s *sftpServer) readdir(id uint32, r *reader) {
	h, err := s.get(r.Str())
	if err == nil && !h.dir {
		err = syscall.ENOTDIR
	}
	if err != nil {
		s.errStatus(id, err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.listed {
		if h.entries, err = h.f.ReadDir(-1); err != nil {
			s.errStatus(id, err)
			return
		}
		sortByName(h.entries)
		h.listed = true
	}
	if h.pos >= len(h.entries) {
		s.status(id, wire.EOF, "EOF")
		return
	}
	page := h.entries[h.pos:min(h.pos+readdirPage, len(h.entries))]
	h.pos += len(page)
	s.names(id, infosOf(page), longName)
}

// list answers wire.List: the directory's entries with their
// attributes, in one NAME.
func (s *sftpServer) list(id uint32, r *reader) {
	f, err := s.openDir(s.rel(r.Str()), r.Err)
	if err != nil {
		s.errStatus(id, err)
		return
	}
	defer f.Close()
	ents, err := f.ReadDir(wire.ListMax + 1)
	if err != nil && !errors.Is(err, io.EOF) { // EOF: empty
		s.errStatus(id, err)
		return
	}
	if len(ents) > wire.ListMax {
		s.status(id, wire.Failure, "too many entries for "+wire.List)
		return
	}
	sortByName(ents)
	s.names(id, infosOf(ents), noLongName)
}

// infosOf is the attributes of ents, read without following links; an
// entry removed meanwhile is left out.
func infosOf(ents []fs.DirEntry) []fs.FileInfo {
	infos := make([]fs.FileInfo, 0, len(ents))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			infos = append(infos, fi)
		}
	}
	return infos
}

// sortByName puts a directory's entries in name order: the order most
// tools that walk a tree read its files in (git, tar's and find's sorted
// modes), which lets the client read ahead of them.
func sortByName(ents []fs.DirEntry) {
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
}

// name answers with one name and optional attributes.
func (s *sftpServer) name(id uint32, name string, fi fs.FileInfo) {
	b := newBuf()
	b.Byte(wire.Name)
	b.U32(id)
	b.U32(1)
	b.Str(name)
	b.Str(name)
	if fi != nil {
		putAttrs(&b, fi)
	} else {
		b.U32(0)
	}
	s.send(b)
}

// names answers with infos, each with the long name long makes of it.
func (s *sftpServer) names(id uint32, infos []fs.FileInfo, long func(fs.FileInfo) string) {
	b := newBuf()
	b.Byte(wire.Name)
	b.U32(id)
	b.U32(uint32(len(infos)))
	for _, fi := range infos {
		b.Str(fi.Name())
		b.Str(long(fi))
		putAttrs(&b, fi)
	}
	s.send(b)
}

// noLongName is the long name of a wire.List answer: our client has no use
// for one, and making it is most of the answer's cost.
func noLongName(fs.FileInfo) string { return "" }

// longName is the ls -l line v3 clients print.
func longName(fi fs.FileInfo) string {
	return fmt.Sprintf("%s 1 owner group %8d %s %s", fi.Mode().String(), fi.Size(),
		fi.ModTime().Format("Jan _2 15:04"), fi.Name())
}

func (s *sftpServer) attrsOrStatus(id uint32, fi fs.FileInfo, err error) {
	if err != nil {
		s.errStatus(id, err)
		return
	}
	b := newBuf()
	b.Byte(wire.Attrs)
	b.U32(id)
	putAttrs(&b, fi)
	s.send(b)
}

// setstat applies attributes to name (through the root) or to the open f.
func (s *sftpServer) setstat(name string, f *os.File, a wire.FileAttrs, decodeErr error) error {
	if decodeErr != nil {
		return errBadMessage
	}
	if err := s.writable(); err != nil {
		return err
	}
	if a.Flags&wire.AttrSize != 0 {
		var err error
		if f != nil {
			err = f.Truncate(int64(a.Size))
		} else {
			err = s.truncate(name, int64(a.Size))
		}
		if err != nil {
			return err
		}
	}
	if a.Flags&wire.AttrPermissions != 0 {
		mode := fs.FileMode(a.Mode) & fs.ModePerm
		var err error
		if f != nil {
			err = f.Chmod(mode)
		} else {
			err = s.root.Chmod(name, mode)
		}
		if err != nil {
			return err
		}
	}
	if a.Flags&wire.AttrACModTime != 0 {
		at, mt := time.Unix(int64(a.Atime), 0), time.Unix(int64(a.Mtime), 0)
		var err error
		if f != nil {
			err = futimes(f, at, mt)
		} else {
			err = s.root.Chtimes(name, at, mt)
		}
		if err != nil {
			return err
		}
	}
	// UIDGID is ignored: the session owns everything it creates.
	return nil
}

func (s *sftpServer) truncate(name string, size int64) error {
	f, err := s.root.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(size)
}

func futimes(f *os.File, at, mt time.Time) error {
	tv := []syscall.Timeval{syscall.NsecToTimeval(at.UnixNano()), syscall.NsecToTimeval(mt.UnixNano())}
	return syscall.Futimes(int(f.Fd()), tv)
}

func (s *sftpServer) extended(id uint32, r *reader) {
	switch name := r.Str(); name {
	case "posix-rename@openssh.com":
		from, to := s.rel(r.Str()), s.rel(r.Str())
		err := r.Err
		if err == nil {
			err = s.writable()
		}
		if err == nil {
			err = s.rename(from, to, false)
		}
		s.errStatus(id, err)
	case "hardlink@openssh.com":
		from, to := s.rel(r.Str()), s.rel(r.Str())
		err := r.Err
		if err == nil {
			err = s.writable()
		}
		if err == nil {
			err = s.link(from, to)
		}
		s.errStatus(id, err)
	case "fsync@openssh.com":
		h, err := s.get(r.Str())
		if err == nil {
			err = h.f.Sync()
		}
		s.errStatus(id, err)
	case wire.OpenRead:
		s.openRead(id, r)
	case wire.OpenNamed:
		s.openNamed(id, r)
	case wire.List:
		s.list(id, r)
	case "statvfs@openssh.com":
		s.rel(r.Str()) // every path is on the same file system
		var st syscall.Statfs_t
		if err := syscall.Statfs(s.root.Name(), &st); err != nil {
			s.errStatus(id, err)
			return
		}
		b := newBuf()
		b.Byte(wire.ExtendedReply)
		b.U32(id)
		for _, v := range []uint64{uint64(st.Bsize), uint64(st.Frsize), st.Blocks, st.Bfree, st.Bavail,
			st.Files, st.Ffree, st.Ffree, uint64(st.Fsid.X__val[0]), statvfsFlags(s.readOnly), uint64(st.Namelen)} {
			b.U64(v)
		}
		s.send(b)
	default:
		s.status(id, wire.OpUnsupported, "extension unsupported")
	}
}

func statvfsFlags(readOnly bool) uint64 {
	const stRdonly = 0x1
	if readOnly {
		return stRdonly
	}
	return 0
}

// buf is a response under construction: four bytes for its length, then
// the packet. Buffers are recycled in two sizes, apart, so that a status
// never holds a megabyte a READ's answer left behind: the session's budget
// counts an answer at its buffer's capacity.
type buf = wire.Encoder

const largeBuf = maxReadLen + 64<<10 // a READ's answer, or OPEN-READ's

var smallBufs, largeBufs = sync.Pool{New: func() any { return new(buf) }}, sync.Pool{New: func() any { b := make(buf, 0, largeBuf); return &b }}

func newBuf() buf {
	b := *smallBufs.Get().(*buf)
	return append(b[:0], 0, 0, 0, 0)
}

// growBuf is slices.Grow for an answer about to carry n bytes of data: a
// large one moves to a buffer of the large pool.
func growBuf(b buf, n int) buf {
	if cap(b)-len(b) >= n {
		return b
	}
	if len(b)+n > smallPacket {
		large := append((*largeBufs.Get().(*buf))[:0], b...)
		putBuf(b)
		return slices.Grow(large, n)
	}
	return slices.Grow(b, n)
}

func putBuf(b buf) {
	switch c := cap(b); {
	case c == largeBuf:
		b = b[:0]
		largeBufs.Put(&b)
	case c <= smallPacket:
		b = b[:0]
		smallBufs.Put(&b)
	}
}

// putAttrs appends fi's attributes to b.
func putAttrs(b *buf, fi fs.FileInfo) {
	a := statAttrs(fi)
	a.Encode(b)
}

// statAttrs is fi as ATTRS, with our extended attributes where the
// system's stat is there: the link count, and the times to the nanosecond.
func statAttrs(fi fs.FileInfo) wire.FileAttrs {
	a := wire.FileAttrs{Flags: wire.AttrSize | wire.AttrUIDGID | wire.AttrPermissions | wire.AttrACModTime,
		Size: uint64(fi.Size()), Mode: modeBits(fi.Mode()), Atime: uint32(fi.ModTime().Unix()), Mtime: uint32(fi.ModTime().Unix())}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		a.UID, a.GID, a.Atime = st.Uid, st.Gid, uint32(st.Atim.Sec)
		a.Nlink, a.HasNlink = uint32(st.Nlink), true
		a.MtimeNsec, a.Ctime, a.CtimeNsec, a.HasTimes = uint32(st.Mtim.Nsec), uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec), true
	}
	return a
}

// modeBits encodes a Go file mode as POSIX st_mode bits, as SFTP carries
// them and as FUSE wants them.
func modeBits(m fs.FileMode) uint32 {
	v := uint32(m.Perm())
	switch {
	case m.IsDir():
		v |= syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		v |= syscall.S_IFLNK
	case m&fs.ModeNamedPipe != 0:
		v |= syscall.S_IFIFO
	case m&fs.ModeSocket != 0:
		v |= syscall.S_IFSOCK
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice != 0:
		v |= syscall.S_IFCHR
	case m&fs.ModeDevice != 0:
		v |= syscall.S_IFBLK
	default:
		v |= syscall.S_IFREG
	}
	if m&fs.ModeSetuid != 0 {
		v |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		v |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		v |= syscall.S_ISVTX
	}
	return v
}

// reader decodes a request.
type reader = wire.Decoder

func newReader(b []byte) reader { return reader{B: b} }
