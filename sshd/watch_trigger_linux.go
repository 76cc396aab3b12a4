package sshd

import (
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotifyDirTrigger is kqueue's directory trigger (kqueueTrigger) as
// Linux can show it, for the tests and the portable build: inotify on each directory for what kqueue's NOTE_WRITE,
// NOTE_DELETE and NOTE_RENAME report — an entry made, removed or renamed,
// the directory itself removed or moved — and, as kqueue, it says which
// directory, never which entry, nor a write into a file.
type inotifyDirTrigger struct {
	fd, wakeFd int

	mu   sync.Mutex
	keys map[int32]string // by watch descriptor
}

func newInotifyDirTrigger() (dirTrigger, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &inotifyDirTrigger{fd: fd, wakeFd: wake, keys: map[int32]string{}}, nil
}

func (t *inotifyDirTrigger) add(fd int, key string) error {
	wd, err := unix.InotifyAddWatch(t.fd, "/proc/self/fd/"+strconv.Itoa(fd),
		unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_ONLYDIR)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.keys[int32(wd)] = key
	t.mu.Unlock()
	return nil
}

func (t *inotifyDirTrigger) remove(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for wd, k := range t.keys {
		if k == key {
			delete(t.keys, wd)
			unix.InotifyRmWatch(t.fd, uint32(wd))
		}
	}
}

func (t *inotifyDirTrigger) wait(timeout time.Duration) ([]string, error) {
	fds := []unix.PollFd{{Fd: int32(t.fd), Events: unix.POLLIN}, {Fd: int32(t.wakeFd), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, int(max(timeout, 0)/time.Millisecond)); err != nil && err != unix.EINTR {
		return nil, err
	}
	var buf [16 << 10]byte
	n, err := unix.Read(t.fd, buf[:])
	if err == unix.EAGAIN {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	t.mu.Lock()
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		if k, ok := t.keys[ev.Wd]; ok && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	t.mu.Unlock()
	return keys, nil
}

func (t *inotifyDirTrigger) wake() {
	unix.Write(t.wakeFd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
}

func (t *inotifyDirTrigger) close() error {
	unix.Close(t.wakeFd)
	return unix.Close(t.fd)
}
