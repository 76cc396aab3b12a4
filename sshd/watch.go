package sshd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// The watch (wire.Watch, docs/sftp-extensions.md): the server watches the
// export with inotify and tells the client which paths changed, other
// than by this session's own requests, so that the client's caches need
// not wait for their timeouts to see them. A full event queue, or more
// directories than maxWatchDirs, make the answer "overflow": drop
// everything; so is the first answer, for what the client read before the
// watch began. A directory renamed inside the export keeps its watches,
// under its new name.

// maxWatchDirs is how many directories one session watches at most; an
// export with more is not watched (the client keeps its timeouts).
const maxWatchDirs = 8192

// ownGrace is how long after this session's last request on a path ended
// an event for it is still taken as the session's own: the watcher reads
// the events the request made a moment after it. (An event it reads later
// is reported back to the client: a needless invalidation, no harm. An
// owner's change made within it goes unreported, and is seen when the
// client's cache timeout runs out.)
const ownGrace = 100 * time.Millisecond

// ownChange is a path this session is changing: its requests in flight,
// and when the last one ended.
type ownChange struct {
	inflight int
	ended    time.Time
}

// maxWatchPaths is the most paths one answer carries; more make it an
// overflow.
const maxWatchPaths = 512

type watcher struct {
	f      *os.File // the inotify instance, non-blocking: Close ends its reader
	fd     int      // f's descriptor, for the watch calls (f.Fd would make it blocking)
	root   *os.Root
	hidden func(string) bool // never named, nor watched below

	mu       sync.Mutex
	wds      map[int32]string      // watch → directory, relative to the root ("." for it)
	pending  map[string]struct{}   // changed paths not yet answered
	overflow bool                  // pending is not enough: drop everything
	own      map[string]*ownChange // paths this session changes or just changed
	ready    chan struct{}         // closed (and replaced) when something is pending
	asked    bool                  // a watch request is waiting

	done chan struct{} // closed when the reader has ended
}

// localFS are the file systems whose changes inotify sees whoever makes
// them. On a network file system (NFS, SMB) or a FUSE one, inotify sees
// only this machine's own changes: a client told "nothing changed" would
// keep stale caches, so such an export is not watched.
var localFS = map[int64]bool{
	0xEF53:     true, // ext2, ext3, ext4
	0x58465342: true, // xfs
	0x9123683E: true, // btrfs
	0x01021994: true, // tmpfs
	0x2FC12FC1: true, // zfs
	0xF2F52010: true, // f2fs
	0x794C7630: true, // overlayfs
}

// newWatcher watches every directory under root; nil if it cannot (no
// inotify, a file system whose changes it would not all see, too many
// directories).
func newWatcher(root *os.Root, hidden func(string) bool) *watcher {
	top, err := root.Open(".")
	if err != nil {
		return nil
	}
	var st unix.Statfs_t
	err = unix.Fstatfs(int(top.Fd()), &st)
	top.Close()
	if err != nil || !localFS[int64(st.Type)] {
		return nil
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, root: root, hidden: hidden, wds: map[int32]string{},
		pending: map[string]struct{}{}, own: map[string]*ownChange{}, ready: make(chan struct{}), done: make(chan struct{})}
	if !w.addTree(".") {
		w.f.Close()
		return nil
	}
	// What the client read before the watch began may have changed
	// meanwhile, unreported: its first answer says drop everything.
	w.overflow = true
	go w.read()
	return w
}

const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_MODIFY |
	unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// addTree watches dir and every directory below it, opened through the
// root (so never outside it); false if there are too many.
func (w *watcher) addTree(dir string) bool {
	queue := []string{dir}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		f, err := w.root.Open(d)
		if err != nil {
			continue // gone meanwhile, or not a directory
		}
		// The descriptor's magic link names exactly the directory the
		// root resolved.
		wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), watchMask)
		if err != nil {
			f.Close()
			continue
		}
		w.mu.Lock()
		w.wds[int32(wd)] = d
		n := len(w.wds)
		w.mu.Unlock()
		if n > maxWatchDirs {
			f.Close()
			return false
		}
		// A page of entries at a time: only the directories are kept.
		for {
			ents, err := f.ReadDir(1024)
			for _, e := range ents {
				if e.IsDir() && !w.hidden(path.Join(d, e.Name())) {
					queue = append(queue, path.Join(d, e.Name()))
				}
			}
			if err != nil || len(queue) > maxWatchDirs {
				break
			}
		}
		f.Close()
	}
	return true
}

// read turns inotify's events into pending paths until the instance is
// closed.
func (w *watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		var grow []string            // new directories to watch
		moved := map[uint32]string{} // directories moved away in this batch, by cookie
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			cookie := binary.NativeEndian.Uint32(buf[off+8:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			if off+unix.SizeofInotifyEvent+nameLen > n {
				break
			}
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+nameLen], "\x00"))
			off += unix.SizeofInotifyEvent + nameLen
			dir, known := w.wds[wd]
			switch {
			case mask&unix.IN_Q_OVERFLOW != 0:
				w.overflow = true
			case mask&unix.IN_IGNORED != 0:
				delete(w.wds, wd)
			case !known, mask&unix.IN_MOVE_SELF != 0:
				// A directory's own move is told by its parent.
			case mask&unix.IN_ISDIR != 0 && mask&unix.IN_MOVED_FROM != 0:
				from := path.Join(dir, name)
				moved[cookie] = from
				w.changed(from)
			case mask&unix.IN_ISDIR != 0 && mask&unix.IN_MOVED_TO != 0:
				to := path.Join(dir, name)
				w.changed(to)
				if from, ok := moved[cookie]; ok {
					// Moved inside the export: its watches go on, under
					// the new name.
					w.rename(from, to)
					delete(moved, cookie)
				} else {
					grow = append(grow, to) // moved in from outside
				}
			case name == "":
				w.changed(dir)
			default:
				p := path.Join(dir, name)
				w.changed(p)
				if mask&unix.IN_ISDIR != 0 && mask&unix.IN_CREATE != 0 {
					grow = append(grow, p)
				}
			}
		}
		for _, from := range moved {
			w.forget(from) // moved out of the export: no longer watched
		}
		w.signal()
		w.mu.Unlock()
		for _, d := range grow {
			if !w.addTree(d) {
				w.mu.Lock()
				w.overflow = true
				w.signal()
				w.mu.Unlock()
			}
		}
	}
}

// rename moves the watches of directory from and below it to the name
// to. w.mu is held.
func (w *watcher) rename(from, to string) {
	for wd, d := range w.wds {
		if d == from {
			w.wds[wd] = to
		} else if rest, ok := strings.CutPrefix(d, from+"/"); ok {
			w.wds[wd] = path.Join(to, rest)
		}
	}
}

// forget ends the watches of directory dir and below it. w.mu is held.
func (w *watcher) forget(dir string) {
	for wd, d := range w.wds {
		if d == dir || strings.HasPrefix(d, dir+"/") {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.wds, wd)
		}
	}
}

// changed records p as changed, unless this session changed it just now.
// w.mu is held.
func (w *watcher) changed(p string) {
	if w.hidden(p) {
		return
	}
	if o := w.own[p]; o != nil && (o.inflight > 0 || time.Since(o.ended) < ownGrace) {
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
	if len(w.own) > 4096 {
		for p, o := range w.own {
			if o.inflight == 0 && now.Sub(o.ended) >= ownGrace {
				delete(w.own, p)
			}
		}
	}
	w.mu.Unlock()
}

// errWatchBusy refuses a second watch request while one waits.
var errWatchBusy = errors.New("a watch request is already waiting")

// next waits until something is pending, or stop is closed, and takes it.
func (w *watcher) next(stop <-chan struct{}) (paths []string, overflow bool, err error) {
	w.mu.Lock()
	if w.asked {
		w.mu.Unlock()
		return nil, false, errWatchBusy
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
			return nil, false, errStalled
		}
		w.mu.Lock()
	}
	for p := range w.pending {
		paths = append(paths, p)
	}
	overflow = w.overflow
	w.pending, w.overflow, w.asked = map[string]struct{}{}, false, false
	w.mu.Unlock()
	return paths, overflow, nil
}

// close ends the watch and waits for its reader.
func (w *watcher) close() {
	w.f.Close()
	<-w.done
}

// serveWatch answers a watch request once something changed: an
// EXTENDED_REPLY with a byte (1: overflow, drop everything), a uint32
// count and the changed paths, relative to the export. Hidden paths are
// never named. The export is watched from the first request on.
func (s *sftpServer) serveWatch(id uint32, stop <-chan struct{}) {
	s.watchOnce.Do(func() {
		if w := newWatcher(s.root, s.hidden); w != nil {
			s.watch.Store(w)
		}
	})
	w := s.watch.Load()
	if w == nil {
		s.status(id, wire.OpUnsupported, "this export cannot be watched")
		return
	}
	paths, overflow, err := w.next(stop)
	if errors.Is(err, errStalled) {
		return // the session ends
	}
	if err != nil {
		s.status(id, wire.Failure, err.Error())
		return
	}
	b := newBuf()
	b.Byte(wire.ExtendedReply)
	b.U32(id)
	if overflow {
		b.Byte(1)
		paths = nil
	} else {
		b.Byte(0)
	}
	b.U32(uint32(len(paths)))
	for _, p := range paths {
		b.Str(p)
	}
	s.send(b)
}

// intend records, before a request is run, the paths it may change, and
// returns them for end once it has run: the watcher takes their events as
// this session's own while it runs and for ownGrace after. (Recorded only
// after it, an event could be read first.) Reads change nothing the watch
// reports.
func (s *sftpServer) intend(pkt []byte) []string {
	w := s.watch.Load()
	if w == nil {
		return nil
	}
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
		w.begin(paths)
	}
	return paths
}
