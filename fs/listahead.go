package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
)

// A walk of a tree the mount has not listed yet (find, git status, rg, the
// executor's scan) opens each directory after the one above it, and each
// listing costs a round trip: thousands of them, one after another. When
// the mount lists a directory over the network, or takes a listing read
// ahead, it asks for the listings of up to dirsAhead of its
// subdirectories at once, in the background, each in one request: the
// walk then finds them ready, and the delegator's workers list several
// directories at a time.
//
// A listing read ahead is used once, by the first opendir of its
// directory or lookup in it, within an entry timeout, and only if nothing
// could have changed the directory meanwhile: the mount changed neither
// the directory nor its parent since it was asked for, and the kernel
// forgot no node since (a node forgotten takes with it the stamps of the
// changes made through it). The watch's reports void every one.

const (
	dirsAhead        = 16      // subdirectories asked for at once
	aheadScan        = 256     // entries of a listing looked through for them
	aheadBatches     = 4       // batches in flight at most
	aheadKept        = 256     // listings kept at most
	aheadKeptEntries = 1 << 16 // and entries in them
)

// listAhead is the listings read ahead and not used yet, by path on the
// delegator's side.
type listAhead struct {
	busy chan struct{} // a token per batch in flight
	used atomic.Uint64 // listings read ahead and used

	mu      sync.Mutex // guards the fields below
	kept    map[string]*listing
	asking  map[string]struct{} // being read
	order   []string            // oldest first; may name listings taken since
	entries int
}

func newListAhead() *listAhead {
	return &listAhead{busy: make(chan struct{}, aheadBatches), kept: map[string]*listing{}, asking: map[string]struct{}{}}
}

// take is the listing read ahead of directory p, nil if there is none: it
// is kept no longer.
func (a *listAhead) take(p string) *listing {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.kept[p]
	if l != nil {
		delete(a.kept, p)
		a.entries -= l.size
	}
	return l
}

// has reports whether p's listing is read ahead, or being read.
func (a *listAhead) has(p string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.kept[p]
	_, asked := a.asking[p]
	return ok || asked
}

// asked records that paths are being read; put or forget ends it.
func (a *listAhead) asked(paths []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range paths {
		a.asking[p] = struct{}{}
	}
}

// answered records that p is read no longer.
func (a *listAhead) answered(p string) {
	a.mu.Lock()
	delete(a.asking, p)
	a.mu.Unlock()
}

// put keeps l, read ahead for p, dropping the oldest past the bounds,
// unless the watch reported a change since it was asked for (stamp, at
// l.stamp then): it may predate that change. The stamp is read under the
// lock that drop takes after the watch moves it.
func (a *listAhead) put(p string, l *listing, stamp func() uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if stamp() != l.stamp {
		return
	}
	if old := a.kept[p]; old != nil {
		a.entries -= old.size
	} else {
		a.order = append(a.order, p)
	}
	a.kept[p] = l
	a.entries += l.size
	for len(a.order) > 0 && (len(a.kept) > aheadKept || a.entries > aheadKeptEntries) {
		oldest := a.order[0]
		a.order = a.order[1:]
		if old := a.kept[oldest]; old != nil {
			delete(a.kept, oldest)
			a.entries -= old.size
		}
	}
	if len(a.order) > 2*aheadKept { // names of listings taken: compact
		live := a.order[:0]
		for _, q := range a.order {
			if a.kept[q] != nil {
				live = append(live, q)
			}
		}
		a.order = live
	}
}

// drop forgets every listing read ahead: the watch reported a change.
func (a *listAhead) drop() {
	a.mu.Lock()
	clear(a.kept)
	a.order, a.entries = a.order[:0], 0
	a.mu.Unlock()
}

// fromAhead is n's listing read ahead, kept as n's own, if it may be used.
func (n *node) fromAhead() (*listing, bool) {
	f := n.fsys
	l := f.dirsAhead.take(n.rpath())
	if l == nil || time.Now().After(l.until) || l.forgets != f.forgets.Load() || !n.unchangedSince(l.at) {
		return nil, false
	}
	if _, parent := n.Parent(); parent != nil {
		if pn, ok := parent.Operations().(*node); ok && !pn.unchangedSince(l.at) {
			return nil, false
		}
	}
	f.dirsAhead.used.Add(1)
	n.knowNames(entryNames(l.entries), l.stamp)
	return n.keepListing(l.entries, l.at, l.stamp), true
}

// readAheadOf starts reading ahead for a walk that has reached n, whose
// listing is l: the subdirectories of n, and n's next siblings.
func (n *node) readAheadOf(l *listing) {
	n.readAhead(l, 0)
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	if pn, ok := parent.Operations().(*node); ok {
		if pl := pn.keptListing(); pl != nil {
			if i, ok := pl.position(name); ok {
				pn.readAhead(pl, i+1)
			}
		}
	}
}

// readAhead asks in the background for the listings of up to dirsAhead
// subdirectories of n named in l from its entry from on (looking at
// aheadScan entries at most), which no listing is kept or read ahead of.
func (n *node) readAhead(l *listing, from int) {
	f := n.fsys
	var paths []string
	for _, e := range l.entries[from:min(len(l.entries), from+aheadScan)] {
		if len(paths) == dirsAhead {
			break
		}
		if e.Attrs.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			continue
		}
		if ch := n.childNode(e.Name); ch != nil && ch.keptListing() != nil {
			continue
		}
		p := n.child(e.Name)
		if f.dirsAhead.has(p) || f.warm.has(p, f.exactNow()) || f.hidden(p) {
			continue
		}
		paths = append(paths, p)
	}
	if len(paths) == 0 {
		return
	}
	select {
	case f.dirsAhead.busy <- struct{}{}:
	default:
		return // enough in flight: the walk lists the rest itself
	}
	f.dirsAhead.asked(paths)
	ctx := f.prefetch.ctx
	f.prefetch.wg.Add(1)
	go func() {
		defer f.prefetch.wg.Done()
		defer func() { <-f.dirsAhead.busy }()
		f.listAll(ctx, paths)
	}()
}

// listAll reads the listings of paths, all asked for at once, and keeps
// them as read ahead.
func (f *filesystem) listAll(ctx context.Context, paths []string) {
	defer func() {
		for _, p := range paths {
			f.dirsAhead.answered(p)
		}
	}()
	// What was created, opened or removed behind in them is settled
	// first: the listings must show it.
	if err := f.conn.writes.settleFor(ctx, paths...); err != nil {
		return
	}
	client, _ := f.conn.liveAt()
	if client == nil {
		return
	}
	at, s, forgets := f.changes.Load(), f.stamp(), f.forgets.Load()
	calls := make([]*sftpc.Call, len(paths))
	for i, p := range paths {
		if calls[i] = client.StartList(p); calls[i] == nil {
			return // the server lists in pages only: not worth it
		}
	}
	for i, call := range calls {
		ents, err := client.ListResult(call)
		if err != nil {
			continue // not a directory any more, too many entries, hidden: the walk asks
		}
		exact, entry := f.exactSince(s), f.entry
		if exact != 0 {
			entry = watchedFor
		}
		f.dirsAhead.put(paths[i], &listing{entries: ents, until: time.Now().Add(entry), at: at, stamp: s,
			size: len(ents), exact: exact, forgets: forgets}, f.stamp)
	}
}

func entryNames(ents []sftpc.Entry) []string {
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name
	}
	return names
}

// OnForget counts the nodes the kernel forgot (fromAhead).
func (n *node) OnForget() { n.fsys.forgets.Add(1) }
