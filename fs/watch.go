package fs

import (
	"context"
	"errors"
	"path"
	"strings"
	"time"

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

// watchChanges applies the server's reports until ctx ends.
func (m *Mount) watchChanges(ctx context.Context, root *fs.Inode) {
	defer m.fsys.watched.Store(false)
	var watched uint64 // the connection watched so far
	for ctx.Err() == nil {
		client, gen := m.conn.liveAt()
		if client == nil || (gen == watched && !client.Watches()) {
			sleepCtx(ctx, 50*time.Millisecond)
			continue
		}
		if gen != watched {
			m.fsys.watched.Store(false) // until this connection's watch answers
			if watched != 0 {
				m.fsys.dropAll(root) // what changed during the outage is unknown
			}
			watched = gen
		}
		if !client.Watches() {
			continue
		}
		paths, overflow, err := client.Watch(ctx)
		if err != nil {
			m.fsys.watched.Store(false)
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, sftpc.ErrNoWatch):
			m.log.Debug("fs: the delegator does not watch this export; caches keep their timeouts")
			for ctx.Err() == nil {
				if _, g := m.conn.liveAt(); g != gen && g != 0 {
					break
				}
				sleepCtx(ctx, 100*time.Millisecond)
			}
		case err != nil:
			sleepCtx(ctx, 50*time.Millisecond) // the connection is going; the next one drops everything
		case overflow:
			if m.fsys.watched.Load() {
				m.log.Info("fs: the delegator reports more changes than it lists; dropping every cache")
			}
			// The first answer is one too: what was kept before the watch
			// began is dropped.
			m.fsys.dropAll(root)
			m.fsys.watched.Store(true)
		default:
			for _, p := range paths {
				m.fsys.changedThere(root, p)
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
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
