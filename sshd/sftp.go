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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/awcp/awcp/internal/confine"
	"github.com/awcp/awcp/internal/stage"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

const (
	maxPacket   = 1<<20 + 1024 // a 1 MiB write plus its header
	maxRequest  = 64 << 10     // any other request: two paths of PATH_MAX and attributes
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
	{wire.RemoveAfterOpen, "1"},
	{wire.List, "1"},
	{wire.ListRead, "1"},
	{wire.TreeRead, "1"},
	{wire.Watch, "1"},
	{wire.Room, "1"},
}

// errBadMessage is a malformed packet.
var errBadMessage = wire.ErrMalformed

// sftpServer serves one SFTP session on one directory.
type sftpServer struct {
	root     *os.Root
	fast     *kernelRoot // opens and stats in one syscall where the kernel can
	readOnly bool
	policy   wire.ExportPolicy // policy.go
	hide     *wire.Matcher     // policy.Hide, ready; nil if it hides nothing
	rootReal string            // the root's path as the kernel resolves it, where hide is set
	audit    Recorder          // nil: not recorded (audit.go)
	metrics  Metrics
	written  *atomic.Int64 // bytes written by the grant's sessions
	made     *madeSet      // paths the grant's sessions made (NoDelete)
	log      *slog.Logger
	out      *responder
	alias    string       // "/" + the export's locator, another name of the root; "" for none
	env      string       // "/" + the locator of its environment root (envroot.go); "" for none
	rootID   confine.Root // the export directory's identity, for confine's depths
	// ownerLayer: s serves the owner's directory under a staged view
	// (staged.go), which writes none of it; its handles say so.
	ownerLayer bool
	shape      *sync.Mutex // the export's lock of link-shaping requests (links.go)

	*handleTable // shared by the layers of a staged session (staged.go)

	// watch is the export's watch (watch.go), made at the first watch
	// request; nil before, or if the export cannot be watched.
	watch     atomic.Pointer[watcher]
	watchOnce sync.Once
	earlyMu   sync.Mutex            // guards early, and the watch's start against it
	early     map[string]*ownChange // paths changed before the watch began (watch_own.go)
}

// handleTable is a session's open handles.
type handleTable struct {
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

	// For the audit log (audit.go).
	name       string       // relative to the root, as opened
	readBytes  atomic.Int64 // read through the handle
	writeBytes atomic.Int64 // written through the handle
	truncated  bool         // opened with O_TRUNC, or truncated to 0 through it

	ownerLayer bool // opened in the owner's directory under a staged view
}

// ServeSFTP runs an SFTP v3 session on rw, confined to root, until rw ends.
// It closes every handle it opened before returning. What the session
// holds is bounded by a budget of its own (connInFlight) and the process's
// (flow.go).
func ServeSFTP(rw io.ReadWriter, root *os.Root, readOnly bool, log *slog.Logger) error {
	return serveSFTP(rw, root, session{readOnly: readOnly}, log, newFlow(newBudget(connInFlight)), "")
}

// session is what a session serves its root with: its access mode, the
// export's policy, and where its operations are recorded.
type session struct {
	readOnly bool
	policy   wire.ExportPolicy
	audit    Recorder      // nil: none
	written  *atomic.Int64 // the grant's bytes written; nil: counted per session
	made     *madeSet      // what the grant's sessions made; nil: per session
	metrics  Metrics       // nil: none
	stage    *stage.Area   // nil: changes go to the root itself (staged.go)
}

// errStalled ends a session whose client stopped reading answers and whose
// channel then failed.
var errStalled = errors.New("sftp: answers could not be written")

// serveSFTP is ServeSFTP counting against fl, with the locators of
// delegation id (if not ""), Locator and EnvLocator, served as other
// names of the root and of its environment root.
func serveSFTP(rw io.ReadWriter, root *os.Root, sess session, log *slog.Logger, fl flow, id string) error {
	if sess.written == nil {
		sess.written = new(atomic.Int64)
	}
	if sess.made == nil {
		sess.made = newMadeSet()
	}
	if sess.metrics == nil {
		sess.metrics = noMetrics{}
	}
	s := &sftpServer{root: root, readOnly: sess.readOnly, policy: sess.policy, hide: wire.NewMatcher(sess.policy.Hide),
		audit: sess.audit, written: sess.written, made: sess.made, metrics: sess.metrics,
		log: log, handleTable: &handleTable{handles: map[string]*handle{}}}
	if id != "" {
		s.alias, s.env = path.Clean("/"+Locator(id)), path.Clean("/"+EnvLocator(id))
	}
	release, err := s.openRoot()
	if err != nil {
		return err
	}
	defer release()
	defer s.closeAll()
	s.out = startResponder(rw, log, fl)
	defer s.out.stop() // after the workers have queued their last response
	handle := s.handle
	if sess.stage != nil {
		view, release, err := s.layerSession(sess.stage)
		if err != nil {
			return err
		}
		defer release()
		handle = view.handle
	}

	// Watch requests wait for changes in goroutines of their own, not on
	// a worker: they end, unanswered, with the session.
	stopWatch := make(chan struct{})
	var watching sync.WaitGroup
	var watchBusy atomic.Bool // a watch request's goroutine runs
	defer func() {
		close(stopWatch)
		watching.Wait()
		if w := s.watch.Load(); w != nil {
			w.close()
		}
	}()

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
				s.metrics.SFTPHandling()
				start := time.Now()
				handle(j.pkt)
				if j.owned != nil {
					s.ownEnd(j.owned)
				}
				s.metrics.SFTPRequest(opName(j.pkt), time.Since(start))
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
	// sweepAt is the size of order that next sweeps it: twice what the
	// last sweep kept, so that entries it cannot drop (open handles,
	// requests in flight) do not make every new name a sweep of them all.
	sweepAt := orderSweepAt
	// emptying holds, by directory, the REMOVEs and RMDIRs of names in it
	// not yet handled, which its RMDIR waits for (wire.RmdirInOrder). Only
	// this loop touches the map.
	emptying := emptyingMap{}
	// opening holds, by path, the named open of it last sent, until its
	// handle is closed: a REMOVE of the path waits for it
	// (wire.RemoveAfterOpen). Only this loop touches it.
	opening := map[string]*sync.WaitGroup{}
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
		if n > maxRequest {
			// Only a WRITE carries more than a path or two: a larger
			// request is refused unread (a 1 MiB path or handle name
			// would be held, copied and looked up).
			if head, err := r.Peek(5); err == nil && head[0] != wire.Write {
				id := binary.BigEndian.Uint32(head[1:5])
				if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
					return err
				}
				s.status(id, wire.Failure, wire.ErrnoMessage(syscall.ENAMETOOLONG, "request too large"))
				continue
			}
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
		if key, ok := firstString(pkt); ok && pkt[0] == wire.Extended && string(key) == wire.Watch && len(pkt) >= 5 {
			id := binary.BigEndian.Uint32(pkt[1:5])
			putPacket(pkt)
			// One watch request waits at a time: the others are refused
			// here, not each given a goroutine (a flood of them, whose
			// answers the client never read, held hundreds of MiB).
			if !watchBusy.CompareAndSwap(false, true) {
				s.status(id, wire.Failure, errWatchBusy.Error())
				continue
			}
			watching.Add(1)
			go func() {
				defer watching.Done()
				// Free before the answer goes: the client asks again as
				// soon as it reads one.
				s.serveWatch(id, stopWatch, func() { watchBusy.Store(false) })
			}()
			continue
		}
		j := job{pkt: pkt, held: cap(pkt) + answerBound(pkt), owned: s.intend(pkt)}
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
			j.done, j.after = o.track(o.writes), o.barrier
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
				// Named by the client: a name never closed (an open
				// refused, a client that never closes) stays here
				// until swept.
				if len(order) >= sweepAt {
					sweepOrder(s, order, opening)
					sweepAt = max(orderSweepAt, 2*len(order))
				}
				o = &handleOrder{}
				order[string(name)] = o
			}
			j.after, o.writes = o.writes, nil
			o.barrier = new(sync.WaitGroup)
			o.barrier.Add(1)
			j.done = o.track(o.barrier)
			if p, ok := stringAt(pkt, 9+len(key)+4+len(name)); ok {
				o.path, o.opened = s.rel(string(p)), o.barrier
				opening[o.path] = o.barrier
			}
		case pkt[0] == wire.Remove || pkt[0] == wire.Rmdir:
			name := s.rel(string(key))
			if pkt[0] == wire.Remove {
				j.after = opening[name]
			}
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
				if o.path != "" && opening[o.path] == o.opened {
					delete(opening, o.path)
				}
				break
			}
			o.barrier = new(sync.WaitGroup)
			o.barrier.Add(1)
			j.done = o.track(o.barrier)
		}
		queues[routeKey(pkt)%workers] <- j
	}
}

// openRoot readies s to serve s.root: the kernel's walks in it, its
// identity and real path, the policy's guard, and the export's lock of
// link-shaping requests. release gives them back.
func (s *sftpServer) openRoot() (release func(), err error) {
	s.fast = newKernelRoot(s.root)
	if s.fast.dir == nil {
		return nil, errors.New("sftp: the export directory cannot be opened")
	}
	if s.rootID, err = confine.RootOf(int(s.fast.dir.Fd())); err != nil {
		s.fast.Close()
		return nil, err
	}
	// What the kernel calls the root: opens are placed against it
	// (opened, the audit log's real paths), whatever name the root
	// was opened by.
	if s.rootReal, err = fdPath(s.fast.dir); err != nil {
		s.fast.Close()
		return nil, err
	}
	if s.hide != nil || s.guardsChanges() {
		s.fast.guard = s.guardAt
	}
	shape, unlock := acquireShapeLock(s.rootID)
	s.shape = shape
	return func() { unlock(); s.fast.Close() }, nil
}

func (s *sftpServer) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, h := range s.handles {
		h.f.Close()
		s.closed(h)
		delete(s.handles, k)
		openHandles.Add(-1)
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
	if !s.policy.Zero() {
		b.Str(wire.Policy)
		b.Str(s.policy.Encode())
	}
	s.send(b)
}

// send queues a response built on newBuf; its buffer is recycled once it
// is written.
func (s *sftpServer) send(b buf) {
	b.SetU32(0, uint32(len(b)-4))
	s.out.queue(b)
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
	if !s.refuseByPolicy(id, typ, r) {
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
		if errors.Is(err, errHidden) {
			s.done(id, Op{Kind: OpLookup, Path: refusedPath(err, name)}, err)
			return
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
		s.setattrDone(id, name, a, s.setstat(name, nil, a, r.Err))
	case wire.Fsetstat:
		h, err := s.get(r.Str())
		a := wire.DecodeAttrs(&r)
		if err != nil {
			s.errStatus(id, err)
			return
		}
		if err = s.setstat(h.name, h.f, a, r.Err); err == nil && a.Flags&wire.AttrSize != 0 && a.Size == 0 {
			h.truncated = true
		}
		s.setattrDone(id, h.name, a, err)
	case wire.Opendir:
		s.opendir(id, &r)
	case wire.Readdir:
		s.readdir(id, &r)
	case wire.Remove:
		name, err := s.mutate(&r, func(name string) error { return s.fast.Remove(name, false) })
		s.done(id, Op{Kind: OpRemove, Path: name}, err)
	case wire.Rmdir:
		name, err := s.mutate(&r, func(name string) error { return s.fast.Remove(name, true) })
		s.done(id, Op{Kind: OpRmdir, Path: name}, err)
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
			err = s.adding(name, "", func() error { return s.fast.Mkdir(name, perm) })
		}
		if w := s.watch.Load(); w != nil && err == nil {
			w.made(name)
		}
		s.done(id, Op{Kind: OpMkdir, Path: name}, err)
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
			_, err = s.moveKeeping(from, to, true)
		}
		s.done(id, Op{Kind: OpRename, Path: from, To: to}, err)
	case wire.Readlink:
		name := s.rel(r.Str())
		if r.Err != nil {
			s.errStatus(id, errBadMessage)
			return
		}
		target, err := s.fast.Readlink(name)
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
			err = s.adding(link, target, func() error { return s.symlink(target, link) })
		}
		s.done(id, Op{Kind: OpSymlink, Path: link, To: target}, err)
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

// mutate runs fn, a delete, on the request's path if writes and deletes
// are allowed.
func (s *sftpServer) mutate(r *reader, fn func(name string) error) (string, error) {
	name := s.rel(r.Str())
	if r.Err != nil {
		return name, errBadMessage
	}
	if err := s.writable(); err != nil {
		return name, err
	}
	real := s.realName(name)
	if err := s.keeps(real); err != nil {
		return name, err
	}
	if err := fn(name); err != nil {
		return name, err
	}
	s.made.gone(real)
	return name, nil
}

// setattrDone answers a SETSTAT or FSETSTAT of name, recording it if it
// set more than times.
func (s *sftpServer) setattrDone(id uint32, name string, a wire.FileAttrs, err error) {
	if a.Flags&(wire.AttrSize|wire.AttrPermissions|wire.AttrUIDGID) == 0 && err == nil {
		s.errStatus(id, nil)
		return
	}
	s.done(id, Op{Kind: OpSetattr, Path: name}, err)
}

func (s *sftpServer) extended(id uint32, r *reader) {
	switch name := r.Str(); name {
	case "posix-rename@openssh.com":
		from, to := s.rel(r.Str()), s.rel(r.Str())
		err := r.Err
		if err == nil {
			err = s.writable()
		}
		var replaced bool
		if err == nil {
			// Under NoDelete a rename may not replace what is there.
			if replaced, err = s.moveKeeping(from, to, s.policy.NoDelete); s.policy.NoDelete && errors.Is(err, fs.ErrExist) {
				err = errNoDelete
			}
		}
		s.done(id, Op{Kind: OpRename, Path: from, To: to, Replaced: replaced}, err)
	case "hardlink@openssh.com":
		from, to := s.rel(r.Str()), s.rel(r.Str())
		err := r.Err
		if err == nil {
			err = s.writable()
		}
		if err == nil {
			err = s.adding(to, "", func() error { return s.link(from, to) })
		}
		s.done(id, Op{Kind: OpLink, Path: from, To: to}, err)
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
	case wire.ListRead:
		s.listRead(id, r)
	case wire.TreeRead:
		s.treeRead(id, r)
	case wire.Room:
		s.room(id)
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
		frsize, fsid, namemax := statvfsRest(&st)
		for _, v := range []uint64{uint64(st.Bsize), frsize, uint64(st.Blocks), uint64(st.Bfree), uint64(st.Bavail),
			uint64(st.Files), uint64(st.Ffree), uint64(st.Ffree), fsid, statvfsFlags(s.readOnly), namemax} {
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

// reader decodes a request.
type reader = wire.Decoder

func newReader(b []byte) reader { return reader{B: b} }
