package sshd

import (
	"errors"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/treewalk"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// The watch (wire.Watch, docs/sftp-extensions.md): the server watches the
// export and tells the client which paths changed, other than by this
// session's own requests, so that the client's caches need not wait for
// their timeouts to see them. A full event queue, or more directories than
// maxWatchDirs, make the answer "overflow": drop everything; so is the
// first answer, for what the client read before the watch began. A
// directory renamed inside the export keeps its watches, under its new
// name.
//
// The watch is exact (wire.WatchExact) where the kernel says which process
// made each change (fanotify): a change by any other process is always
// reported, whenever it came. With inotify, which does not say, a change to
// a path this session is changing (its request runs, or ended within
// ownGrace) is taken as the session's own: another's change in that window
// goes unreported, and the client must keep its timeouts.

// maxWatchDirs is how many directories one session watches at most with
// a mark (or inotify watch) each; an export with more is not watched (the
// client keeps its timeouts). Where one fanotify mark covers the export's
// whole file system (a delegator run as root), the bound is
// maxWatchDirsWhole: only the directories' keys and names are kept, about
// 128 bytes each (16 MiB a session at most: BenchmarkWatchDirsHeld).
const maxWatchDirs = 8192

var maxWatchDirsWhole = 1 << 17 // a variable for the tests

// ownGrace is how long after this session's last request on a path ended
// an event for it is still taken as the session's own: the watcher reads
// the events the request made a moment after it, or later under load. (An
// event it reads later is reported back to the client: a needless
// invalidation, after which the kernel may give the file a new inode
// number.) Where the source cannot say who made a change, an owner's
// change within it goes unreported, so it is short; where it can, it only
// sorts this process's own changes among its sessions, and is long.
const (
	ownGrace         = 100 * time.Millisecond
	ownGraceAttested = 10 * time.Second
)

// ownChange is a path this session is changing: its requests in flight,
// and when the last one ended.
type ownChange struct {
	inflight int
	ended    time.Time
}

func (o *ownChange) live(now time.Time, grace time.Duration) bool {
	return o.inflight > 0 || now.Sub(o.ended) < grace
}

// The maps of paths being changed (watcher.own, changers) are swept of
// what ended when they have doubled since the last sweep, from minSweep
// entries on, and cut back past maxOwn.
const (
	minSweep = 4096
	maxOwn   = 1 << 16
)

// maxWatchPaths is the most paths one answer carries; more make it an
// overflow.
const maxWatchPaths = 512

// source is what tells the watcher of changes: fanotify, or inotify where
// fanotify cannot watch the export.
type source interface {
	// add watches the directory open at fd, whose file system st describes; the
	// key it returns names it in events (the same key for the same
	// directory, whatever its name).
	add(fd int, st *unix.Statfs_t) (key string, err error)
	// remove ends the watch named key, where the source can.
	remove(key string)
	// read waits for events; it fails once the source is closed.
	read() ([]event, error)
	// attests reports whether events say whether this process made them.
	attests() bool
	close() error
}

// event is a change a source reports in a directory it watches.
type event struct {
	dir                         string // the directory's key
	name                        string // the entry changed in it; "" for the directory itself
	isDir                       bool   // the entry is a directory
	created, movedFrom, movedTo bool
	gone                        bool // the directory itself was removed: its watch has ended
	others                      bool // made by another process (attests only)
	overflow                    bool // the source lost events
}

type watcher struct {
	src      source
	root     *os.Root
	hidden   func(string) bool // never named, nor watched below
	grace    time.Duration     // ownGrace, or ownGraceAttested
	realRoot string            // the kernel's path of the export's directory
	attested bool              // the source attests who made each change
	maxDirs  int               // maxWatchDirs, or maxWatchDirsWhole

	// dirs names the watched directories: key → path relative to the
	// root ("." for it). Held only for the map, never across a call to
	// the kernel.
	dirsMu sync.Mutex
	dirs   map[string]string

	mu       sync.Mutex
	pending  map[string]struct{}   // changed paths not yet answered
	overflow bool                  // pending is not enough: drop everything
	exact    bool                  // every change by others is reported (wire.WatchExact)
	own      map[string]*ownChange // paths this session changes or just changed
	sweepAt  int                   // own's size at which it is swept next
	ready    chan struct{}         // closed (and replaced) when something is pending
	asked    bool                  // a watch request is waiting

	done chan struct{} // closed when the reader has ended
}

// errNotLocal refuses to watch a directory of a file system whose
// changes the watch would not all see (localFS).
var errNotLocal = errors.New("not a local file system")

// preferFanotify is false only where a test tries the inotify source,
// and preferWholeFS where one tries fanotify's marks one per directory.
var preferFanotify, preferWholeFS = true, true

// newWatcher watches every directory under root; nil if it cannot (no
// fanotify nor inotify, a file system whose changes they would not all
// see, too many directories).
func newWatcher(root *os.Root, hidden func(string) bool) *watcher {
	top, err := root.Open(".")
	if err != nil {
		return nil
	}
	var st unix.Statfs_t
	err = unix.Fstatfs(int(top.Fd()), &st)
	if err != nil || !localFS(&st) {
		top.Close()
		return nil
	}
	src, maxDirs, err := openSource(top, &st)
	realRoot, _ := fdPathOf(int(top.Fd()))
	top.Close()
	if err != nil {
		return nil
	}
	return watchWith(src, maxDirs, root, realRoot, hidden)
}

// watchWith watches every directory under root, at the kernel's path
// realRoot, with src; nil if there are too many.
func watchWith(src source, maxDirs int, root *os.Root, realRoot string, hidden func(string) bool) *watcher {
	w := &watcher{src: src, root: root, hidden: hidden, dirs: map[string]string{},
		pending: map[string]struct{}{}, own: map[string]*ownChange{}, ready: make(chan struct{}), done: make(chan struct{})}
	w.grace, w.attested, w.realRoot, w.maxDirs = ownGrace, src.attests(), realRoot, maxDirs
	if w.attested {
		w.grace = ownGraceAttested
	}
	if p, ok := src.(*pollSource); ok {
		// It sees a change up to a period after it was made.
		w.grace += p.every
	}
	complete, ok := w.addTree(".")
	if !ok {
		src.close()
		return nil
	}
	w.exact = w.attested && complete
	// What the client read before the watch began may have changed
	// meanwhile, unreported: its first answer says drop everything.
	w.overflow = true
	go w.read()
	return w
}

// real is the kernel's path of p, relative to the export.
func (w *watcher) real(p string) string { return path.Join(w.realRoot, p) }

// addTree watches dir and every directory below it, opened beneath the
// root (so never outside it) and read side by side (treewalk). complete
// is false if a directory could not be watched; ok, if there were too
// many.
func (w *watcher) addTree(dir string) (complete, ok bool) {
	top, err := w.root.Open(".")
	if err != nil {
		return false, true
	}
	defer top.Close()
	var failed, tooMany atomic.Bool
	var queued atomic.Int64 // directories found, watched or to be: bounded as the watch is
	err = treewalk.WalkAt(int(top.Fd()), w.realRoot, dir, func(d string, fd int, ents []os.DirEntry) ([]string, error) {
		// Once per page of d's entries (a page is 1,024 names):
		// watching d again costs two system calls and changes nothing.
		if err := w.addDir(fd, d); err != nil {
			// A directory not watched is a directory whose changes go
			// unreported.
			failed.Store(true)
			return nil, nil
		}
		var sub []string
		for _, e := range ents {
			if e.IsDir() && !w.hidden(path.Join(d, e.Name())) {
				sub = append(sub, path.Join(d, e.Name()))
			}
		}
		w.dirsMu.Lock()
		n := len(w.dirs)
		w.dirsMu.Unlock()
		if n > w.maxDirs || queued.Add(int64(len(sub))) > int64(w.maxDirs) {
			tooMany.Store(true)
			return nil, treewalk.SkipAll
		}
		return sub, nil
	})
	if tooMany.Load() {
		return false, false
	}
	if err != nil { // a directory unreadable: the walk stopped, what is below it unwatched
		return false, true
	}
	return !failed.Load(), true
}

// addDir watches the directory d, open at fd, unless it is of a file
// system whose changes the watch would not all see.
func (w *watcher) addDir(fd int, d string) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return err
	}
	if !localFS(&st) {
		return errNotLocal
	}
	key, err := w.src.add(fd, &st)
	if err != nil {
		return err
	}
	w.dirsMu.Lock()
	w.dirs[key] = d
	w.dirsMu.Unlock()
	return nil
}

// made watches the directory d this session has just made, before its
// request is answered: the client may cache what it holds from the
// answer on, so an owner's change in it must be seen from then on too.
func (w *watcher) made(d string) {
	f, err := w.root.Open(d)
	if err != nil {
		return // gone already: its removal is an event
	}
	defer f.Close()
	if err := w.addDir(int(f.Fd()), d); err != nil {
		w.lose()
	}
}

// lose records that the watch no longer sees every change: the client
// drops everything, and keeps its timeouts from now on.
func (w *watcher) lose() {
	w.mu.Lock()
	w.exact, w.overflow = false, true
	w.signal()
	w.mu.Unlock()
}

// read turns the source's events into pending paths until it is closed.
func (w *watcher) read() {
	defer close(w.done)
	for {
		evs, err := w.src.read()
		if err != nil {
			return
		}
		var (
			changed  []changedPath
			grow     []string // new directories to watch, then report
			overflow bool
		)
		moved := map[string]bool{} // directories moved away in this batch
		for _, e := range evs {
			if e.overflow {
				overflow = true
				continue
			}
			w.dirsMu.Lock()
			dir, known := w.dirs[e.dir]
			if known && e.gone {
				delete(w.dirs, e.dir)
			}
			w.dirsMu.Unlock()
			if !known {
				continue
			}
			p := path.Join(dir, e.name)
			changed = append(changed, changedPath{p, e.others})
			switch {
			case !e.isDir || e.name == "":
			case e.movedFrom:
				moved[p] = true
			case e.movedTo:
				// Moved inside the export, it is a directory watched
				// already, under its old name: its watches go on under
				// the new one. Else it came from outside.
				if from, ok := w.watchedAs(p); ok && from != p {
					w.rename(from, p)
					delete(moved, from)
				} else if !ok {
					grow = append(grow, p)
				}
			case e.created:
				grow = append(grow, p)
			}
		}
		for from := range moved {
			w.forget(from) // moved out of the export: no longer watched
		}
		// New directories are watched before anything is reported: a
		// client told of one may cache what it holds at once, and what
		// was made in it before the watch began is covered by its being
		// named (the client drops a named directory with all below it).
		// One this session made was watched before its mkdir was
		// answered (made), and is not named to it.
		for _, d := range grow {
			complete, ok := w.addTree(d)
			if !ok || !complete {
				w.lose()
			}
		}
		now := time.Now()
		w.mu.Lock()
		if overflow {
			w.overflow = true
		}
		for _, c := range changed {
			w.changed(c.path, c.others, now)
		}
		w.signal()
		w.mu.Unlock()
	}
}

// changedPath is a path an event named, and whether another process made
// the change.
type changedPath struct {
	path   string
	others bool
}

// watchedAs opens p and reports under which name its directory is
// watched, if it is.
func (w *watcher) watchedAs(p string) (string, bool) {
	f, err := w.root.Open(p)
	if err != nil {
		return "", false
	}
	var st unix.Statfs_t
	err = unix.Fstatfs(int(f.Fd()), &st)
	var key string
	if err == nil {
		key, err = w.src.add(int(f.Fd()), &st) // the same key if watched already
	}
	f.Close()
	if err != nil {
		return "", false
	}
	w.dirsMu.Lock()
	defer w.dirsMu.Unlock()
	from, ok := w.dirs[key]
	return from, ok
}

// rename moves the watches of directory from and below it to the name to.
func (w *watcher) rename(from, to string) {
	w.dirsMu.Lock()
	defer w.dirsMu.Unlock()
	for key, d := range w.dirs {
		if d == from {
			w.dirs[key] = to
		} else if rest, ok := strings.CutPrefix(d, from+"/"); ok {
			w.dirs[key] = path.Join(to, rest)
		}
	}
}

// forget ends the watches of directory dir and below it.
func (w *watcher) forget(dir string) {
	var keys []string
	w.dirsMu.Lock()
	for key, d := range w.dirs {
		if d == dir || strings.HasPrefix(d, dir+"/") {
			keys = append(keys, key)
			delete(w.dirs, key)
		}
	}
	w.dirsMu.Unlock()
	for _, key := range keys {
		w.src.remove(key)
	}
}

// changed records p as changed, unless this session changed it just now:
// a change by another process (others) never is. w.mu is held.
func (w *watcher) changed(p string, others bool, now time.Time) {
	if w.hidden(p) {
		return
	}
	if o := w.own[p]; !others && o != nil && o.live(now, w.grace) && !(w.attested && sessions.others(w, p, now)) {
		return
	}
	if len(w.pending) >= maxWatchPaths {
		w.overflow = true
		return
	}
	w.pending[p] = struct{}{}
}

// signal wakes the waiting request if anything is pending. w.mu is held.
func (w *watcher) signal() {
	if len(w.pending) > 0 || w.overflow {
		close(w.ready)
		w.ready = make(chan struct{})
	}
}

// errWatchBusy refuses a second watch request while one waits.
var errWatchBusy = errors.New("a watch request is already waiting")

// next waits until something is pending, or stop is closed, and takes it.
func (w *watcher) next(stop <-chan struct{}) (paths []string, overflow, exact bool, err error) {
	w.mu.Lock()
	if w.asked {
		w.mu.Unlock()
		return nil, false, false, errWatchBusy
	}
	w.asked = true
	for len(w.pending) == 0 && !w.overflow {
		ready := w.ready
		w.mu.Unlock()
		select {
		case <-ready:
		case <-stop:
			w.mu.Lock()
			w.asked = false
			w.mu.Unlock()
			return nil, false, false, errStalled
		}
		w.mu.Lock()
	}
	for p := range w.pending {
		paths = append(paths, p)
	}
	overflow, exact = w.overflow, w.exact
	w.pending, w.overflow, w.asked = map[string]struct{}{}, false, false
	w.mu.Unlock()
	return paths, overflow, exact, nil
}

// close ends the watch and waits for its reader.
func (w *watcher) close() {
	w.src.close()
	<-w.done
	sessions.drop(w)
}

// serveWatch answers a watch request once something changed: an
// EXTENDED_REPLY with a byte of flags (wire.WatchOverflow, WatchExact), a
// uint32 count and the changed paths, relative to the export. Hidden paths are
// never named. The export is watched from the first request on.
func (s *sftpServer) serveWatch(id uint32, stop <-chan struct{}, free func()) {
	defer free() // idempotent: also where no answer goes
	s.watchOnce.Do(func() {
		if w := newWatcher(s.root, s.hidden); w != nil {
			s.startWatch(w)
		}
	})
	w := s.watch.Load()
	if w == nil {
		free()
		s.status(id, wire.OpUnsupported, "this export cannot be watched")
		return
	}
	paths, overflow, exact, err := w.next(stop)
	if errors.Is(err, errStalled) {
		return // the session ends
	}
	if err != nil {
		free()
		s.status(id, wire.Failure, err.Error())
		return
	}
	b := newBuf()
	b.Byte(wire.ExtendedReply)
	b.U32(id)
	var flags byte
	if overflow {
		flags |= wire.WatchOverflow
		paths = nil
	}
	if exact {
		flags |= wire.WatchExact
	}
	b.Byte(flags)
	b.U32(uint32(len(paths)))
	for _, p := range paths {
		b.Str(p)
	}
	free()
	s.send(b)
}
