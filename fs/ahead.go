package fs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
)

// readAhead opens a directory's files ahead of a reader going through
// them in order (grep -r, a build reading its sources): when a file is
// opened for reading just after its predecessor in the directory's
// listing, the next small files are opened, read whole and closed, all in
// one round trip (open-read@awcp), and their opens then cost none.
//
// What was read ahead is used only while the mount has changed neither
// the file nor its directory since it was asked for (node.changedAt, as
// for listings) and for an attribute timeout: the delegator's own changes
// show as late as they do through the kernel's caches, and never later.
// One directory at a time is read ahead, and heads the reader passed over
// are dropped, so about aheadFiles heads are held at most.
type readAhead struct {
	mu      sync.Mutex // guards the fields below; writeBehind.mu is taken under it, and it is never held while heads are read
	dir     *node      // the directory read ahead; nil if none
	listing *listing   // dir's listing, which positions are in
	heads   map[string]*aheadHead
	last    int // position of the last file opened; -1 if none
	next    int // first position not read ahead yet
}

const (
	aheadFiles = 16 // how many files ahead of the reader are read
	aheadGap   = 8  // an open at most this far past the last one is in order (subdirectories are skipped)
)

// aheadHead is a file read ahead: its fields are set when done is closed.
type aheadHead struct {
	done   chan struct{}
	at     uint64    // filesystem.changes when it was asked for
	until  time.Time // an attribute timeout after
	opened sftpc.Opened
	err    error
}

// openAhead is a read-only open of n answered from what was read ahead, or
// nil if nothing was; kernelSize is the file's size as the kernel has it.
// It also reads on ahead of this open.
func (n *node) openAhead(ctx context.Context, flags int, kernelSize uint64) (*fileHandle, uint32) {
	name, parent := n.Parent()
	if parent == nil {
		return nil, 0
	}
	dir, ok := parent.Operations().(*node)
	if !ok {
		return nil, 0
	}
	a := n.fsys.ahead.opening(dir, name)
	if a == nil {
		return nil, 0
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return nil, 0
	}
	if a.err != nil || a.opened.Attrs.Flags == 0 || !n.unchangedSince(a.at) || !dir.unchangedSince(a.at) ||
		time.Now().After(a.until) {
		return nil, 0
	}
	h := n.deferredHandle(flags)
	return h, n.openedWith(h, a.opened, n.changes.Load(), kernelSize)
}

// opening notes that name, in dir, is being opened for reading: it
// returns what was read ahead of it, if anything, and asks for the files
// after it if the reader is going through dir in order.
func (r *readAhead) opening(dir *node, name string) *aheadHead {
	l, ok := dir.cachedListing()
	if !ok {
		return nil
	}
	fsys := dir.fsys
	r.mu.Lock()
	if r.dir != dir || r.listing != l {
		r.dir, r.listing, r.heads, r.last, r.next = dir, l, map[string]*aheadHead{}, -1, 0
	}
	a := r.heads[name]
	delete(r.heads, name)
	pos, known := l.position(name)
	inOrder := known && pos > r.last && pos-r.last <= aheadGap
	if known {
		r.last = pos
	}
	var batch []string
	var heads []*aheadHead
	// Ask again once half of what was asked for is used, so that a batch
	// is several files, one round trip.
	if inOrder && r.next <= pos+aheadFiles/2 {
		at := fsys.changes.Load() // before: a change from now on voids the batch
		// Not while writes are in flight: the reads could overtake them.
		// Removes may be: git unlinks its temporary object file behind
		// just before it opens the next source file.
		if fsys.conn.writes.writesSettled() {
			until := time.Now().Add(fsys.attr)
			for skipped := range r.heads { // passed over by the reader
				if i, _ := l.position(skipped); i < pos {
					delete(r.heads, skipped)
				}
			}
			for i := max(r.next, pos+1); i < min(len(l.entries), pos+1+aheadFiles); i++ {
				e := l.entries[i]
				if e.Attrs.Mode&syscall.S_IFMT != syscall.S_IFREG || e.Attrs.Size > headSize || r.heads[e.Name] != nil ||
					fsys.warm.hasFile(dir.child(e.Name), fsys.exactNow()) {
					continue
				}
				h := &aheadHead{done: make(chan struct{}), at: at, until: until}
				r.heads[e.Name] = h
				batch, heads = append(batch, dir.child(e.Name)), append(heads, h)
			}
			r.next = pos + 1 + aheadFiles
		}
	}
	r.mu.Unlock()
	if len(batch) > 0 {
		fsys.readAheadOf(batch, heads)
	}
	return a
}

// readAheadOf opens, reads and closes paths on the live connection, all
// sent at once, and completes heads with what came back. Nothing is
// waited for here: if the connection is down, the heads fail.
func (f *filesystem) readAheadOf(paths []string, heads []*aheadHead) {
	client := f.conn.live()
	if client == nil {
		for _, h := range heads {
			h.err = errUnreachable
			close(h.done)
		}
		return
	}
	calls := make([]sftpc.OpenReadCall, len(paths))
	for i, p := range paths {
		calls[i] = client.StartOpenRead(p, sftpc.OpenRead, 0, headSize)
	}
	f.closing.Add(1)
	go func() {
		defer f.closing.Done()
		for i, h := range heads {
			file, opened, err := client.OpenReadResult(calls[i])
			if err == nil {
				file.StartClose() // nobody waits for the answer
			}
			h.opened, h.err = opened, err
			close(h.done)
		}
	}()
}
