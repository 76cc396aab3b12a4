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

// keptListings bounds how many directories keep a listing: keeping one
// more drops the oldest, so a walk over a large tree holds a few hundred
// kilobytes of listings, not the tree's.
const keptListings = 128

// listingRing is the directories keeping a listing, oldest first from next.
type listingRing struct {
	mu   sync.Mutex // guards the fields below; taken alone
	dirs [keptListings]*node
	next int
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
// holds name, is within its time, and the mount has changed neither n nor
// the entry since (n too: the kernel may have forgotten the entry's node,
// and its stamp with it). The kernel keeps the answer no longer than l is
// kept: the delegator's changes show within an entry timeout of it.
func (n *node) fromListing(ctx context.Context, l *listing, name string, out *fuse.EntryOut) (*fs.Inode, bool) {
	i, ok := l.position(name)
	left := time.Until(l.until)
	if !ok || left <= 0 || !n.unchangedSince(l.at) || !n.childNode(name).unchangedSince(l.at) {
		return nil, false
	}
	ch := n.newChild(ctx, l.stamp, name, l.entries[i].Attrs, out)
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
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name
	}
	n.knowNames(names, s)
	return n.keepListing(ents, at, s), nil
}

// keepListing records ents, read when the mount's change count was at
// and its stamp s.
func (n *node) keepListing(ents []sftpc.Entry, at, s uint64) *listing {
	// Kept as long as the kernel keeps entries: a change the watch
	// reports voids it (forgetEntries moves n's stamp past at).
	entry, _ := n.fsys.keepFor(s)
	l := &listing{entries: ents, until: time.Now().Add(entry), at: at, stamp: s}
	n.mu.Lock()
	kept := n.listing != nil // n is in the ring already
	n.listing = l
	n.mu.Unlock()
	if kept {
		return l
	}
	r := &n.fsys.listings
	r.mu.Lock()
	oldest := r.dirs[r.next]
	r.dirs[r.next] = n
	r.next = (r.next + 1) % keptListings
	r.mu.Unlock()
	if oldest != nil && oldest != n {
		oldest.mu.Lock()
		oldest.listing = nil
		oldest.mu.Unlock()
	}
	return l
}
