package fs

import (
	"context"
	"path"
	"strings"
	"sync"
	"syscall"

	"github.com/awcp/awcp/fs/sftpc"
)

// The tree fetched ahead by whole subtrees (sftpwire.TreeRead): one
// answer holds up to a MiB of listings and small files, from as many
// directories as fit, walked breadth first by the delegator. A walk by
// directories (warmUp's, for a server without it) costs a round trip per
// level of the tree and one per warmInFlight directories of a level: a
// git repository's 256 object directories alone took 32 round trips, and
// a cold git status waited on them across a 100 ms link. Here the
// directories not reached by one answer go out again at once, shared
// among warmInFlight requests, so the walk costs about the tree's bytes
// over warmInFlight MiB in round trips, and a few more.

// The answers grow from treeFirst, doubling, to warmPage. The agent
// starts beside the walk, and its first requests (git's HEAD, config,
// index) queue behind the answers on the wire: across a link of 100 ms, a
// MiB is some seven round trips of a TCP connection's slow start, which
// is where a new connection, or one idle for a moment, starts. Small
// answers first bring the top of the tree, and let the agent's requests
// through, before the large ones fill the link.
const treeFirst = 64 << 10

// warmBatch bounds the directories one request names, and
// warmBatchBytes their paths together, under the server's request bound.
const (
	warmBatch      = 1024
	warmBatchBytes = 32 << 10
)

// treeWalk is the state of one fetch of the tree by subtrees.
type treeWalk struct {
	f      *filesystem
	client *sftpc.Client

	mu      sync.Mutex
	queue   []sftpc.TreeStart   // directories to ask for, and from which entry
	partial map[string]*warmDir // directories whose pages are still coming
	asked   int                 // requests in flight
	sent    int                 // requests sent
	full    bool                // the store has no room left
	failed  bool                // the server refused, or the connection ended
	wake    chan struct{}
}

// warmTree fetches the tree ahead by subtrees; it reports false where the
// server does not serve them (nothing was fetched: walk by directories).
func (f *filesystem) warmTree(ctx context.Context, client *sftpc.Client) bool {
	t := &treeWalk{f: f, client: client, queue: []sftpc.TreeStart{{Path: "/"}},
		partial: map[string]*warmDir{}, wake: make(chan struct{}, 1)}
	first, ok := t.take()
	if !ok {
		return true
	}
	call := client.StartTreeRead(first.dirs, warmSmall, first.budget)
	if call == nil {
		return false
	}
	t.answer(first, call)
	var wg sync.WaitGroup
	for range warmInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t.next(ctx) {
				b, ok := t.take()
				if !ok {
					continue
				}
				call := client.StartTreeRead(b.dirs, warmSmall, b.budget)
				if call == nil {
					t.fail()
					return
				}
				t.answer(b, call)
			}
		}()
	}
	wg.Wait()
	return true
}

// treeBatch is what one request asks for, with the mount's stamps read
// before it was sent (warmStore.keep).
type treeBatch struct {
	dirs           []sftpc.TreeStart
	budget         int // the answer's size asked for (treeFirst)
	at, stamp, gen uint64
}

// next waits until there is something to ask for; false once the walk is
// over (done, full, failed or ended by ctx).
func (t *treeWalk) next(ctx context.Context) bool {
	for {
		t.mu.Lock()
		over := t.full || t.failed || ctx.Err() != nil || (len(t.queue) == 0 && t.asked == 0)
		ready := len(t.queue) > 0
		t.mu.Unlock()
		switch {
		case over:
			t.nudge() // the others look again, and end too
			return false
		case ready:
			return true
		}
		select {
		case <-t.wake:
		case <-ctx.Done():
		}
	}
}

func (t *treeWalk) nudge() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *treeWalk) fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
	t.nudge()
}

// take is the next request's share of the directories to ask for: an
// even share among the requests that may be in flight, so that a wide
// level of the tree goes out at once.
func (t *treeWalk) take() (treeBatch, bool) {
	b := treeBatch{at: t.f.changes.Load(), stamp: t.f.stamp(), gen: t.f.exactNow()}
	t.mu.Lock()
	defer t.mu.Unlock()
	if b.gen == 0 {
		t.failed = true // the watch is no longer exact: what comes is not kept
	}
	if len(t.queue) == 0 || t.failed {
		return b, false
	}
	n := min((len(t.queue)+warmInFlight-1)/warmInFlight, warmBatch)
	bytes := 0
	for i, d := range t.queue[:n] {
		if bytes += len(d.Path) + 8; bytes > warmBatchBytes && i > 0 {
			n = i
			break
		}
	}
	b.dirs = t.queue[:n:n]
	t.queue = t.queue[n:]
	t.asked++
	b.budget = min(treeFirst<<min(t.sent, 16), warmPage)
	t.sent++
	if len(t.queue) > 0 {
		t.nudge() // another request may go out too: the wake holds one
	}
	return b, true
}

// answer takes a request's answer: directories listed whole are kept,
// the rest asked for again.
func (t *treeWalk) answer(b treeBatch, call *sftpc.Call) {
	pages, err := t.client.TreeReadResult(call, len(b.dirs))
	t.mu.Lock()
	defer func() {
		t.asked--
		t.mu.Unlock()
		t.nudge()
	}()
	if err != nil {
		t.failed = true
		return
	}
	listed := make(map[string]bool, len(pages))
	var more []sftpc.TreeStart
	for i, pg := range pages {
		p := path.Join(b.dirs[pg.From].Path, pg.Sub)
		listed[p] = true
		d := t.partial[p]
		delete(t.partial, p)
		if pg.Err != nil {
			continue // looked up as asked for, when the agent gets there
		}
		start := 0
		if pg.Sub == "" {
			start = b.dirs[pg.From].Start
		}
		switch {
		case start == 0:
			d = &warmDir{files: map[string]sftpc.Opened{}, at: b.at, stamp: b.stamp, gen: b.gen}
		case d == nil:
			continue // a page of a directory not begun: not asked for
		}
		subdirs := d.add(t.f, p, pg.Page)
		for _, s := range subdirs {
			more = append(more, sftpc.TreeStart{Path: s})
		}
		switch next := start + len(pg.Page); {
		case next < pg.Total && len(pg.Page) == 0 && i == 0:
			// No progress where the server must make some: not asked again.
		case next < pg.Total:
			t.partial[p] = d
			more = append(more, sftpc.TreeStart{Path: p, Start: next})
		default:
			if d.entries == nil {
				d.entries = []sftpc.Entry{}
			}
			t.mu.Unlock() // keep takes the store's locks; nothing here is shared with it
			room := t.f.warm.keep(t.f, p, d)
			t.mu.Lock()
			t.full = t.full || !room
		}
	}
	// What the answer did not reach: asked for again.
	for _, d := range b.dirs {
		if !listed[d.Path] {
			t.queue = append(t.queue, d)
		}
	}
	for _, d := range more {
		if !listed[d.Path] || d.Start > 0 {
			t.queue = append(t.queue, d)
		}
	}
}

// add takes a page of directory p's entries into d; it is the
// subdirectories among them (not hidden), by path.
func (d *warmDir) add(f *filesystem, p string, page []sftpc.PageEntry) (subdirs []string) {
	for _, e := range page {
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsRune(e.Name, '/') {
			continue // not a name in p: a listing never holds it
		}
		d.entries = append(d.entries, e.Entry)
		child := path.Join(p, e.Name)
		switch {
		case e.Attrs.Mode&syscall.S_IFMT == syscall.S_IFDIR:
			if !f.hidden(child) {
				subdirs = append(subdirs, child)
			}
		case e.HasData:
			d.files[e.Name] = sftpc.Opened{Attrs: e.Attrs, Head: e.Data, EOF: true}
			d.bytes += len(e.Data)
		}
	}
	return subdirs
}
