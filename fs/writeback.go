package fs

import (
	"bytes"
	"context"
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
type writeBehind struct {
	mu     sync.Mutex
	queued []*pendingWrite
	bytes  int           // data held by queued
	last   uint64        // sequence of the newest queued write
	done   uint64        // every write up to this one is settled
	busy   chan struct{} // closed when the batch being settled is; nil if none
}

// pendingWrite is a write in flight. Its data is kept until it is
// answered: a write cut off by a lost connection is sent again. Or it is
// the open of a file created behind (node.createBehind), which its writes
// follow on the wire: open is set, gen is the connection it went out on.
type pendingWrite struct {
	seq  uint64
	call *sftpc.Call
	h    *fileHandle
	off  int64
	data []byte
	open bool
	gen  uint64
}

// maxBehind bounds the data in flight; a write beyond it settles first.
const maxBehind = 16 << 20

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

// queueOpen adds the open of a file created behind, sent on connection
// gen: what waits for h's writes waits for it too.
func (w *writeBehind) queueOpen(h *fileHandle, gen uint64, call *sftpc.Call) {
	w.add(&pendingWrite{call: call, h: h, open: true, gen: gen})
}

func (w *writeBehind) add(p *pendingWrite) (settleTo uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last++
	p.seq = w.last
	h := p.h
	if p.gen != h.lastWriteGen {
		h.lastOtherGen = h.lastWrite
	}
	h.lastWrite, h.lastWriteGen = w.last, p.gen
	w.queued = append(w.queued, p)
	w.bytes += len(p.data)
	if w.bytes <= maxBehind {
		return 0
	}
	left := w.bytes
	for _, p := range w.queued {
		left -= len(p.data)
		if left <= maxBehind/2 {
			return p.seq
		}
	}
	return w.last
}

// settle returns once every write queued before the call is answered (and
// sent again, if its connection was lost).
func (w *writeBehind) settle(ctx context.Context) error {
	w.mu.Lock()
	last := w.last
	w.mu.Unlock()
	return w.settleTo(ctx, last)
}

// idle reports whether every write sent is settled.
func (w *writeBehind) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done == w.last
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
			w.bytes -= len(w.queued[n].data)
			n++
		}
		batch := w.queued[:n:n]
		w.queued = w.queued[n:]
		busy := make(chan struct{})
		w.busy = busy
		w.mu.Unlock()
		finish(ctx, batch)
		w.mu.Lock()
		w.done = batch[len(batch)-1].seq
		w.busy = nil
		close(busy)
	}
	w.mu.Unlock()
	return nil
}

// finish waits for a batch in order and sends again, in order, what a lost
// connection cut off. Other errors go to the write's handle.
func finish(ctx context.Context, batch []*pendingWrite) {
	// The data must not be lost because the caller that happens to settle
	// was interrupted: the re-send waits up to the reconnect bound.
	ctx = context.WithoutCancel(ctx)
	for _, p := range batch {
		err := p.call.Err()
		if p.open {
			if err != nil && connErr(err) {
				// Create it on the next connection; the writes
				// behind it are sent again there.
				p.h.node.fsys.conn.lost(p.gen)
				err = p.h.reopen(ctx, p.gen)
			}
			err = p.h.created(err)
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
