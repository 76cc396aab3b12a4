package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
)

// A file read at scattered offsets — a database, an index, fio — costs a
// round trip for each read the page cache cannot answer: the kernel reads
// ahead only what is read in order. Where the delegator's watch is exact,
// the mount reads such a file whole in the background once it has seen
// prefetchAfter reads out of order, and stores it in the kernel's page
// cache (FUSE_NOTIFY_STORE): the reads after that find it there. One file
// at a time, of at most prefetchMax bytes, not while it is open for
// writing. What is stored is dropped again if the file changed meanwhile
// (the mount wrote it, or the watch reported a change): it may be of the
// old file. Should scattered reads keep reaching the mount after that (the
// kernel dropped the pages: memory pressure, a reader's own
// POSIX_FADV_DONTNEED, as fio's does at each pass), the file is read
// again, after twice as many each time.

const (
	prefetchAfter = 32
	prefetchMax   = 256 << 20
)

// prefetcher runs the mount's background reads of whole files.
type prefetcher struct {
	ctx  context.Context
	stop context.CancelFunc
	busy atomic.Bool    // one file at a time
	wg   sync.WaitGroup // the running read
}

func newPrefetcher() *prefetcher {
	ctx, stop := context.WithCancel(context.Background())
	return &prefetcher{ctx: ctx, stop: stop}
}

// wait waits for the running read, once stopped (stop) or once the
// connection it reads through is closed.
func (p *prefetcher) wait() { p.wg.Wait() }

// scatterSize is the most a read may ask for to count as scattered: the
// kernel's read-ahead of a file read in order asks for 1 MiB at a time,
// several at once and in any order.
const scatterSize = 256 << 10

// scatter records a read of asked bytes at off, answered with read, that
// reached the mount (the page cache did not answer it) through a handle
// that uses the page cache, and starts reading the file whole if small
// reads keep coming out of order.
func (n *node) scatter(off int64, read, asked int) {
	f := n.fsys
	n.mu.Lock()
	if off != n.readEnd && asked < scatterSize {
		n.scattered++
	}
	n.readEnd = off + int64(read)
	after := prefetchAfter << min(n.fetches, 16)
	start := n.scattered >= after && !n.prefetched && len(n.writers) == 0 && n.seen.size <= prefetchMax
	size := n.seen.size
	n.mu.Unlock()
	if !start || !f.exact() || !f.prefetch.busy.CompareAndSwap(false, true) {
		return
	}
	n.mu.Lock()
	n.prefetched = true // until read: forgetEntries and writes clear it too
	n.mu.Unlock()
	f.prefetch.wg.Add(1)
	go func() {
		defer f.prefetch.wg.Done()
		defer f.prefetch.busy.Store(false)
		f.fetchWhole(n, size)
	}()
}

// fetchWhole reads n's size bytes and stores them in the kernel's page
// cache, until done, or the file or the mount changes, or the mount ends.
func (f *filesystem) fetchWhole(n *node, size uint64) {
	changes, s := n.changes.Load(), f.stamp()
	stale := func() bool {
		return f.prefetch.ctx.Err() != nil || n.changes.Load() != changes || f.invalidated.Load() != s || !f.exact()
	}
	client := f.conn.live()
	if client == nil {
		return
	}
	file, err := client.OpenFile(n.rpath(), pflags(syscall.O_RDONLY), 0)
	if err != nil {
		return
	}
	defer file.Close()
	buf := make([]byte, 1<<20)
	for off := uint64(0); off < size; {
		got, err := file.ReadAt(buf[:min(uint64(len(buf)), size-off)], int64(off))
		if got == 0 || stale() {
			return
		}
		n.WriteCache(int64(off), buf[:got])
		// A change since the read (the kernel may have taken the store
		// after the invalidation meant for it): drop what was stored.
		if stale() {
			n.NotifyContent(0, 0)
			return
		}
		off += uint64(got)
		if err != nil && off < size {
			return
		}
	}
	n.mu.Lock()
	if n.prefetched { // not cleared by a change meanwhile
		n.prefetched, n.scattered = false, 0
		n.fetches++
	}
	n.mu.Unlock()
}
