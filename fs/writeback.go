package fs

import (
	"bytes"
	"context"
	"strings"
	"sync"

	"github.com/awcp/awcp/fs/sftpc"
)

// writeBehind lets a WRITE return as soon as its request is sent: the
// kernel's next write, or the next file's, goes out while the first is on
// the wire. Every other request waits first until the writes sent before
// it are answered (settle), so nothing ever sees the tree without them —
// the server runs a file's writes side by side and would not keep them in
// order with a later SETSTAT or LSTAT. The exception is FSTAT and FSETSTAT
// on the handle that wrote, which our server keeps behind its writes
// (fileHandle.ordered). A write's error is kept on its
// handle and returned by the handle's next write, flush (close) or fsync,
// as NFS and sshfs do.
//
// The REMOVEs and RMDIRs sent behind (node.removeBehind) queue here too,
// but only a request naming their path, or a directory above it, waits for
// them (settleFor): rm -rf sends a directory's unlinks and its rmdir one
// after another and waits for none of them.
type writeBehind struct {
	mu        sync.Mutex // guards the fields below; never held while a request waits
	queued    []*pendingWrite
	bytes     int               // data held by queued; a remove counts removeWeight
	last      uint64            // sequence of the newest queued write, open or remove
	lastOther uint64            // sequence of the newest queued write or open
	removes   map[string]uint64 // remote path → sequence of its remove, until settled
	done      uint64            // everything up to this one is settled
	busy      chan struct{}     // closed when the batch being settled is; nil if none
}

// pendingWrite is a write in flight. Its data is kept until it is
// answered: a write cut off by a lost connection is sent again. Or it is
// the open of a file created behind (node.createBehind), which its writes
// follow on the wire: open is set, gen is the connection it went out on.
// Or it is a REMOVE or RMDIR sent behind: rm is set, h is nil.
type pendingWrite struct {
	seq  uint64
	call *sftpc.Call
	h    *fileHandle
	off  int64
	data []byte
	open bool
	gen  uint64
	rm   *removal
	set  *sftpc.Attrs // an FSETSTAT sent behind: what it sets
}

// maxBehind bounds the data in flight; a write beyond it settles first.
// A remove counts removeWeight: at most 256 of them are in flight.
const (
	maxBehind    = 16 << 20
	removeWeight = maxBehind / 256
)

func (p *pendingWrite) weight() int {
	if p.rm != nil {
		return removeWeight
	}
	return len(p.data)
}

// keep copies data for a pending write: the kernel reuses its buffer once
// Write returns. Large buffers are recycled.
func keep(data []byte) []byte {
	if len(data) <= 64<<10 {
		return bytes.Clone(data)
	}
	b := *largeKept.Get().(*[]byte)
	return append(b[:0], data...)
}

var largeKept = sync.Pool{New: func() any { b := make([]byte, 0, sftpc.MaxData); return &b }}

func release(data []byte) {
	if cap(data) == sftpc.MaxData {
		largeKept.Put(&data)
	}
}

// queue adds a write in flight. Past maxBehind it returns the newest
// write to settle first so that half of that remains in flight: the oldest
// are the likeliest answered already, and the wire never runs dry.
func (w *writeBehind) queue(h *fileHandle, gen uint64, call *sftpc.Call, data []byte, off int64) (settleTo uint64) {
	return w.add(&pendingWrite{call: call, h: h, off: off, data: data, gen: gen})
}

// queueSetstat adds an FSETSTAT of set on h sent behind (setattrBehind),
// on connection gen.
func (w *writeBehind) queueSetstat(h *fileHandle, gen uint64, call *sftpc.Call, set sftpc.Attrs) (settleTo uint64) {
	return w.add(&pendingWrite{call: call, h: h, gen: gen, set: &set})
}

// queueOpen adds the open of a file created behind, sent on connection
// gen: what waits for h's writes waits for it too.
func (w *writeBehind) queueOpen(h *fileHandle, gen uint64, call *sftpc.Call) {
	w.add(&pendingWrite{call: call, h: h, open: true, gen: gen})
}

// queueRemove adds a REMOVE or RMDIR sent behind, on
// connection gen; past the bound, it returns what to settle first, as
// queue does.
func (w *writeBehind) queueRemove(rm *removal, gen uint64, call *sftpc.Call) (settleTo uint64) {
	return w.add(&pendingWrite{call: call, rm: rm, gen: gen})
}

func (w *writeBehind) add(p *pendingWrite) (settleTo uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last++
	p.seq = w.last
	if h := p.h; h != nil {
		if p.gen != h.lastWriteGen {
			h.lastOtherGen = h.lastWrite
		}
		h.lastWrite, h.lastWriteGen = w.last, p.gen
		w.lastOther = w.last
	} else {
		if w.removes == nil {
			w.removes = map[string]uint64{}
		}
		w.removes[p.rm.path] = p.seq
	}
	w.queued = append(w.queued, p)
	w.bytes += p.weight()
	if w.bytes <= maxBehind {
		return 0
	}
	left := w.bytes
	for _, p := range w.queued {
		left -= p.weight()
		if left <= maxBehind/2 {
			return p.seq
		}
	}
	return w.last
}

// settle returns once everything queued before the call is answered (and
// sent again, if its connection was lost).
func (w *writeBehind) settle(ctx context.Context) error {
	w.mu.Lock()
	last := w.last
	w.mu.Unlock()
	return w.settleTo(ctx, last)
}

// settleFor returns once the writes and opens queued before the call are
// settled, and the removes of paths and of what lies beneath them: what a
// request naming paths must not overtake. Other removes stay in flight.
func (w *writeBehind) settleFor(ctx context.Context, paths ...string) error {
	w.reap()
	w.mu.Lock()
	target := max(w.lastOther, w.removesOf(paths))
	w.mu.Unlock()
	return w.settleTo(ctx, target)
}

// settleBeforeRemove settles what a REMOVE of file cn's path, sent
// behind on connection gen of client, must not overtake: every write and
// open in flight, unless the server runs a REMOVE after the named open of
// its path sent before (sftpc's RemovesAfterOpens) — then only the writes
// of cn's handles that went out on another connection, re-sent on this
// one by settling. A file created behind and removed at once (git's
// index.lock) then costs no round trip.
func (w *writeBehind) settleBeforeRemove(ctx context.Context, cn *node, client *sftpc.Client, gen uint64) error {
	if !client.RemovesAfterOpens() || cn == nil {
		return w.settleFor(ctx)
	}
	var elsewhere []*fileHandle
	for _, h := range cn.otherWriters(nil) {
		if !w.wroteOn(h, gen) {
			elsewhere = append(elsewhere, h)
		}
	}
	return w.settleHandles(ctx, elsewhere...)
}

// settleRemoves returns once the removes of paths, and of what lies
// beneath them, are settled; writes stay in flight.
func (w *writeBehind) settleRemoves(ctx context.Context, paths ...string) error {
	w.mu.Lock()
	target := w.removesOf(paths)
	w.mu.Unlock()
	return w.settleTo(ctx, target)
}

// removesOf is the sequence of the newest unsettled remove of one of paths
// or beneath one; 0 if there is none. w.mu is held.
func (w *writeBehind) removesOf(paths []string) uint64 {
	var newest uint64
	for q, seq := range w.removes {
		if seq > newest && seq > w.done && beneathAny(q, paths) {
			newest = seq
		}
	}
	return newest
}

// beneathAny reports whether remote path q is one of paths or lies beneath
// one.
func beneathAny(q string, paths []string) bool {
	for _, p := range paths {
		if q == p || p == "/" || (strings.HasPrefix(q, p) && q[len(p)] == '/') {
			return true
		}
	}
	return false
}

// reap settles the removes at the head of the queue that are answered
// already: they would otherwise wait for a request naming their path to
// come along (settleFor), holding their place in the bound and keeping
// the queue from being idle.
func (w *writeBehind) reap() {
	w.mu.Lock()
	var target uint64
	if w.busy == nil {
		for _, p := range w.queued {
			if p.rm == nil || !answered(p.call) {
				break
			}
			target = p.seq
		}
	}
	w.mu.Unlock()
	if target != 0 {
		// Answered, by other than a lost connection: nothing here waits.
		w.settleTo(context.Background(), target)
	}
}

// answered reports whether call has its answer, other than a lost
// connection (whose request is sent again when settled).
func answered(call *sftpc.Call) bool {
	select {
	case <-call.Done():
		return !connErr(call.Err())
	default:
		return false
	}
}

// writesSettled reports whether every write and open sent is settled.
// Removes may still be in flight: what reads a name waits for its remove
// by itself (settleFor), and a directory with one in flight is changed
// (node.changedAt), so nothing read from its listing goes out meanwhile.
func (w *writeBehind) writesSettled() bool {
	w.reap()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastOther <= w.done
}

// wroteOn reports whether h's writes still unsettled, if any, all went out
// on connection gen.
func (w *writeBehind) wroteOn(h *fileHandle, gen uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return h.lastWrite <= w.done || (h.lastWriteGen == gen && h.lastOtherGen <= w.done)
}

// settleHandles returns once the writes of hs (and every write queued
// before them) are settled.
func (w *writeBehind) settleHandles(ctx context.Context, hs ...*fileHandle) error {
	var target uint64
	w.mu.Lock()
	for _, h := range hs {
		target = max(target, h.lastWrite)
	}
	w.mu.Unlock()
	return w.settleTo(ctx, target)
}

// settleAnswered settles h's writes, and what was queued before them, if
// every one is answered already: what close(2) can report without
// waiting for the wire.
func (w *writeBehind) settleAnswered(h *fileHandle) {
	w.mu.Lock()
	target := h.lastWrite
	if target <= w.done || w.busy != nil {
		w.mu.Unlock()
		return
	}
	for _, p := range w.queued {
		if p.seq > target {
			break
		}
		if !answered(p.call) {
			w.mu.Unlock()
			return
		}
	}
	w.mu.Unlock()
	// Cancelled: another caller's batch, begun meanwhile, is not waited
	// for; this one's is answered.
	w.settleTo(cancelled, target)
}

// cancelled is a context that has ended.
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// settleTo returns once the writes up to seq target are settled. Waiting
// on another caller's batch ends with ctx; a batch of one's own is seen
// through, since its writes complete when they are answered or the
// connection ends.
func (w *writeBehind) settleTo(ctx context.Context, target uint64) error {
	w.mu.Lock()
	for w.done < target {
		if busy := w.busy; busy != nil {
			w.mu.Unlock()
			select {
			case <-busy:
			case <-ctx.Done():
				return ctx.Err()
			}
			w.mu.Lock()
			continue
		}
		n := 0
		for n < len(w.queued) && w.queued[n].seq <= target {
			w.bytes -= w.queued[n].weight()
			n++
		}
		batch := w.queued[:n:n]
		w.queued = w.queued[n:]
		busy := make(chan struct{})
		w.busy = busy
		w.mu.Unlock()
		finish(ctx, batch)
		w.mu.Lock()
		for _, p := range batch {
			if p.rm != nil && w.removes[p.rm.path] == p.seq {
				delete(w.removes, p.rm.path)
			}
		}
		w.done = batch[len(batch)-1].seq
		w.busy = nil
		close(busy)
	}
	w.mu.Unlock()
	return nil
}

// finish waits for a batch in order and sends again, in order, what a lost
// connection cut off. Other errors go to the write's handle, or for a
// remove to its directory (removal.settled).
func finish(ctx context.Context, batch []*pendingWrite) {
	// The data must not be lost because the caller that happens to settle
	// was interrupted: the re-send waits up to the reconnect bound.
	ctx = context.WithoutCancel(ctx)
	for _, p := range batch {
		err := p.call.Err()
		if p.rm != nil {
			if err != nil && connErr(err) {
				// Remove it on the next connection (if the lost one
				// did, that one says it is not there).
				p.rm.dir.fsys.conn.lost(p.gen)
				err = p.rm.resend(ctx)
			}
			p.rm.settled(err)
			continue
		}
		if p.open {
			if err != nil && connErr(err) {
				// Create it on the next connection; the writes
				// behind it are sent again there.
				p.h.node.fsys.conn.lost(p.gen)
				err = p.h.reopen(ctx, p.gen)
			}
			err = p.h.created(err)
		} else if err != nil && connErr(err) && p.set != nil {
			err = p.h.withFileNow(ctx, func(f *sftpc.File) error { return f.StartSetstat(*p.set).Err() })
		} else if err != nil && connErr(err) {
			err = p.h.withFileNow(ctx, func(f *sftpc.File) error {
				_, err := f.WriteAt(p.data, p.off)
				return err
			})
		}
		if err != nil {
			p.h.failed(err)
		}
		release(p.data)
	}
}
