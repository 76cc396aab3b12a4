//go:build darwin || freebsd

package sshd

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// kqueueTrigger is the portable source's trigger on macOS and FreeBSD:
// kqueue's EVFILT_VNODE on each watched directory says at once that its
// entries changed (NOTE_WRITE: made, removed, renamed in or out), or that
// it was itself removed or renamed — never which entry, so the source
// lists it again to find out. A write into a file changes no directory
// and raises nothing here: the source's period finds it. One descriptor a
// directory, the source's own (kqueue drops a registration when its
// descriptor closes). FSEvents would name files too, but only through
// CoreServices, which a program built without cgo cannot call.
type kqueueTrigger struct {
	kq int

	mu   sync.Mutex
	keys map[uint64]string // by descriptor
}

// wakeIdent names the user event close raises to end a wait.
const wakeIdent = 1

func newDirTrigger() (dirTrigger, error) {
	kq, err := unix.Kqueue()
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(kq)
	var ev unix.Kevent_t
	unix.SetKevent(&ev, wakeIdent, unix.EVFILT_USER, unix.EV_ADD|unix.EV_CLEAR)
	if _, err := unix.Kevent(kq, []unix.Kevent_t{ev}, nil, nil); err != nil {
		unix.Close(kq)
		return nil, err
	}
	return &kqueueTrigger{kq: kq, keys: map[uint64]string{}}, nil
}

func (k *kqueueTrigger) add(fd int, key string) error {
	var ev unix.Kevent_t
	unix.SetKevent(&ev, fd, unix.EVFILT_VNODE, unix.EV_ADD|unix.EV_CLEAR|unix.EV_ENABLE)
	ev.Fflags = unix.NOTE_WRITE | unix.NOTE_DELETE | unix.NOTE_RENAME | unix.NOTE_REVOKE | unix.NOTE_LINK
	k.mu.Lock()
	k.keys[uint64(fd)] = key
	k.mu.Unlock()
	if _, err := unix.Kevent(k.kq, []unix.Kevent_t{ev}, nil, nil); err != nil {
		k.mu.Lock()
		delete(k.keys, uint64(fd))
		k.mu.Unlock()
		return err
	}
	return nil
}

func (k *kqueueTrigger) remove(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for fd, kk := range k.keys {
		if kk == key {
			delete(k.keys, fd)
		}
	}
}

func (k *kqueueTrigger) wait(timeout time.Duration) ([]string, error) {
	if timeout < 0 {
		timeout = 0
	}
	ts := unix.NsecToTimespec(timeout.Nanoseconds())
	var evs [64]unix.Kevent_t
	n, err := unix.Kevent(k.kq, nil, evs[:], &ts)
	if err == unix.EINTR {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	k.mu.Lock()
	for _, ev := range evs[:n] {
		if ev.Filter != unix.EVFILT_VNODE {
			continue // the wake
		}
		if key, ok := k.keys[ev.Ident]; ok {
			keys = append(keys, key)
		}
	}
	k.mu.Unlock()
	return keys, nil
}

func (k *kqueueTrigger) wake() {
	var ev unix.Kevent_t
	unix.SetKevent(&ev, wakeIdent, unix.EVFILT_USER, 0)
	ev.Fflags = unix.NOTE_TRIGGER
	unix.Kevent(k.kq, []unix.Kevent_t{ev}, nil, nil)
}

func (k *kqueueTrigger) close() error { return unix.Close(k.kq) }
