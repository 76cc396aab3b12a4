package fs

import (
	"context"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/awcp/awcp/fs/sftpc"
)

// listing is a directory's last READDIR, reused by the next opendir until
// an entry timeout has passed, unless the mount changed the directory or
// one of the entries since (their node.changedAt passed at): `ls -l` after
// `find`, or a tool listing a directory twice, costs no round trip. A
// lookup of a name in it is answered from it, too (node.Lookup). Changes
// on the delegator's side show within the entry timeout, as they do for
// names and attributes.
type listing struct {
	entries []sftpc.Entry
	until   time.Time
	at      uint64
	stamp   uint64 // filesystem.stamp before it was read
	size    int    // len(entries), as the ring counted it
	// exact is the connection whose exact watch reported nothing while
	// it was read (filesystem.exactSince), 0 if none: the kernel may keep
	// it until that watch says otherwise (dirHandle).
	exact uint64
	// forgets is filesystem.forgets when a listing read ahead was asked
	// for (fromAhead).
	forgets uint64

	indexOnce sync.Once
	index     map[string]int // name → position in entries, made when first asked
}

// position is where name is in the listing.
func (l *listing) position(name string) (int, bool) {
	l.indexOnce.Do(func() {
		l.index = make(map[string]int, len(l.entries))
		for i, e := range l.entries {
			l.index[e.Name] = i
		}
	})
	i, ok := l.index[name]
	return i, ok
}

// keptListings bounds how many directories keep a listing, and
// keptEntries how many entries they hold together: keeping one more drops
// the oldest. A walk over a tree of tens of thousands of directories
// (find, git status, the executor's scans) then lists each directory over
// the network once, not at every walk, and a mount holds about 16 MiB of
// listings at most (some 130 bytes an entry: BenchmarkListingsHeld), not
// the tree's.
const (
	keptListings = 32768
	keptEntries  = 1 << 17
)

// listingRing is the directories keeping a listing, oldest first from
// head, and the entries they hold. Its lock is taken before a node's,
// never after.
type listingRing struct {
	mu      sync.Mutex // guards the fields below
	dirs    []*node
	head    int
	entries int
}

// cachedListing is n's listing if it may be used again.
func (n *node) cachedListing() (*listing, bool) {
	l, ok := n.freshListing()
	if !ok {
		return nil, false
	}
	for _, e := range l.entries {
		if !n.childNode(e.Name).unchangedSince(l.at) {
			return nil, false
		}
	}
	return l, true
}

// freshListing is n's listing if it is within the entry timeout and n's
// names did not change through this mount since: its entries may still
// be stale, each where the mount changed it (node.unchangedSince).
func (n *node) freshListing() (*listing, bool) {
	l := n.keptListing()
	if l == nil || time.Now().After(l.until) || !n.unchangedSince(l.at) {
		return nil, false
	}
	return l, true
}

// keptListing is n's last listing, nil if it keeps none.
func (n *node) keptListing() *listing {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listing
}

// fromListing answers a lookup of name in n from l, a listing of n, if it
// holds name, is within its time, and the mount has changed neither the
// entry nor its name in n since (n's note of it too: the kernel may have
// forgotten the entry's node, and its stamp with it). The kernel keeps
// the answer no longer than l is kept: the delegator's changes show
// within an entry timeout of it.
func (n *node) fromListing(ctx context.Context, l *listing, name string, out *fuse.EntryOut) (*fs.Inode, bool) {
	i, ok := l.position(name)
	left := time.Until(l.until)
	if !ok || left <= 0 || !n.entryUnchangedSince(name, l.at) || !n.childNode(name).unchangedSince(l.at) {
		return nil, false
	}
	ch := n.newChild(ctx, l.stamp, name, l.entries[i].Attrs, out)
	if cn, ok := ch.Operations().(*node); ok {
		cn.keepAttrs(&out.Attr, l.at, l.stamp)
	}
	if entry, _ := n.fsys.keepFor(l.stamp); entry != watchedFor {
		out.SetEntryTimeout(left)
		out.SetAttrTimeout(left)
	}
	return ch, true
}

// list reads n's listing from the delegator, keeps it, and records the
// names it holds.
func (n *node) list(ctx context.Context) (*listing, error) {
	at := n.fsys.changes.Load() // before: a change during the READDIR voids it
	s := n.fsys.stamp()
	ents, err := n.fsys.at(ctx).ReadDir(n.rpath())
	if err != nil {
		return nil, err
	}
	n.knowNames(entryNames(ents), s)
	return n.keepListing(ents, at, s), nil
}

// keepListing records ents, read when the mount's change count was at
// and its stamp s, dropping the oldest listings kept past the bounds.
func (n *node) keepListing(ents []sftpc.Entry, at, s uint64) *listing {
	// Kept as long as the kernel keeps entries: a change the watch
	// reports voids it (forgetEntries moves n's stamp past at).
	exact, entry := n.fsys.exactSince(s), n.fsys.entry
	if exact != 0 {
		entry = watchedFor
	}
	l := &listing{entries: ents, until: time.Now().Add(entry), at: at, stamp: s, size: len(ents), exact: exact}
	r := &n.fsys.listings
	r.mu.Lock()
	defer r.mu.Unlock()
	n.mu.Lock()
	if old := n.listing; old != nil {
		r.entries -= old.size // n is in the ring already
	} else {
		r.dirs = append(r.dirs, n)
	}
	n.listing = l
	n.mu.Unlock()
	r.entries += l.size
	for len(r.dirs)-r.head > 1 && (len(r.dirs)-r.head > keptListings || r.entries > keptEntries) {
		oldest := r.dirs[r.head]
		r.dirs[r.head] = nil
		r.head++
		oldest.mu.Lock()
		if oldest.listing != nil {
			r.entries -= oldest.listing.size
			oldest.listing = nil
		}
		oldest.mu.Unlock()
	}
	if r.head > len(r.dirs)/2 { // the dropped part's room back
		r.dirs = append(r.dirs[:0], r.dirs[r.head:]...)
		r.head = 0
	}
	return l
}
