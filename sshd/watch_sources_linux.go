package sshd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/portable"
)

// Both sources read their descriptor through a non-blocking os.File, so
// that Close ends a read under way (os.File.Fd would make it blocking:
// the raw descriptor is kept for the other calls).

// inotify: watches by descriptor number; says nothing of who made a change.
type inotify struct {
	f  *os.File
	fd int
}

func newInotify() (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &inotify{f: os.NewFile(uintptr(fd), "inotify"), fd: fd}, nil
}

const inotifyMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_MODIFY |
	unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

func (in *inotify) add(fd int, _ *unix.Statfs_t) (string, error) {
	// The descriptor's magic link names exactly the directory the root
	// resolved. A directory watched already gets its watch back.
	wd, err := unix.InotifyAddWatch(in.fd, "/proc/self/fd/"+strconv.Itoa(fd), inotifyMask)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(wd), nil
}

func (in *inotify) remove(key string) {
	if wd, err := strconv.Atoi(key); err == nil {
		unix.InotifyRmWatch(in.fd, uint32(wd))
	}
}

func (in *inotify) attests() bool { return false }

func (in *inotify) close() error { return in.f.Close() }

func (in *inotify) read() ([]event, error) {
	buf := make([]byte, 64<<10)
	n, err := in.f.Read(buf)
	if err != nil {
		return nil, err
	}
	var evs []event
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		wd := int32(binary.NativeEndian.Uint32(buf[off:]))
		mask := binary.NativeEndian.Uint32(buf[off+4:])
		nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
		if off+unix.SizeofInotifyEvent+nameLen > n {
			break
		}
		name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+nameLen], "\x00"))
		off += unix.SizeofInotifyEvent + nameLen
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			evs = append(evs, event{overflow: true})
		case mask&unix.IN_IGNORED != 0:
			evs = append(evs, event{dir: strconv.Itoa(int(wd)), gone: true})
		case mask&unix.IN_MOVE_SELF != 0:
			// A directory's own move is told by its parent.
		default:
			evs = append(evs, event{dir: strconv.Itoa(int(wd)), name: name, isDir: mask&unix.IN_ISDIR != 0,
				created: mask&unix.IN_CREATE != 0, movedFrom: mask&unix.IN_MOVED_FROM != 0,
				movedTo: mask&unix.IN_MOVED_TO != 0})
		}
	}
	return evs, nil
}

// fanotify: marks each directory, names it by its file handle, and says
// which process made each change (the pid of any other process is 0 to
// an unprivileged listener, which is all that is asked). Unprivileged
// since Linux 5.13.
type fanotify struct {
	f      *os.File
	fd     int
	self   int32
	mu     sync.Mutex          // marked is added to by the watcher's reader and by a session's mkdir (made)
	marked map[string]struct{} // the keys of the directories marked, removed or not: a mark outlives its name here
	// wholeFS is the file system (its id) one mark covers whole
	// (markFilesystem): its directories need no mark of their own, and
	// their number no bound. Zero: none.
	wholeFS unix.Fsid
}

// maxFanotifyMarks bounds the marks of one watch, those of directories
// moved out included (they cannot be reached to be removed).
const maxFanotifyMarks = 2 * maxWatchDirs

var errTooManyMarks = errors.New("too many directories marked")

func newFanotify() (*fanotify, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_REPORT_DFID_NAME,
		unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &fanotify{f: os.NewFile(uintptr(fd), "fanotify"), fd: fd, self: int32(os.Getpid()), marked: map[string]struct{}{}}, nil
}

const fanotifyMask = unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO |
	unix.FAN_MODIFY | unix.FAN_ATTRIB | unix.FAN_CLOSE_WRITE | unix.FAN_DELETE_SELF |
	unix.FAN_ONDIR | unix.FAN_EVENT_ON_CHILD

func (fa *fanotify) add(fd int, st *unix.Statfs_t) (string, error) {
	// The key is what events carry: the file system's id, then the file
	// handle's type and bytes.
	h, _, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		return "", err
	}
	b := binary.NativeEndian.AppendUint32(nil, uint32(st.Fsid.Val[0]))
	b = binary.NativeEndian.AppendUint32(b, uint32(st.Fsid.Val[1]))
	b = binary.NativeEndian.AppendUint32(b, uint32(h.Type()))
	key := string(append(b, h.Bytes()...))
	fa.mu.Lock()
	_, known := fa.marked[key]
	n := len(fa.marked)
	whole := fa.wholeFS != (unix.Fsid{}) && fa.wholeFS == st.Fsid
	fa.mu.Unlock()
	if known || whole {
		return key, nil
	}
	if n >= maxFanotifyMarks {
		return "", errTooManyMarks
	}
	if err := unix.FanotifyMark(fa.fd, unix.FAN_MARK_ADD|unix.FAN_MARK_ONLYDIR, fanotifyMask, fd, ""); err != nil {
		return "", err
	}
	fa.mu.Lock()
	fa.marked[key] = struct{}{}
	fa.mu.Unlock()
	return key, nil
}

// markFilesystem marks the whole file system of f, the export's root, in
// place of one mark per directory: a change anywhere in it is an event,
// and those of directories outside the export are not the watcher's
// (their keys are unknown to it). It needs CAP_SYS_ADMIN (a delegator run
// as root); without, directories are marked one by one.
func (fa *fanotify) markFilesystem(f *os.File, st *unix.Statfs_t) error {
	if err := unix.FanotifyMark(fa.fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, fanotifyFSMask, int(f.Fd()), ""); err != nil {
		return err
	}
	fa.mu.Lock()
	fa.wholeFS = st.Fsid
	fa.mu.Unlock()
	return nil
}

// fanotifyFSMask is fanotifyMask for a file system's mark, which sees
// every directory's children without being asked.
const fanotifyFSMask = fanotifyMask &^ unix.FAN_EVENT_ON_CHILD

// remove does nothing: a mark is removed by naming its directory, which
// may be outside the export by now; it ends with the group.
func (fa *fanotify) remove(string) {}

func (fa *fanotify) attests() bool { return true }

func (fa *fanotify) close() error { return fa.f.Close() }

func (fa *fanotify) read() ([]event, error) {
	buf := make([]byte, 64<<10)
	n, err := fa.f.Read(buf)
	if err != nil {
		return nil, err
	}
	var evs []event
	const metaLen = 24 // struct fanotify_event_metadata
	for off := 0; off+metaLen <= n; {
		evLen := int(binary.NativeEndian.Uint32(buf[off:]))
		if evLen < metaLen || off+evLen > n {
			break
		}
		mask := binary.NativeEndian.Uint64(buf[off+8:])
		fd := int32(binary.NativeEndian.Uint32(buf[off+16:]))
		pid := int32(binary.NativeEndian.Uint32(buf[off+20:]))
		info := buf[off+int(binary.NativeEndian.Uint16(buf[off+6:])) : off+evLen]
		off += evLen
		if fd >= 0 {
			unix.Close(int(fd)) // not asked for (FID reporting has none), but never kept
		}
		if mask&unix.FAN_Q_OVERFLOW != 0 {
			evs = append(evs, event{overflow: true})
			continue
		}
		dir, name, ok := dirAndName(info)
		if !ok {
			continue
		}
		e := event{dir: dir, others: pid != fa.self, isDir: mask&unix.FAN_ONDIR != 0,
			created: mask&unix.FAN_CREATE != 0, movedFrom: mask&unix.FAN_MOVED_FROM != 0,
			movedTo: mask&unix.FAN_MOVED_TO != 0}
		if name != "." {
			e.name = name
		} else if mask&unix.FAN_DELETE_SELF != 0 {
			e.gone = true // the event is the directory's own
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// dirAndName reads an event's DFID_NAME record: the directory's key (as
// fanotify.add makes it) and the entry's name ("." for the directory
// itself).
func dirAndName(info []byte) (dir, name string, ok bool) {
	for len(info) >= 4 {
		typ, l := info[0], int(binary.NativeEndian.Uint16(info[2:]))
		if l < 4 || l > len(info) {
			return "", "", false
		}
		rec := info[4:l]
		info = info[l:]
		if typ != unix.FAN_EVENT_INFO_TYPE_DFID_NAME || len(rec) < 16 {
			continue
		}
		hlen := int(binary.NativeEndian.Uint32(rec[8:]))
		if 16+hlen > len(rec) {
			return "", "", false
		}
		// fsid (8 bytes), handle_bytes (4), handle_type (4), f_handle.
		key := append(append([]byte{}, rec[:8]...), rec[12:16+hlen]...)
		rest := rec[16+hlen:]
		if i := bytes.IndexByte(rest, 0); i >= 0 {
			rest = rest[:i]
		}
		return string(key), string(rest), true
	}
	return "", "", false
}

// localMagic are the file systems whose changes the kernel's watches see
// whoever makes them. On a network file system (NFS, SMB) or a FUSE one,
// they see only this machine's own changes: a client told "nothing
// changed" would keep stale caches, so such an export is not watched, nor
// such a file system mounted inside one (and the watch is then not exact).
var localMagic = map[int64]bool{
	0xEF53:     true, // ext2, ext3, ext4
	0x58465342: true, // xfs
	0x9123683E: true, // btrfs
	0x01021994: true, // tmpfs
	0x2FC12FC1: true, // zfs
	0xF2F52010: true, // f2fs
	0x794C7630: true, // overlayfs
}

func localFS(st *unix.Statfs_t) bool { return localMagic[int64(st.Type)] }

// preferPoll is true only where a test tries the portable source, which
// macOS and FreeBSD use, on Linux; pollTrigger, where it tries it with a
// trigger shaped as kqueue's (kqueueTrigger).
var (
	preferPoll  = false
	pollTrigger func() (dirTrigger, error)
)

// openSource is fanotify where it can mark the directory open at top
// (some file systems have no file handles for it to name directories
// by), else inotify; and how many directories it may watch.
func openSource(top *os.File, st *unix.Statfs_t) (source, int, error) {
	if portable.Selected {
		trig, err := newInotifyDirTrigger()
		if err != nil {
			return nil, 0, err
		}
		return newPollSource(pollEvery, trig), maxWatchDirs, nil
	}
	if preferPoll {
		var trig dirTrigger
		if pollTrigger != nil {
			var err error
			if trig, err = pollTrigger(); err != nil {
				return nil, 0, err
			}
		}
		return newPollSource(pollEvery, trig), maxWatchDirs, nil
	}
	if fan, err := newFanotify(); preferFanotify && err == nil {
		if _, err := fan.add(int(top.Fd()), st); err == nil {
			if preferWholeFS && fan.markFilesystem(top, st) == nil {
				return fan, maxWatchDirsWhole, nil
			}
			return fan, maxWatchDirs, nil
		}
		fan.close()
	} else if err == nil {
		fan.close()
	}
	in, err := newInotify()
	if err != nil {
		return nil, 0, err
	}
	return in, maxWatchDirs, nil
}
