package sshd

import (
	"errors"
	"io"
	"maps"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// poll: the portable source, for systems whose kernel watch awcp does not
// speak in full (macOS, FreeBSD). It reads each watched directory again
// every pollEvery and compares what it holds — each entry's inode, type,
// size, modification and change times — with what it held the time
// before. Where a dirTrigger tells it at once which directories' entries
// changed (kqueue), it compares those at once, and waits for the period
// only for what the trigger does not see: writes into files.
// What it cannot see: a change undone within one period, a write that
// leaves size and both times as they were (a file system whose clock
// ticks coarser than the writes); and it says nothing of who made a
// change. Its cost grows with the entries watched: each period lists every
// watched directory and stats every entry (maxPollEntries bound them).
type pollSource struct {
	every    time.Duration
	trig     dirTrigger // nil: the period alone
	stop     chan struct{}
	once     sync.Once
	trigOnce sync.Once
	due      time.Time // when every directory is compared next (read's own)

	mu      sync.Mutex
	dirs    map[string]*polledDir // by key: the directory's device and inode
	entries int                   // held in all dirs' snapshots
	reading bool                  // a read began and has not failed: it closes the trigger and the directories as it ends
	closed  bool
}

// dirTrigger tells the portable source which of its directories' entries
// changed — made, removed, renamed — as the kernel reports it (kqueue's
// EVFILT_VNODE on a directory: NOTE_WRITE, with no name).
type dirTrigger interface {
	// add watches the directory open at fd (the source's own descriptor,
	// open until remove) as key.
	add(fd int, key string) error
	remove(key string)
	// wait returns the keys of directories that changed, or none once
	// timeout passed or wake was called.
	wait(timeout time.Duration) ([]string, error)
	wake()
	close() error
}

// pollEvery is how often the portable source looks; a variable for the
// tests. maxPollEntries bounds the entries it keeps: more make its next
// read an overflow, and it watches no more directories.
var pollEvery = time.Second

const maxPollEntries = 1 << 18

// errPollFull refuses a directory past maxPollEntries.
var errPollFull = errors.New("the portable watch holds as many entries as it may")

type polledDir struct {
	f       *os.File // the directory itself, whatever it is named later
	entries map[string]polledEntry
}

type polledEntry struct {
	ino, size    uint64
	mtime, ctime int64 // nanoseconds
	isDir        bool
}

func newPollSource(every time.Duration, trig dirTrigger) *pollSource {
	return &pollSource{every: every, trig: trig, stop: make(chan struct{}), dirs: map[string]*polledDir{},
		due: time.Now().Add(every)}
}

func (p *pollSource) add(fd int, _ *unix.Statfs_t) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	key := strconv.FormatUint(uint64(st.Dev), 16) + ":" + strconv.FormatUint(uint64(st.Ino), 16)
	p.mu.Lock()
	_, known := p.dirs[key]
	p.mu.Unlock()
	if known {
		return key, nil
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return "", err
	}
	unix.CloseOnExec(dup)
	d := &polledDir{f: os.NewFile(uintptr(dup), "watched")}
	if d.entries, err = listEntries(dup); err != nil {
		d.f.Close()
		return "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, known := p.dirs[key]; known { // added meanwhile by another caller
		d.f.Close()
		return key, nil
	}
	if p.entries+len(d.entries) > maxPollEntries {
		d.f.Close()
		return "", errPollFull
	}
	if p.trig != nil {
		if err := p.trig.add(int(d.f.Fd()), key); err != nil {
			d.f.Close()
			return "", err
		}
	}
	p.dirs[key] = d
	p.entries += len(d.entries)
	return key, nil
}

func (p *pollSource) remove(key string) {
	p.mu.Lock()
	d := p.dirs[key]
	delete(p.dirs, key)
	if d != nil {
		p.entries -= len(d.entries)
		if p.trig != nil {
			p.trig.remove(key) // before its descriptor's number is free again
		}
	}
	p.mu.Unlock()
	if d != nil {
		d.f.Close()
	}
}

func (p *pollSource) attests() bool { return false }

func (p *pollSource) closeTrig() {
	p.trigOnce.Do(func() {
		if p.trig != nil {
			p.trig.close()
		}
	})
}

func (p *pollSource) close() error {
	p.once.Do(func() {
		close(p.stop)
		if p.trig != nil {
			p.trig.wake()
		}
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if !p.reading {
		// No reader waits on the trigger or lists a directory: they are
		// closed here. (A reader closes them as it ends, never while it
		// may wait on the one or read a descriptor of the others — whose
		// number, once closed, could be another file's.)
		p.closeTrig()
		p.closeDirs()
	}
	return nil
}

// closeDirs closes every watched directory; p.mu is held.
func (p *pollSource) closeDirs() {
	for key, d := range p.dirs {
		if p.trig != nil {
			p.trig.remove(key)
		}
		d.f.Close()
		delete(p.dirs, key)
	}
}

// read waits until the trigger names directories, or the period is out,
// then compares those directories (every one, at the period) with their
// last snapshots. No lock is held while it lists: a directory added
// meanwhile is compared next time; one removed meanwhile is skipped.
func (p *pollSource) read() (evs []event, err error) {
	defer func() {
		if err != nil {
			// read is not called again once it failed: the reader
			// ends, and what close left to it is closed here.
			p.closeTrig()
			p.mu.Lock()
			p.reading = false
			if p.closed {
				p.closeDirs()
			}
			p.mu.Unlock()
		}
	}()
	p.mu.Lock()
	p.reading = true
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, io.EOF
	}
	for {
		var named []string
		if p.trig == nil {
			select {
			case <-p.stop:
				return nil, io.EOF
			case <-time.After(time.Until(p.due)):
			}
		} else {
			keys, err := p.trig.wait(time.Until(p.due))
			select {
			case <-p.stop:
				return nil, io.EOF
			default:
			}
			if err != nil {
				return nil, err
			}
			named = keys
		}
		all := !time.Now().Before(p.due)
		if all {
			p.due = time.Now().Add(p.every)
		}
		p.mu.Lock()
		look := make(map[string]*polledDir, len(named))
		if all {
			maps.Copy(look, p.dirs)
		}
		for _, k := range named {
			if d, ok := p.dirs[k]; ok {
				look[k] = d
			}
		}
		p.mu.Unlock()
		for key, d := range look {
			evs = append(evs, p.compare(key, d)...)
		}
		if len(evs) > 0 {
			return evs, nil
		}
	}
}

// compare lists d again and says what differs from its snapshot, which it
// then replaces.
func (p *pollSource) compare(key string, d *polledDir) []event {
	fd := int(d.f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Nlink == 0 {
		p.remove(key)
		return []event{{dir: key, gone: true}}
	}
	now, err := listEntries(fd)
	if err != nil {
		return nil // unreadable this time: looked at again next time
	}
	var evs []event
	for name, e := range now {
		was, ok := d.entries[name]
		switch {
		case !ok && e.isDir:
			// A directory that appears may be one renamed here from
			// elsewhere in the export: the watcher keeps its watches.
			evs = append(evs, event{dir: key, name: name, isDir: true, movedTo: true})
		case !ok:
			evs = append(evs, event{dir: key, name: name, created: true})
		case was.ino != e.ino && (was.isDir || e.isDir):
			evs = append(evs, event{dir: key, name: name, isDir: true, movedFrom: was.isDir},
				event{dir: key, name: name, isDir: e.isDir, movedTo: e.isDir, created: !e.isDir})
		case was != e:
			evs = append(evs, event{dir: key, name: name, isDir: e.isDir})
		}
	}
	for name, was := range d.entries {
		if _, ok := now[name]; !ok {
			// Gone: removed, or moved away (a directory's watches follow
			// it where it reappears in the export).
			evs = append(evs, event{dir: key, name: name, isDir: was.isDir, movedFrom: was.isDir})
		}
	}
	p.mu.Lock()
	if cur, ok := p.dirs[key]; ok && cur == d {
		p.entries += len(now) - len(d.entries)
		d.entries = now
	}
	p.mu.Unlock()
	return evs
}

// listEntries is what the directory open at fd holds, each entry stat'ed
// without following it.
func listEntries(fd int) (map[string]polledEntry, error) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	dir := os.NewFile(uintptr(dfd), ".")
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make(map[string]polledEntry, len(names))
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // gone since the listing: the next one says so
		}
		out[name] = polledEntry{ino: uint64(st.Ino), size: uint64(st.Size), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
			isDir: st.Mode&unix.S_IFMT == unix.S_IFDIR}
	}
	return out, nil
}
