package fs

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Across a real network a round trip costs milliseconds, and an agent's
// first walk of the tree (git status, grep -r, a build) costs one for
// each directory it lists, each file it looks up before its directory is
// listed, and each small file it reads: a minute at 20 ms for a
// repository of 2,000 files. So once the delegator's watch is exact, the
// mount fetches the tree ahead of the agent (warmUp): every directory's
// listing and the contents of its small files, a page of up to a MiB in
// one round trip (sftpwire.ListRead), several pages in flight. The walk
// then finds its directories listed and its files' contents at hand.
//
// What is fetched is kept — a listing until used once (it becomes the
// node's own), contents until the mount ends (they go to the kernel's page
// cache at the file's open, and answer a read it no longer does) — or
// until it may be stale, path by path (void): the watch reports a change
// there, or the mount changes it itself. A page answered while either
// happened is not kept. The store is bounded (warmEntries, warmBytes, and
// warmProcessBytes for all the process's mounts);
// past the bounds the walk stops, and the rest of the tree is read as
// before, when asked for.

const (
	warmSmall    = headSize  // the largest file whose contents are fetched
	warmPage     = 960 << 10 // the most one page's answer holds
	warmInFlight = 8         // pages asked for at once
	warmEntries  = 1 << 16   // entries of listings kept at most (some 150 bytes each)
	warmBytes    = 32 << 20  // file contents kept at most
	// warmProcessBytes bounds the contents kept by all the process's
	// mounts together: an executor runs several delegations.
	warmProcessBytes = 128 << 20
)

// warmHeld is the contents kept by the process's mounts (warmProcessBytes).
var warmHeld atomic.Int64

// warmStore is what warmUp fetched and nothing used yet, by the remote
// path of each directory.
type warmStore struct {
	held atomic.Int64 // len(dirs): the fast way out while empty
	// kept counts the directories kept (keep): a node voided since the
	// last is not voided again (voidNode).
	kept atomic.Uint64

	// walking is set while the tree is fetched: the mount's changes are
	// then noted by path (recent), so that a page answered meanwhile is
	// dropped only where one of them touched it — git's index.lock must
	// not cost the whole tree in flight.
	walking  atomic.Bool
	recentMu sync.Mutex // guards recent and lost; taken before mu, never after
	recent   []noted    // the latest warmRecent changes, oldest first
	lost     uint64     // the count of the latest change noted no more

	mu      sync.Mutex // guards the fields below; never held across a request
	gen     uint64     // the exact watch's connection it was fetched under
	dirs    map[string]*warmDir
	entries int // in the listings kept
	bytes   int // of the contents kept
	// fetched counts the directories kept; usedDirs and usedFiles what
	// was taken (tests).
	fetched, usedDirs, usedFiles int
}

// warmRecent is how many changes a walk notes: past them, a page that
// was in flight longer is dropped whatever it holds.
const warmRecent = 1024

// noted is a change the mount made while the tree was fetched: the
// mount's change count it moved to, and the path changed.
type noted struct {
	at   uint64
	path string
}

// change moves the mount's change count (changes) for a change to nodes
// ns, and notes their paths while the tree is fetched; it is the count
// moved to.
func (w *warmStore) change(changes *atomic.Uint64, ns []*node) uint64 {
	if !w.walking.Load() {
		return changes.Add(1)
	}
	paths := make([]string, 0, len(ns))
	for _, n := range ns {
		if n != nil {
			paths = append(paths, n.rpath())
		}
	}
	w.recentMu.Lock()
	defer w.recentMu.Unlock()
	v := changes.Add(1) // under the lock: a page checked sees v with its paths, or neither
	for _, p := range paths {
		if len(w.recent) == warmRecent {
			w.lost = w.recent[0].at
			w.recent = append(w.recent[:0], w.recent[1:]...)
		}
		w.recent = append(w.recent, noted{at: v, path: p})
	}
	return v
}

// untouched reports whether the mount changed nothing of directory p
// since its change count was at: neither p, nor a name in it, nor a
// directory above it (moved or removed). Past the walk, or once changes
// after at are noted no more, any change counts. recentMu is held.
func (w *warmStore) untouched(changes *atomic.Uint64, p string, at uint64) bool {
	now := changes.Load()
	if now == at {
		return true
	}
	if !w.walking.Load() || w.lost > at {
		return false
	}
	for _, c := range w.recent {
		if c.at <= at {
			continue
		}
		if dir, _ := splitPath(c.path); c.path == p || dir == p || strings.HasPrefix(p, c.path+"/") || c.path == "/" {
			return false
		}
	}
	return true
}

// walk marks the tree's fetch begun (on) or ended.
func (w *warmStore) walk(on bool) {
	w.recentMu.Lock()
	defer w.recentMu.Unlock()
	w.walking.Store(on)
	w.recent, w.lost = nil, 0
}

// warmDir is one directory's listing and its small files' contents, as
// fetched: entries is nil once taken or voided, files loses each file
// taken or voided.
type warmDir struct {
	entries []sftpc.Entry
	files   map[string]sftpc.Opened // by name
	bytes   int
	// at, stamp and gen are the mount's change count, its stamp and the
	// exact watch's connection when it was asked for (keep).
	at, stamp, gen uint64
}

// keep stores d, directory p as fetched, unless something may have
// changed since it was asked for (d's stamps; the
// check is made under the lock that void takes, after the count or the
// stamp moved); it reports whether the store has room for more.
func (w *warmStore) keep(f *filesystem, p string, d *warmDir) bool {
	w.recentMu.Lock() // both locks: a change noted after this voids what is kept
	defer w.recentMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	gen := d.gen
	if !w.untouched(&f.changes, p, d.at) || f.stamp() != d.stamp || f.exactNow() != gen {
		return true // voided on arrival: the walk goes on
	}
	if w.entries+len(d.entries) > warmEntries || w.bytes+d.bytes > warmBytes ||
		warmHeld.Load()+int64(d.bytes) > warmProcessBytes {
		return false
	}
	if w.gen != gen || w.dirs == nil {
		w.clear()
		w.gen = gen
	}
	w.dropDir(p)
	w.dirs[p] = d
	w.kept.Add(1)
	w.fetched++
	w.entries += len(d.entries)
	w.bytes += d.bytes
	warmHeld.Add(int64(d.bytes))
	w.held.Store(int64(len(w.dirs)))
	return true
}

// listing is the listing of p fetched ahead under connection gen, if
// any; taken, it is kept no longer.
func (w *warmStore) listing(p string, gen uint64, take bool) ([]sftpc.Entry, bool) {
	if w.held.Load() == 0 {
		return nil, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.dirs[p]
	if d == nil || d.entries == nil || w.gen != gen {
		return nil, false
	}
	ents := d.entries
	if take {
		w.forgetListing(p, d)
		w.usedDirs++
	}
	return ents, true
}

// has and hasFile report whether p's listing, or its contents, are kept
// (the walk's own read-ahead then asks for it no more).
func (w *warmStore) has(p string, gen uint64) bool     { _, ok := w.listing(p, gen, false); return ok }
func (w *warmStore) hasFile(p string, gen uint64) bool { _, ok := w.file(p, gen, false); return ok }

// file is the contents of p fetched ahead under connection gen, if any
// (take counts it used). They are kept after use, until voided: the kernel
// may drop a file's pages while nobody changed it (it did, for a tenth of
// a tree between two greps a few seconds apart, on the kernel here), and
// a read the pages no longer answer is then answered from them
// (fileHandle.fromKept) instead of across the link.
func (w *warmStore) file(p string, gen uint64, take bool) (sftpc.Opened, bool) {
	if w.held.Load() == 0 {
		return sftpc.Opened{}, false
	}
	dir, name := splitPath(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.dirs[dir]
	if d == nil || w.gen != gen {
		return sftpc.Opened{}, false
	}
	o, ok := d.files[name]
	if ok && take {
		w.usedFiles++
	}
	return o, ok
}

// void forgets what is kept of p — its contents, or its listing — and
// the listing of the directory holding it, which no longer says what p
// is: p changed.
func (w *warmStore) void(p string) {
	if w.held.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.voidLocked(p)
}

// voidNode is void of n's path. The mount's every change, each write
// included, comes here: the path is not worked out while nothing is kept,
// nor where n was voided since the last directory was kept (a rename or a
// remove voids the names it moves by itself, voidTree) — fio's random
// writes lost a sixth of their rate to it.
func (w *warmStore) voidNode(n *node) {
	if w.held.Load() == 0 {
		return
	}
	kept := w.kept.Load()
	if n.warmVoided.Load() == kept+1 {
		return
	}
	w.void(n.rpath())
	n.warmVoided.Store(kept + 1) // +1: a node never voided holds 0
}

func (w *warmStore) voidLocked(p string) {
	dir, name := splitPath(p)
	if d := w.dirs[dir]; d != nil {
		w.forgetFile(dir, d, name)
		w.forgetListing(dir, d)
	}
	if d := w.dirs[p]; d != nil {
		w.forgetListing(p, d)
	}
}

// voidTree is void, and where p was a directory, forgets everything
// kept below it too: p was moved, removed or replaced, and what is kept
// of its old contents must not be found under its name again.
func (w *warmStore) voidTree(p string) {
	if w.held.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, known := w.dirs[p] // before voidLocked, which may drop p's entry
	w.voidLocked(p)
	if !known && p != "/" {
		return
	}
	prefix := strings.TrimSuffix(p, "/") + "/"
	for q := range w.dirs {
		if q == p || strings.HasPrefix(q, prefix) {
			w.dropDir(q)
		}
	}
}

func (w *warmStore) forgetListing(p string, d *warmDir) {
	w.entries -= len(d.entries)
	d.entries = nil
	w.tidy(p, d)
}

func (w *warmStore) forgetFile(dir string, d *warmDir, name string) {
	if o, ok := d.files[name]; ok {
		delete(d.files, name)
		d.bytes -= len(o.Head)
		w.bytes -= len(o.Head)
		warmHeld.Add(-int64(len(o.Head)))
		w.tidy(dir, d)
	}
}

// tidy drops d, directory p's, once nothing of it is left.
func (w *warmStore) tidy(p string, d *warmDir) {
	if d.entries == nil && len(d.files) == 0 {
		delete(w.dirs, p)
		w.held.Store(int64(len(w.dirs)))
	}
}

func (w *warmStore) dropDir(p string) {
	if d := w.dirs[p]; d != nil {
		w.entries -= len(d.entries)
		w.bytes -= d.bytes
		warmHeld.Add(-int64(d.bytes))
		delete(w.dirs, p)
		w.held.Store(int64(len(w.dirs)))
	}
}

func (w *warmStore) clear() {
	if w.dirs == nil {
		w.dirs = map[string]*warmDir{}
	}
	clear(w.dirs)
	warmHeld.Add(-int64(w.bytes))
	w.entries, w.bytes = 0, 0
	w.held.Store(0)
}

// drop forgets everything: the watch overflowed, or the connection ended.
func (w *warmStore) drop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clear()
}

// counts is how many directories were fetched ahead, and how many
// listings and files fetched were used.
func (w *warmStore) counts() (fetched, dirs, files int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fetched, w.usedDirs, w.usedFiles
}

// splitPath is remote path p's directory and name ("/" and "" for the
// root).
func splitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "/", p
	}
	dir, name = p[:i], p[i+1:]
	if dir == "" {
		dir = "/"
	}
	return dir, name
}

// fromWarm is n's listing fetched ahead, kept as n's own, if there is
// one. The stamps are read before the store is: a change reported after
// them voids the store's entry, or moves them past what the listing is
// kept under (then only for the configured timeouts).
func (n *node) fromWarm() (*listing, bool) {
	f := n.fsys
	gen := f.exactNow()
	if gen == 0 {
		return nil, false
	}
	s, at := f.stamp(), f.changes.Load()
	ents, ok := f.warm.listing(n.rpath(), gen, true)
	if !ok {
		return nil, false
	}
	n.knowNames(entryNames(ents), s)
	return n.keepListing(ents, at, s), true
}

// openWarm is a read-only open of n answered from the contents fetched
// ahead, nil if there are none; kernelSize is the file's size as the
// kernel has it. The contents go to the kernel's page cache with the
// open; a read they do not answer opens the file on the delegator.
func (n *node) openWarm(flags int, kernelSize uint64) (*fileHandle, uint32) {
	f := n.fsys
	gen := f.exactNow()
	if gen == 0 {
		return nil, 0
	}
	changes := n.changes.Load()
	o, ok := f.warm.file(n.rpath(), gen, true)
	if !ok {
		return nil, 0
	}
	h := n.deferredHandle(flags)
	return h, n.openedWith(h, o, changes, kernelSize)
}

// warmUp fetches the tree ahead of the agent, on connection gen while its
// watch is exact, until the store is full, the walk is done, or ctx ends.
func (f *filesystem) warmUp(ctx context.Context, gen uint64) {
	client, live := f.conn.liveAt()
	if client == nil || live != gen {
		return
	}
	f.warm.walk(true)
	defer f.warm.walk(false)
	var side sync.WaitGroup
	defer side.Wait()
	side.Add(1)
	go func() { defer side.Done(); f.warmSide(ctx) }()
	if f.warmTree(ctx, client) {
		return
	}
	var (
		mu      sync.Mutex
		queue   = []string{"/"}
		pending = 1 // directories queued or being fetched
		full    bool
		wake    = make(chan struct{}, warmInFlight)
		wg      sync.WaitGroup
	)
	next := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		for len(queue) == 0 && pending > 0 && !full && ctx.Err() == nil {
			mu.Unlock()
			select {
			case <-wake:
			case <-ctx.Done():
			}
			mu.Lock()
		}
		if len(queue) == 0 || full || ctx.Err() != nil {
			return "", false
		}
		p := queue[0]
		queue = queue[1:]
		return p, true
	}
	finished := func(subdirs []string, room bool) {
		mu.Lock()
		queue = append(queue, subdirs...)
		pending += len(subdirs) - 1
		full = full || !room
		mu.Unlock()
		for range warmInFlight { // every worker looks again
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
	for range warmInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				p, ok := next()
				if !ok {
					return
				}
				d, subdirs, ok := f.fetchDir(client, p)
				room := true
				if ok {
					room = f.warm.keep(f, p, d)
				}
				finished(subdirs, room)
			}
		}()
	}
	wg.Wait()
}

// warmSide asks, beside the tree, what an agent's first commands would
// otherwise wait a round trip for each: the root's attributes (the
// kernel asks for them first, and the tree's pages hold only those of
// what is below), and the room to write behind (room.go: the first file
// made would ask).
func (f *filesystem) warmSide(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if !f.readOnly {
		wg.Add(1)
		go func() { defer wg.Done(); f.room.learn(ctx, f.conn) }()
	}
	at, s := f.changes.Load(), f.stamp()
	a, err := f.at(ctx).Lstat("/")
	if err != nil {
		return
	}
	var attr fuse.Attr
	f.fillAttr(a, &attr)
	f.root.observe(&attr)
	f.root.keepAttrs(&attr, at, s)
}

// fetchDir fetches directory p's pages; ok is false where the server
// refused, or the connection ended. d is kept (warmStore.keep) only if
// nothing changed since the stamps it carries were read.
func (f *filesystem) fetchDir(client *sftpc.Client, p string) (d *warmDir, subdirs []string, ok bool) {
	d = &warmDir{files: map[string]sftpc.Opened{}}
	d.at, d.stamp, d.gen = f.changes.Load(), f.stamp(), f.exactNow()
	if d.gen == 0 {
		return nil, nil, false
	}
	for start := 0; ; {
		call := client.StartListRead(p, start, warmSmall, warmPage)
		if call == nil {
			return nil, nil, false
		}
		total, page, err := client.ListReadResult(call)
		if err != nil {
			return nil, nil, false
		}
		subdirs = append(subdirs, d.add(f, p, page)...)
		start += len(page)
		if len(page) == 0 || start >= total {
			if d.entries == nil {
				d.entries = []sftpc.Entry{} // an empty directory's listing is kept too
			}
			return d, subdirs, true
		}
	}
}

// Warmed is closed once the mount has fetched the lent tree ahead of the
// agent (or given up: the store is full, the connection ended); it stays
// open where nothing is fetched ahead (no exact watch). An executor may
// start its agent once it is closed, or a little while after the mount
// whatever happens: the walk goes on beside the agent.
func (m *Mount) Warmed() <-chan struct{} { return m.fsys.warmed }

// startWarmUp fetches the tree ahead once, on the first connection whose
// watch is exact; the mount's close ends it (prefetcher.stop).
func (f *filesystem) startWarmUp(gen uint64) {
	f.warmStart.Do(func() {
		f.prefetch.wg.Add(1)
		go func() {
			defer f.prefetch.wg.Done()
			defer close(f.warmed)
			began := time.Now()
			f.warmUp(f.prefetch.ctx, gen)
			fetched, _, _ := f.warm.counts()
			f.log.Info("fs: the tree fetched ahead", "directories", fetched, "took", time.Since(began).Round(time.Millisecond))
		}()
	})
}
