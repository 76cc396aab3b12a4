package fs

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/awcp/awcp/fs/sftpc"
)

// The delegator's server tells the mount what changed on its side, other
// than through the mount (sftpwire.Watch): the mount then drops what it
// and the kernel keep of those paths — entries, negative entries,
// attributes, pages, listings, names known absent — at once, rather than
// when their timeouts run out. A directory named is dropped with all
// below it. What changed while the connection was down is not known: a
// new connection drops everything.
//
// Where the server says its watch is exact (it knows which changes were
// this session's own, by the process that made them), the kernel keeps
// entries, attributes, negative entries and pages until told: for
// watchedFor, not the configured timeouts. An answer read while an
// invalidation came is kept only the configured time (filesystem.stamp),
// and every invalidation is sent to the kernel a second time renotifyAfter
// later, for an answer the kernel took after it. Where the watch is not
// exact (inotify, which does not say who made a change, so the server
// leaves out changes to a path this session is changing), the timeouts
// stay as configured.

// renotifyAfter is when the kernel is told a second time of what changed.
const renotifyAfter = 100 * time.Millisecond

// startWatching has every connection, from the current one on, watch the
// delegator's changes until the mount closes.
func (m *Mount) startWatching(root *fs.Inode) {
	ctx, stop := context.WithCancel(context.Background())
	m.stopWatch = stop
	first := true
	m.conn.notify(func(client *sftpc.Client, gen uint64) {
		m.watchMu.Lock()
		if m.watchDone {
			m.watchMu.Unlock()
			return
		}
		again := !first
		first = false
		m.watching.Add(1)
		m.watchMu.Unlock()
		go func() {
			defer m.watching.Done()
			if again {
				m.fsys.dropAll(root, true) // what changed while there was no connection is unknown
			}
			m.watchConn(ctx, root, client, gen)
		}()
	})
}

// watchConn applies the server's reports on connection gen until it ends
// or ctx does.
func (m *Mount) watchConn(ctx context.Context, root *fs.Inode, client *sftpc.Client, gen uint64) {
	defer m.fsys.watchedGen.CompareAndSwap(gen, 0)
	defer m.fsys.exactGen.CompareAndSwap(gen, 0)
	if !client.Watches() {
		return
	}
	again := newRenotifier(m.fsys, root)
	defer again.stop()
	for {
		ch, err := client.Watch(ctx)
		switch {
		case errors.Is(err, sftpc.ErrNoWatch):
			m.log.Debug("fs: the delegator does not watch this export; caches keep their timeouts")
			return
		case err != nil:
			return // the connection (or the mount) ends; the next one drops everything
		}
		wasExact := m.fsys.exactGen.Load() == gen
		if !ch.Exact && m.fsys.exactGen.CompareAndSwap(gen, 0) {
			// Kept until told, and no longer told of everything: drop all.
			m.log.Info("fs: the delegator's watch no longer sees every change; caches keep their timeouts")
			ch.Overflow = true
		}
		if ch.Overflow {
			if m.fsys.watchedGen.Load() == gen {
				m.log.Info("fs: the delegator reports more changes than it lists; dropping every cache")
			}
			// The first answer is one too: what was kept before the watch
			// began is dropped. Only what the kernel was told to keep long
			// needs telling twice, and its entries dropped: before the watch
			// was exact, none were (they go within their 1 s; dropping them
			// would have the kernel forget the nodes, and give the files
			// new inode numbers under a running program's feet).
			m.fsys.dropAll(root, wasExact)
			if wasExact {
				again.add(nil)
			}
			m.fsys.watchedGen.Store(gen)
			if ch.Exact {
				m.fsys.exactGen.Store(gen)
				m.fsys.startWarmUp(gen)
			}
			continue
		}
		for _, p := range ch.Paths {
			m.fsys.changedThere(root, p)
		}
		again.add(ch.Paths)
	}
}

// renotifier tells the kernel a second time what changed: an answer to a
// lookup, a getattr or a read that the kernel took after the first
// invalidation would otherwise be kept as long as the watch is exact.
type renotifier struct {
	fsys *filesystem
	root *fs.Inode

	mu    sync.Mutex
	queue []renotify
	wake  chan struct{}
	done  chan struct{}
	ended chan struct{}
}

type renotify struct {
	at    time.Time
	paths []string // nil: everything
}

func newRenotifier(fsys *filesystem, root *fs.Inode) *renotifier {
	r := &renotifier{fsys: fsys, root: root, wake: make(chan struct{}, 1), done: make(chan struct{}), ended: make(chan struct{})}
	go r.run()
	return r
}

func (r *renotifier) add(paths []string) {
	r.mu.Lock()
	r.queue = append(r.queue, renotify{at: time.Now().Add(renotifyAfter), paths: paths})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// stop ends the renotifier. What it has not told yet is left: the
// connection has ended, and the next one drops everything.
func (r *renotifier) stop() {
	close(r.done)
	<-r.ended
}

func (r *renotifier) run() {
	defer close(r.ended)
	for {
		r.mu.Lock()
		var next *renotify
		if len(r.queue) > 0 {
			next = &r.queue[0]
		}
		r.mu.Unlock()
		if next == nil {
			select {
			case <-r.wake:
				continue
			case <-r.done:
				return
			}
		}
		if wait := time.Until(next.at); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.done:
				// The connection ended: the next one drops everything.
				t.Stop()
				return
			}
		}
		r.mu.Lock()
		item := r.queue[0]
		r.queue = r.queue[1:]
		r.mu.Unlock()
		if item.paths == nil {
			r.fsys.drop(r.root, false, true)
			r.fsys.dropNegatives()
			continue
		}
		for _, p := range item.paths {
			parent, name, in := find(r.root, p)
			if parent != nil {
				parent.NotifyEntry(name)
				parent.NotifyContent(0, 0) // its listing, which the kernel may keep (dirHandle)
			}
			if in != nil {
				r.fsys.drop(in, false, true)
			}
		}
	}
}

// find is the kernel's node for p (relative to the export), and its parent
// and name there; nil where the kernel knows none.
func find(root *fs.Inode, p string) (parent *fs.Inode, name string, in *fs.Inode) {
	if p == "." || p == "" {
		return nil, "", root
	}
	parts := strings.Split(path.Clean(p), "/")
	dir := root
	for _, part := range parts[:len(parts)-1] {
		if dir = dir.GetChild(part); dir == nil {
			return nil, "", nil
		}
	}
	name = parts[len(parts)-1]
	return dir, name, dir.GetChild(name)
}

// changedThere drops what is kept of p (relative to the export), changed
// on the delegator's side: its entry in its directory, the directory's
// listing and known names, and, if the kernel has a node for it, its
// attributes and pages — of a directory, those of everything below it the
// kernel knows too.
func (f *filesystem) changedThere(root *fs.Inode, p string) {
	// What was fetched ahead is voided before and after the count moves:
	// a page kept before the second is voided by it, one kept after is
	// refused for the count (warmStore.keep), and a take that read the
	// count before it moved finds nothing after the first. A directory
	// named goes with all below it: it may have been moved, or another
	// moved into its name.
	rp := "/" + strings.TrimPrefix(p, "/")
	f.warm.voidTree(rp)
	f.invalidated.Add(1) // before: an answer read from now on may be stale
	f.warm.voidTree(rp)
	f.dirsAhead.drop()
	parent, name, in := find(root, p)
	if parent != nil {
		f.forgetEntries(parent)
		parent.NotifyEntry(name)
		parent.NotifyContent(0, 0) // its listing, which the kernel may keep (dirHandle)
	}
	if in != nil {
		f.drop(in, true, true)
	}
}

// forgetEntries marks what the mount read of in's node and its directory
// as stale (a listing, a file read ahead), forgets the names it knew in
// it, and that the kernel's pages or listing of it were current.
func (f *filesystem) forgetEntries(in *fs.Inode) {
	n, ok := in.Operations().(*node)
	if !ok {
		return
	}
	n.forgetNames()
	n.forgetWritten()
	n.mu.Lock()
	n.opened, n.whole, n.prefetched, n.fetches = version{}, false, false, 0
	n.mu.Unlock()
	f.changing(n)()
}

// dropAll drops everything kept of the tree the kernel knows: the
// mount's own caches and the kernel's pages, and its entries if entries.
func (f *filesystem) dropAll(root *fs.Inode, entries bool) {
	f.conn.metrics.CacheDropped()
	f.warm.drop()
	f.invalidated.Add(1)
	f.warm.drop()
	f.dirsAhead.drop()
	f.drop(root, true, entries)
	if entries {
		f.dropNegatives()
	}
}

// drop drops the kernel's pages of in and of what it knows below it; with
// ours, what the mount keeps of them; with entries, the kernel's entries
// below in.
func (f *filesystem) drop(in *fs.Inode, ours, entries bool) {
	if ours {
		f.forgetEntries(in)
	}
	for name, child := range in.Children() {
		if entries {
			in.NotifyEntry(name)
		}
		f.drop(child, ours, entries)
	}
	in.NotifyContent(0, 0)
}
