package fs

import (
	"context"
	"errors"
	"path"
	"strings"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/awcp/awcp/fs/sftpc"
)

// The delegator's server tells the mount what changed on its side, other
// than through the mount (sftpwire.Watch): the mount then drops what it
// and the kernel keep of those paths — entries, negative entries,
// attributes, pages, listings, names known absent — at once, rather than
// when their timeouts run out. What changed while the connection was down
// is not known: a new connection drops everything.
//
// The timeouts stay as configured while watched. Caching longer would
// need to know exactly which changes were the mount's own: the server
// leaves out events on a path while this session's request on it runs and
// for 100 ms after, since inotify does not say who made a change, so
// another's change in that window goes unreported — seen, as without the
// watch, when the timeout runs out.

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
				m.fsys.dropAll(root) // what changed while there was no connection is unknown
			}
			m.watchConn(ctx, root, client, gen)
		}()
	})
}

// watchConn applies the server's reports on connection gen until it ends
// or ctx does.
func (m *Mount) watchConn(ctx context.Context, root *fs.Inode, client *sftpc.Client, gen uint64) {
	defer m.fsys.watchedGen.CompareAndSwap(gen, 0)
	if !client.Watches() {
		return
	}
	for {
		paths, overflow, err := client.Watch(ctx)
		switch {
		case errors.Is(err, sftpc.ErrNoWatch):
			m.log.Debug("fs: the delegator does not watch this export; caches keep their timeouts")
			return
		case err != nil:
			return // the connection (or the mount) ends; the next one drops everything
		case overflow:
			if m.fsys.watchedGen.Load() == gen {
				m.log.Info("fs: the delegator reports more changes than it lists; dropping every cache")
			}
			// The first answer is one too: what was kept before the watch
			// began is dropped.
			m.fsys.dropAll(root)
			m.fsys.watchedGen.Store(gen)
		default:
			for _, p := range paths {
				m.fsys.changedThere(root, p)
			}
		}
	}
}

// changedThere drops what is kept of p (relative to the export), changed
// on the delegator's side: its entry in its directory, the directory's
// listing and known names, and, if the kernel has a node for it, its
// attributes and pages.
func (f *filesystem) changedThere(root *fs.Inode, p string) {
	dir := root
	if p != "." && p != "" {
		parts := strings.Split(path.Clean(p), "/")
		for _, name := range parts[:len(parts)-1] {
			if dir = dir.GetChild(name); dir == nil {
				return // the kernel knows nothing below: nothing is kept
			}
		}
		name := parts[len(parts)-1]
		f.forgetEntries(dir)
		dir.NotifyEntry(name)
		child := dir.GetChild(name)
		if child == nil {
			return
		}
		dir = child
	}
	f.forgetEntries(dir)
	dir.NotifyContent(0, 0)
}

// forgetEntries marks what the mount read of in's node and its directory
// as stale (a listing, a file read ahead) and forgets the names it knew in
// it.
func (f *filesystem) forgetEntries(in *fs.Inode) {
	n, ok := in.Operations().(*node)
	if !ok {
		return
	}
	n.forgetNames()
	f.changing(n)()
}

// dropAll drops everything kept of the tree the kernel knows.
func (f *filesystem) dropAll(root *fs.Inode) {
	f.conn.metrics.CacheDropped()
	var walk func(in *fs.Inode)
	walk = func(in *fs.Inode) {
		f.forgetEntries(in)
		for name, child := range in.Children() {
			in.NotifyEntry(name)
			walk(child)
		}
		in.NotifyContent(0, 0)
	}
	walk(root)
}
