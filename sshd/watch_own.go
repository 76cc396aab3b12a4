package sshd

// Which changes are this session's own: the paths each request may
// change, recorded before it runs (intend, begin) and after (end), and,
// across the sessions of this process, who is changing which file
// (sessions) — a source that attests says only that this process made a
// change.

import (
	"encoding/binary"
	"sync"
	"time"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// begin records that a request of this session is about to change the
// paths; end, that it has.
func (w *watcher) begin(paths []string) {
	w.mu.Lock()
	for _, p := range paths {
		o := w.own[p]
		if o == nil {
			o = &ownChange{}
			w.own[p] = o
		}
		o.inflight++
	}
	w.mu.Unlock()
	sessions.begin(w, paths)
}

func (w *watcher) end(paths []string) {
	now := time.Now()
	w.mu.Lock()
	for _, p := range paths {
		if o := w.own[p]; o != nil {
			o.inflight--
			o.ended = now
		}
	}
	if len(w.own) > w.sweepAt {
		for p, o := range w.own {
			// Past maxOwn, what has ended is forgotten early: its late
			// events are reported (needless invalidations), and the map
			// stays bounded whatever the agent does.
			if !o.live(now, w.grace) || len(w.own) > maxOwn && o.inflight == 0 {
				delete(w.own, p)
			}
		}
		w.sweepAt = max(minSweep, 2*len(w.own)) // amortized: not a sweep per request
	}
	w.mu.Unlock()
	sessions.end(w, paths, now)
}

// sessions sorts this process's own changes among its sessions. A source
// that attests says only that this process made a change; if another
// session's watcher is changing the same file meanwhile, the change may be
// that session's — the export may be lent twice, or one export may hold
// another — so it is reported. Files are named by the kernel's path of the
// export's directory and the path in it (watcher.real): an export reached
// through a bind mount under another path is not known to be the same.
var sessions = changers{files: map[string]map[*watcher]*ownChange{}}

type changers struct {
	mu      sync.Mutex // after watcher.mu
	files   map[string]map[*watcher]*ownChange
	sweepAt int
	// crowded is until when every change of this process is taken as
	// possibly another session's: the map was cut back past maxOwn, and
	// what it forgot could be.
	crowded time.Time
}

func (c *changers) begin(w *watcher, paths []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range paths {
		file := w.real(p)
		by := c.files[file]
		if by == nil {
			by = map[*watcher]*ownChange{}
			c.files[file] = by
		}
		o := by[w]
		if o == nil {
			o = &ownChange{}
			by[w] = o
		}
		o.inflight++
	}
}

func (c *changers) end(w *watcher, paths []string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range paths {
		if o := c.files[w.real(p)][w]; o != nil {
			o.inflight--
			o.ended = now
		}
	}
	if len(c.files) > c.sweepAt {
		crowded := len(c.files) > maxOwn
		for file, by := range c.files {
			for cw, o := range by {
				if !o.live(now, ownGraceAttested) || crowded && o.inflight == 0 {
					delete(by, cw)
				}
			}
			if len(by) == 0 {
				delete(c.files, file)
			}
		}
		if crowded {
			c.crowded = now.Add(ownGraceAttested)
		}
		c.sweepAt = max(minSweep, 2*len(c.files))
	}
}

// others reports whether a session other than w's is changing the file
// p of w's export.
func (c *changers) others(w *watcher, p string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(c.crowded) {
		return true
	}
	for cw, o := range c.files[w.real(p)] {
		if cw != w && o.live(now, ownGraceAttested) {
			return true
		}
	}
	return false
}

// drop forgets w.
func (c *changers) drop(w *watcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for file, by := range c.files {
		delete(by, w)
		if len(by) == 0 {
			delete(c.files, file)
		}
	}
}

// intend records, before a request is run, the paths it may change, and
// returns them for end once it has run: the watcher takes their events as
// this session's own while it runs and for ownGrace after. (Recorded only
// after it, an event could be read first.) Reads change nothing the watch
// reports.
func (s *sftpServer) intend(pkt []byte) []string {
	first, ok := firstString(pkt)
	if !ok {
		return nil
	}
	next := func(after []byte, at int) ([]byte, int) {
		off := at + 4 + len(after)
		b, _ := stringAt(pkt, off)
		return b, off
	}
	// writes reports whether the pflags after string b at offset at open
	// for writing.
	writes := func(b []byte, at int) bool {
		off := at + 4 + len(b)
		return len(pkt) >= off+4 && binary.BigEndian.Uint32(pkt[off:])&(wire.FlagWrite|wire.FlagCreat|wire.FlagTrunc) != 0
	}
	var paths []string
	switch pkt[0] {
	case wire.Open:
		if writes(first, 5) {
			paths = []string{s.rel(string(first))}
		}
	case wire.Remove, wire.Rmdir, wire.Mkdir, wire.Setstat:
		paths = []string{s.rel(string(first))}
	case wire.Rename:
		second, _ := next(first, 5)
		paths = []string{s.rel(string(first)), s.rel(string(second))}
	case wire.Symlink:
		link, _ := next(first, 5) // the target first, then the link
		paths = []string{s.rel(string(link))}
	case wire.Write, wire.Fsetstat, wire.Close:
		s.mu.Lock()
		h := s.handles[string(first)]
		s.mu.Unlock()
		// The close of a handle that wrote nothing changes nothing.
		if h != nil && (pkt[0] != wire.Close || h.writeBytes.Load() > 0) {
			paths = []string{h.name}
		}
	case wire.Extended:
		a, at := next(first, 5)
		switch string(first) {
		case "posix-rename@openssh.com", "hardlink@openssh.com":
			b, _ := next(a, at)
			paths = []string{s.rel(string(a)), s.rel(string(b))}
		case wire.OpenRead:
			if writes(a, at) {
				paths = []string{s.rel(string(a))}
			}
		case wire.OpenNamed:
			if p, pat := next(a, at); writes(p, pat) { // the handle first, then the path
				paths = []string{s.rel(string(p))}
			}
		}
	}
	if paths != nil {
		s.ownBegin(paths)
	}
	return paths
}

// Before the first watch request there is no watcher, but the requests
// running then change the export too: the watch begins while they run,
// and their events, read after, would be reported back to the client as
// another's (a file the mount had just made was then forgotten, and got a
// new inode number under a program that had just stat'ed it). So they are
// recorded in early, which the watcher takes over when it begins.

// maxEarly bounds early; past it, what has ended is forgotten.
const maxEarly = 4096

// ownBegin records that a request is about to change paths.
func (s *sftpServer) ownBegin(paths []string) {
	s.earlyMu.Lock()
	if w := s.watch.Load(); w != nil {
		s.earlyMu.Unlock()
		w.begin(paths)
		return
	}
	if s.early == nil {
		s.early = map[string]*ownChange{}
	}
	if len(s.early) >= maxEarly {
		now := time.Now()
		for p, o := range s.early {
			if !o.live(now, ownGraceAttested) {
				delete(s.early, p)
			}
		}
	}
	for _, p := range paths {
		o := s.early[p]
		if o == nil {
			o = &ownChange{}
			s.early[p] = o
		}
		o.inflight++
	}
	s.earlyMu.Unlock()
}

// ownEnd records that a request changing paths has run.
func (s *sftpServer) ownEnd(paths []string) {
	s.earlyMu.Lock()
	if w := s.watch.Load(); w != nil {
		s.earlyMu.Unlock()
		w.end(paths)
		return
	}
	now := time.Now()
	for _, p := range paths {
		if o := s.early[p]; o != nil {
			o.inflight--
			o.ended = now
		}
	}
	s.earlyMu.Unlock()
}

// startWatch makes w the session's watcher, taking over what its requests
// changed before it.
func (s *sftpServer) startWatch(w *watcher) {
	s.earlyMu.Lock()
	defer s.earlyMu.Unlock()
	w.mu.Lock()
	var running []string
	for p, o := range s.early {
		w.own[p] = o
		for range o.inflight {
			running = append(running, p)
		}
	}
	w.mu.Unlock()
	if len(running) > 0 {
		sessions.begin(w, running)
	}
	s.early = nil
	s.watch.Store(w)
}
