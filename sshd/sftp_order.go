package sshd

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// job is a request on its way to a worker: it waits for after, if set,
// and is marked in done, if set, once handled.
//
// A handle's writes run side by side on several workers, but a barrier
// request on it (FSTAT, FSETSTAT, CLOSE: wire.WriteBarrier) waits for the writes
// sent before it, and the writes sent after it wait for it. A job only
// ever waits for jobs that came before it, and every worker takes its jobs
// in order, so no wait is circular.
type job struct {
	pkt   []byte
	held  int // what the job counts against the session's flow until handled
	after *sync.WaitGroup
	done  completion
	owned []string // the paths it changes, for the watch (intend)
}

// answerBound is how large the answer to pkt can be, counted against the
// session's flow from the moment pkt is read: a READ of 1 MiB is a small
// request with a large answer, and the answers of the requests queued for
// the workers must be counted before they are made.
func answerBound(pkt []byte) int {
	const small = 1 << 10 // a STATUS, HANDLE, ATTRS or one NAME
	r := newReader(pkt[1:])
	r.U32() // request id
	switch pkt[0] {
	case wire.Read:
		r.Str()
		r.U64()
		if n := r.U32(); r.Err == nil {
			return small + int(min(n, maxReadLen))
		}
	case wire.Readdir:
		return readdirPage * nameBound
	case wire.Extended:
		switch r.Str() {
		case wire.List:
			return wire.ListMax * nameBound
		case wire.ListRead:
			r.Str()
			r.U32()
			r.U32()
			if n := r.U32(); r.Err == nil {
				return small + min(int(n), listReadBudget)
			}
			return small + listReadBudget
		case wire.TreeRead:
			r.U32()
			if n := r.U32(); r.Err == nil {
				return small + min(int(n), listReadBudget)
			}
			return small + listReadBudget
		case wire.OpenRead:
			r.Str()
			r.U32()
			wire.DecodeAttrs(&r)
			if n := r.U32(); r.Err == nil {
				return small + int(min(n, maxReadLen))
			}
			return small + maxReadLen
		}
	}
	return small
}

// nameBound is what one entry of a NAME answer takes at most: a name of
// 255 bytes twice (the long name repeats it) and its attributes.
const nameBound = 2*255 + 128

// pendingRemoves are the removes in one directory not yet handled: wg
// counts them for an RMDIR to wait on, n for the sweep to tell an idle
// entry.
type pendingRemoves struct {
	wg sync.WaitGroup
	n  atomic.Int64
}

func (p *pendingRemoves) Done() {
	p.n.Add(-1)
	p.wg.Done()
}

// emptyingMap is the read loop's pendingRemoves by directory.
type emptyingMap map[string]*pendingRemoves

// add counts a remove in dir and returns what marks it handled. Entries
// whose removes are all handled are swept past a bound: an RMDIR finding
// none waits for nothing, which is right for them.
func (m emptyingMap) add(dir string) completion {
	in := m[dir]
	if in == nil {
		if len(m) >= 1024 {
			for d, p := range m {
				if p.n.Load() == 0 {
					delete(m, d)
				}
			}
		}
		in = &pendingRemoves{}
		m[dir] = in
	}
	in.n.Add(1)
	in.wg.Add(1)
	return in
}

// completion is what a job marks once handled.
type completion interface{ Done() }

// handleOrder is the state of one handle's barrier.
type handleOrder struct {
	writes  *sync.WaitGroup // the writes since the last barrier request
	barrier *sync.WaitGroup // the last barrier request, until it is handled
	// A named open's path and its barrier, which a REMOVE of the path
	// waits for until the handle is closed (wire.RemoveAfterOpen).
	path   string
	opened *sync.WaitGroup
	// pending counts its requests not yet handled (track): an entry
	// with none, whose handle is not open, is swept (sweepOrder).
	pending atomic.Int64
}

// track counts a request of o's until done marks it handled.
func (o *handleOrder) track(done *sync.WaitGroup) completion {
	o.pending.Add(1)
	return trackedDone{done, o}
}

type trackedDone struct {
	wg *sync.WaitGroup
	o  *handleOrder
}

func (t trackedDone) Done() {
	t.o.pending.Add(-1)
	t.wg.Done()
}

// orderSweepAt is how many handles' orders the read loop keeps before it
// sweeps those left behind: more than a session's open handles
// (maxHandles), so that a sweep frees most of what it looks at.
const orderSweepAt = 4 * maxHandles

// sweepOrder drops the orders of handles that are not open and have no
// request in flight — named opens refused or never closed — and the
// named opens they hold for REMOVE (wire.RemoveAfterOpen). A client
// naming a new handle in every request would otherwise grow the maps
// without bound.
func sweepOrder(s *sftpServer, order map[string]*handleOrder, opening map[string]*sync.WaitGroup) {
	for k, o := range order {
		if o.pending.Load() != 0 || s.has([]byte(k)) {
			continue
		}
		delete(order, k)
		if o.path != "" && opening[o.path] == o.opened {
			delete(opening, o.path)
		}
	}
}

// firstString is the packet's first string (a handle or a path), after
// its type and request id.
func firstString(pkt []byte) ([]byte, bool) { return stringAt(pkt, 5) }

// stringAt is the string at offset off of the packet.
func stringAt(pkt []byte, off int) ([]byte, bool) {
	if len(pkt) < off+4 {
		return nil, false
	}
	b := pkt[off:]
	n := binary.BigEndian.Uint32(b)
	if int(n) > len(b)-4 {
		return nil, false
	}
	return b[4 : 4+n], true
}

// has reports whether key is an open handle.
func (s *sftpServer) has(key []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.handles[string(key)]
	return ok
}

// routeKey picks a worker from the path or handle the request acts on:
// the packet's first string, but for SYMLINK the link and for an extension
// the string after its name (for a link or a rename, the new name).
// Reads and writes also mix in their offset, so the pipelined chunks of one
// file are served side by side: pread and pwrite at distinct offsets need
// no order, and the handle's other requests wait for its writes (job).
func routeKey(pkt []byte) uint32 {
	key, ok := firstString(pkt)
	if !ok {
		return 0
	}
	at := 5 + 4 + len(key)
	switch {
	case pkt[0] == wire.Extended:
		// By what it names, not by the extension's name: opens of many
		// files (wire.OpenRead) run side by side. A link or a rename by
		// its new name, which the client reads back right behind it.
		if name := string(key); name == "hardlink@openssh.com" || name == "posix-rename@openssh.com" {
			if from, ok := stringAt(pkt, at); ok {
				at += 4 + len(from)
			}
		}
		fallthrough
	case pkt[0] == wire.Symlink: // (target, link): by the link
		if named, ok := stringAt(pkt, at); ok {
			key = named
		}
	}
	var h uint32 = 2166136261
	for _, c := range key {
		h = (h ^ uint32(c)) * 16777619
	}
	if pkt[0] == wire.Read || pkt[0] == wire.Write {
		if rest := pkt[at:]; len(rest) >= 8 {
			h += uint32(binary.BigEndian.Uint64(rest) >> 16) // 64 KiB chunks
		}
	}
	return h
}
