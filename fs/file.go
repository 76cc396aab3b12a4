package fs

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/awcp/awcp/fs/sftpc"
)

// fileHandle is an open remote file. Writes are sent without waiting for
// their answers (see writeBehind). When the connection is re-dialled, the
// handle is opened again by path (a file unlinked meanwhile is lost: EIO).
//
// A read-only open of a file whose cached pages the kernel keeps is
// deferred: f stays nil until a call needs the remote file, so that reading
// a file again from the page cache costs no round trip at all.
type fileHandle struct {
	node  *node
	flags int // the open flags, for re-opening

	mu sync.Mutex // guards f, gen, released and werr; held across a re-open (reopen)
	// behind orders a setattr sent behind the writes (setattrBehind)
	// against Release: one that found the handle still a writer is
	// counted in queueing, which the close waits for.
	behind   sync.Mutex
	queueing sync.WaitGroup
	f        *sftpc.File // nil while the open is deferred
	gen      uint64      // the connection f belongs to
	released bool        // a deferred open that comes after Release is closed at once
	werr     error       // the first error of a write sent behind, not yet reported

	// The handle's newest write: its writeBehind sequence and the
	// connection it went out on; and its newest write that went out on
	// an earlier connection (writeBehind's mu guards the three).
	lastWrite, lastWriteGen, lastOtherGen uint64

	head headRead // the file's start, read by the open; mu guards it

	// A file created behind (node.createBehind): open is its open in
	// flight, creating is set while it is unanswered (a re-open then
	// creates the file, with perm), openErr is its error once it failed.
	// mu guards them.
	open     *sftpc.Call
	creating bool
	perm     uint32
	openErr  error
	// made is the file's attributes as this handle created it behind,
	// its size moved by the handle's writes (end: the end of the
	// furthest); ok while nothing but this handle changed it, so that a
	// setattr of its times or mode can be answered here (setattrBehind).
	// mu guards them.
	// wroteSince: the handle wrote since made's times were last set on
	// the delegator (attrsBehind).
	made       sftpc.Attrs
	madeOK     bool
	end        uint64
	wroteSince bool
	// written is the whole file as this handle wrote it, while it is
	// the file's one writer, made it empty (created it, or truncated it
	// at its open) and wrote no more than shadowMax: a read through the
	// handle is answered from it without waiting for the writes to
	// settle (an assembler reads back what it wrote, a round trip a read
	// across a network). writtenOK says it is kept. mu guards them.
	written   []byte
	writtenOK bool

	// path is the file's path on the delegator when last known
	// (remotePath).
	path atomic.Pointer[string]
	// closed is closed once the handle's writes are settled and its
	// remote file closed, after its release (awaitClosing).
	closed chan struct{}
}

var (
	_ fs.FileReader   = (*fileHandle)(nil)
	_ fs.FileWriter   = (*fileHandle)(nil)
	_ fs.FileFlusher  = (*fileHandle)(nil)
	_ fs.FileFsyncer  = (*fileHandle)(nil)
	_ fs.FileReleaser = (*fileHandle)(nil)
)

func (n *node) newHandle(f *sftpc.File, flags int) *fileHandle {
	return n.newHandleAt(f, flags, n.rpath())
}

// newHandleAt is newHandle of a node at remote path p: one just made,
// which the kernel links into the tree only once the create returns.
func (n *node) newHandleAt(f *sftpc.File, flags int, p string) *fileHandle {
	h := &fileHandle{node: n, f: f, flags: flags, closed: make(chan struct{})}
	h.path.Store(&p)
	h.gen = n.fsys.conn.generation()
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		n.mu.Lock()
		if n.writers == nil {
			n.writers = map[*fileHandle]struct{}{}
		}
		n.writers[h] = struct{}{}
		n.mu.Unlock()
	}
	return h
}

// writer returns a handle of n open for writing, or nil.
func (n *node) writer() *fileHandle {
	n.mu.Lock()
	defer n.mu.Unlock()
	for h := range n.writers {
		return h
	}
	return nil
}

// otherWriters are n's handles open for writing but h, and those closed
// whose writes may still be on the wire (closing): a request another
// handle orders behind its own writes alone must not overtake them.
func (n *node) otherWriters(h *fileHandle) []*fileHandle {
	n.mu.Lock()
	defer n.mu.Unlock()
	var hs []*fileHandle
	for w := range n.writers {
		if w != h {
			hs = append(hs, w)
		}
	}
	for w := range n.closing {
		hs = append(hs, w)
	}
	return hs
}

// deferredHandle is a read-only handle whose remote open waits for the
// first call that needs it. The node keeps it until then: an unlink or a
// rename over the file opens it first, so the file stays readable.
func (n *node) deferredHandle(flags int) *fileHandle {
	h := &fileHandle{node: n, flags: flags, closed: make(chan struct{})}
	n.mu.Lock()
	if n.deferred == nil {
		n.deferred = map[*fileHandle]struct{}{}
	}
	n.deferred[h] = struct{}{}
	n.mu.Unlock()
	return h
}

// deferred reports whether h is not open on the delegator's side yet.
func (h *fileHandle) deferred() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.f == nil
}

// file returns the handle's remote file, opening it if the open was
// deferred. No lock is held across the round trip; a racing open loses.
func (h *fileHandle) file(ctx context.Context) (*sftpc.File, uint64, error) {
	h.mu.Lock()
	f, gen := h.f, h.gen
	h.mu.Unlock()
	if f != nil {
		return f, gen, nil
	}
	client, gen, err := h.node.fsys.conn.get(ctx, time.Now())
	if err != nil {
		return nil, 0, err
	}
	// A handle for reading brings the file's start along: the read that
	// opens it is then answered from it (Read), one round trip, not two.
	var head headRead
	if h.flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		changes := h.node.changes.Load()
		var o sftpc.Opened
		f, o, err = client.OpenRead(h.remotePath(), reopenFlags(h.flags), 0, headSize)
		if err == nil && o.Attrs.Flags != 0 {
			var a fuse.Attr
			h.node.fsys.fillAttr(o.Attrs, &a)
			h.node.observe(&a)
			head = headRead{data: o.Head, eof: o.EOF, changes: changes, version: versionOf(&a), ok: true}
		}
	} else {
		f, err = client.OpenFile(h.remotePath(), reopenFlags(h.flags), 0)
	}
	if err != nil {
		return nil, gen, err // gen: the connection that failed, if it did
	}
	h.mu.Lock()
	if h.released { // an unlink's openDeferred lost the race with Release
		h.mu.Unlock()
		f.Close()
		return nil, gen, os.ErrClosed
	}
	if h.f != nil {
		h.mu.Unlock()
		f.Close()
		return h.file(ctx)
	}
	h.f, h.gen = f, gen
	if head.ok {
		h.head = head
	}
	h.mu.Unlock()
	h.node.mu.Lock()
	delete(h.node.deferred, h)
	h.node.mu.Unlock()
	return f, gen, nil
}

// openDeferred opens n's deferred handles now: the file is about to be
// unlinked or replaced, and its open handles must keep reading it.
func (n *node) openDeferred(ctx context.Context) {
	n.mu.Lock()
	hs := make([]*fileHandle, 0, len(n.deferred))
	for h := range n.deferred {
		hs = append(hs, h)
	}
	n.mu.Unlock()
	if len(hs) == 0 {
		return
	}
	// A file created behind may not be there yet: its open and writes
	// go first (an open by path is not kept behind them on the wire).
	if err := n.fsys.conn.writes.settleHandles(ctx, n.otherWriters(nil)...); err != nil {
		n.fsys.log.Debug("open a deferred handle", "path", n.rpath(), "err", err)
	}
	for _, h := range hs {
		if _, _, err := h.file(ctx); err != nil {
			n.fsys.log.Debug("open a deferred handle", "path", n.rpath(), "err", err)
		}
	}
}

// withFile runs op on the handle's file once the writes sent before are
// settled, re-opening it once on the next connection if the connection
// failed under it.
func (h *fileHandle) withFile(ctx context.Context, op func(*sftpc.File) error) error {
	if err := h.node.fsys.conn.writes.settleFor(ctx); err != nil {
		return err
	}
	return h.withFileNow(ctx, op)
}

// ordered runs op, a request the server keeps behind the handle's writes
// (FSTAT, FSETSTAT: sftpc's WriteBarrier), without waiting for those writes
// first. Only the writes of the file's other handles are settled. It is
// withFile where the server has no barrier, and wherever the handle's
// writes went out on another connection than op does: the barrier orders
// one connection's requests, and writes a lost connection cut off are sent
// again (by settling) before op.
func (h *fileHandle) ordered(ctx context.Context, op func(*sftpc.File) error) error {
	wb := &h.node.fsys.conn.writes
	if err := wb.settleHandles(ctx, h.node.otherWriters(h)...); err != nil {
		return err
	}
	return h.withFileNow(ctx, func(f *sftpc.File) error {
		h.mu.Lock()
		gen := h.gen // the connection f belongs to
		h.mu.Unlock()
		if !f.WriteBarrier() || !wb.wroteOn(h, gen) {
			if err := wb.settleFor(ctx); err != nil {
				return err
			}
		}
		return op(f)
	})
}

// withFileNow is withFile without settling first.
func (h *fileHandle) withFileNow(ctx context.Context, op func(*sftpc.File) error) error {
	for attempt := 0; ; attempt++ {
		f, gen, err := h.file(ctx)
		if err != nil {
			if !connErr(err) || attempt == 1 {
				return err
			}
			h.node.fsys.conn.lost(gen)
			continue
		}
		err = op(f)
		if err != nil && !connErr(err) {
			if oerr := h.openError(); oerr != nil {
				return oerr
			}
		}
		if err == nil || !connErr(err) || attempt == 1 {
			return err
		}
		h.node.fsys.conn.lost(gen)
		if err := h.reopen(ctx, gen); err != nil {
			return err
		}
	}
}

func (h *fileHandle) reopen(ctx context.Context, stale uint64) error {
	client, gen, err := h.node.fsys.conn.get(ctx, time.Now())
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != stale { // another call re-opened it already
		return nil
	}
	pf, perm := reopenFlags(h.flags), uint32(0)
	if h.creating { // the create may not have been run
		pf, perm = pf|sftpc.OpenCreate, h.perm
	}
	f, err := client.OpenFile(h.remotePath(), pf, perm)
	if err != nil {
		return err
	}
	h.f, h.gen = f, gen
	return nil
}

// created records the answer to the open of a file created behind and
// returns the error to keep for the handle's next write, flush (close) or
// fsync. A failed open also takes the name out of the kernel's cache,
// which was told of a file that is not there.
func (h *fileHandle) created(err error) error {
	if err != nil {
		err = fmt.Errorf("create: %w", err)
	}
	h.mu.Lock()
	h.creating, h.openErr = false, err
	h.mu.Unlock()
	if err == nil {
		return nil
	}
	name, parent := h.node.Parent()
	if parent == nil {
		return err
	}
	if pn, ok := parent.Operations().(*node); ok {
		pn.notGone(name)
	}
	return err
}

// openError is the error of a handle created behind whose open failed (a
// request that failed on it failed for that reason), nil for any other.
// It waits for the open's answer, not for the writes settling: it runs
// while they settle, too.
func (h *fileHandle) openError() error {
	h.mu.Lock()
	open, err := h.open, h.openErr
	h.mu.Unlock()
	if open == nil || err != nil {
		return err
	}
	if err := open.Err(); err != nil && !connErr(err) {
		return fmt.Errorf("create: %w", err)
	}
	return nil
}

// reopenFlags opens a file again: neither create nor truncate again, the
// file is what it was.
func reopenFlags(flags int) uint32 {
	return pflags(flags &^ (os.O_CREATE | os.O_EXCL | os.O_TRUNC))
}

// pflags are the SFTP open flags for open(2)'s. O_APPEND is left out:
// every write carries its offset, which the kernel computed.
func pflags(flags int) uint32 {
	var pf uint32
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		pf = sftpc.OpenRead
	case syscall.O_WRONLY:
		pf = sftpc.OpenWrite
	default:
		pf = sftpc.OpenRead | sftpc.OpenWrite
	}
	if flags&os.O_CREATE != 0 {
		pf |= sftpc.OpenCreate
	}
	if flags&os.O_TRUNC != 0 {
		pf |= sftpc.OpenTrunc
	}
	if flags&os.O_EXCL != 0 {
		pf |= sftpc.OpenExcl
	}
	return pf
}

// Write sends the data and returns: the answer is waited for by the next
// request that is not a write (see writeBehind). An error of an earlier
// write of this handle is returned here if nothing has reported it yet.
func (h *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if err := h.takeErr(); err != nil {
		return 0, h.node.errno(ctx, "write", h.node.rpath(), err)
	}
	f, gen, err := h.file(ctx)
	if err != nil {
		return 0, h.node.errno(ctx, "write", h.node.rpath(), err)
	}
	h.node.changes.Add(1)
	h.node.logChange()
	h.node.mu.Lock()
	h.node.whole = false // a partly written page is not whole in the kernel
	h.node.prefetched, h.node.fetches = false, 0
	h.node.mu.Unlock()
	// Before and after the queueing: a read ahead asked for in between
	// could overtake the write on the wire.
	defer h.node.fsys.changing(h.node)()
	wb := &h.node.fsys.conn.writes
	// A write the delegator may refuse is not sent behind: its writer
	// waits for the answer (room.go).
	behind := h.node.fsys.roomFor(ctx, gen, int64(len(data)))
	// The kernel reuses data once Write returns; the copy is also what a
	// lost connection's write is sent again from.
	kept := keep(data)
	h.mu.Lock()
	h.end = max(h.end, uint64(off)+uint64(len(data)))
	h.wroteSince = true
	if h.writtenOK {
		if end := off + int64(len(data)); off < 0 || end > shadowMax {
			h.written, h.writtenOK = nil, false
		} else {
			if int(end) > len(h.written) {
				h.written = append(h.written, make([]byte, int(end)-len(h.written))...)
			}
			copy(h.written[off:], data)
		}
	}
	h.mu.Unlock()
	upto := wb.queue(h, gen, f.StartWriteBehind(kept, off), kept, off)
	h.node.fsys.room.queued(int64(len(data)))
	if upto != 0 {
		if err := wb.settleTo(ctx, upto); err != nil {
			return 0, h.node.errno(ctx, "write", h.node.rpath(), err)
		}
	}
	if !behind {
		err := wb.settleHandles(ctx, h)
		if werr := h.takeErr(); werr != nil {
			err = werr
		}
		if err != nil {
			return 0, h.node.errno(ctx, "write", h.node.rpath(), err)
		}
	}
	return uint32(len(data)), 0
}

// failed keeps the first error of a write sent behind for the handle's
// next write, flush or fsync, and for the file's next open or fsync
// through any handle: the handle may be closed by now (close(2) does not
// wait for its writes). The mount's log says it at once.
func (h *fileHandle) failed(err error) {
	h.mu.Lock()
	first := h.werr == nil
	if first {
		h.werr = err
	}
	h.mu.Unlock()
	if !first {
		return
	}
	n := h.node
	n.mu.Lock()
	if n.lateErr == nil {
		n.lateErr = err
	}
	n.mu.Unlock()
	n.fsys.log.Warn("fs: a write failed on the delegator; its writer is told, if still waiting, else the file's next open or fsync", "path", n.rpath(), "err", err)
}

// takeErr returns and forgets the handle's write error: it is reported
// once, here or at the file's next open.
func (h *fileHandle) takeErr() error {
	h.mu.Lock()
	err := h.werr
	h.werr = nil
	h.mu.Unlock()
	if err != nil {
		h.node.mu.Lock()
		if h.node.lateErr == err {
			h.node.lateErr = nil
		}
		h.node.mu.Unlock()
	}
	return err
}

// takeLateErr returns and forgets the error of a write to n sent behind
// whose handle did not report it (failed): it is reported once.
func (n *node) takeLateErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	err := n.lateErr
	n.lateErr = nil
	return err
}

// Flush reports an error of the handle's writes already answered, and
// does not wait for those still on the wire: close(2) costs no round trip
// (across a network, two for each file a shell writes: bash closes its
// redirection twice). What the delegator's write limit or disk would
// refuse was not sent behind (room.go): it failed write(2) itself. A
// write that fails later for another reason is reported by the file's
// next open or fsync, through any handle (failed), as a local file system
// reports a write-back error at fsync; the mount's log says it, and the
// delegator's audit log records the refused or failed request. It may run
// several times.
func (h *fileHandle) Flush(ctx context.Context) syscall.Errno {
	h.node.fsys.conn.writes.settleAnswered(h)
	if err := h.takeErr(); err != nil {
		return h.node.errno(ctx, "write", h.node.rpath(), err)
	}
	return 0
}

// Fsync waits for the handle's writes (and those sent before them), has
// the delegator sync the file, and reports a write's error: this
// handle's, or one sent behind through a handle closed since.
func (h *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	err := h.withFile(ctx, func(f *sftpc.File) error { return f.Sync() })
	if werr := h.takeErr(); werr != nil {
		err = werr
	}
	if lerr := h.node.takeLateErr(); lerr != nil && err == nil {
		err = lerr
	}
	if err != nil {
		return h.node.errno(ctx, "fsync", h.node.rpath(), err)
	}
	return 0
}

// stat is FSTAT: it works for a file unlinked while open.
func (h *fileHandle) stat(ctx context.Context) (sftpc.Attrs, error) {
	var a sftpc.Attrs
	err := h.ordered(ctx, func(f *sftpc.File) (err error) {
		a, err = f.Stat()
		return err
	})
	return a, err
}

// setstat is FSETSTAT and FSTAT sent back to back: our server runs requests
// on one handle in order, so one round trip brings the new attributes.
func (h *fileHandle) setstat(ctx context.Context, set sftpc.Attrs) (sftpc.Attrs, error) {
	var a sftpc.Attrs
	err := h.ordered(ctx, func(f *sftpc.File) (err error) {
		a, err = f.Setstat(set)
		return err
	})
	return a, err
}

// Release frees the remote handle in the background: the kernel ignores
// what Release returns and nothing waits for it, so the round trip need not
// hold up the caller. Unmount waits for these closes.
func (h *fileHandle) Release(ctx context.Context) syscall.Errno {
	fsys := h.node.fsys
	h.keepMadeAttrs()
	h.behind.Lock() // no setattr begins behind the writes after this
	h.node.mu.Lock()
	if _, wrote := h.node.writers[h]; wrote {
		delete(h.node.writers, h)
		if h.node.closing == nil {
			h.node.closing = map[*fileHandle]struct{}{}
		}
		h.node.closing[h] = struct{}{}
		fsys.closingMu.Lock()
		if fsys.closingSet == nil {
			fsys.closingSet = map[*fileHandle]struct{}{}
		}
		fsys.closingSet[h] = struct{}{}
		fsys.closingMu.Unlock()
	}
	h.node.mu.Unlock()
	h.behind.Unlock()
	h.mu.Lock()
	f := h.f
	h.released = true
	h.mu.Unlock()
	if f == nil { // never opened
		h.node.mu.Lock()
		delete(h.node.deferred, h)
		h.node.mu.Unlock()
		return 0
	}
	fsys.closing.Add(1)
	go func() {
		defer fsys.closing.Done()
		h.queueing.Wait() // a setattr begun behind them is among them
		// The handle's writes are settled first: a server without the
		// write barrier could run the CLOSE ahead of them, and a write
		// cut off by a lost connection is sent again on a handle
		// re-opened on the next one — which is then the one to close.
		fsys.conn.writes.settleHandles(context.Background(), h)
		h.mu.Lock()
		f := h.f // re-opened, perhaps, by a re-sent write
		h.mu.Unlock()
		f.Close()
		h.node.mu.Lock()
		delete(h.node.closing, h)
		h.node.mu.Unlock()
		fsys.closingMu.Lock()
		delete(fsys.closingSet, h)
		fsys.closingMu.Unlock()
		close(h.closed)
	}()
	return 0
}

// keepMadeAttrs keeps, as the node's (node.keepAttrs), the attributes of
// a file this handle made and wrote behind, as they will be once its
// writes land (attrsBehind), where the watch is exact: the stat that
// follows a close — git's of its index.lock before the rename, a build's
// of what it wrote — then waits neither for the writes nor for the
// delegator's answer (two round trips).
func (h *fileHandle) keepMadeAttrs() {
	fsys := h.node.fsys
	if h.flags&syscall.O_ACCMODE == syscall.O_RDONLY || !fsys.exact() {
		return
	}
	s := fsys.stamp()
	a, ok := h.attrsBehind()
	if !ok {
		return
	}
	var attr fuse.Attr
	fsys.fillAttr(a, &attr)
	h.node.keepAttrs(&attr, fsys.changes.Load(), s)
}

// awaitClosing waits for the handles released with writes on the wire
// to be settled and closed on the delegator, or for ctx: a file removed
// while the delegator still holds it open keeps its space there until the
// close, and statfs after a remove must show it freed.
func (f *filesystem) awaitClosing(ctx context.Context) {
	f.closingMu.Lock()
	hs := slices.Collect(maps.Keys(f.closingSet))
	f.closingMu.Unlock()
	for _, h := range hs {
		select {
		case <-h.closed:
		case <-ctx.Done():
			return
		}
	}
}

// remotePath is the file's path on the delegator: its node's, followed
// through renames, while the kernel knows the node; once it forgot it
// (a closed file whose writes still settle, the kernel's entries dropped
// at a reconnection), the last path known — never the path of a node
// taken out of the tree, which is the export's root.
func (h *fileHandle) remotePath() string {
	if _, parent := h.node.Parent(); parent != nil || h.node.IsRoot() {
		p := h.node.rpath()
		h.path.Store(&p)
		return p
	}
	return *h.path.Load()
}
