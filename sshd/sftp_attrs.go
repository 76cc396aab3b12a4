package sshd

import (
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

func (s *sftpServer) attrsOrStatus(id uint32, fi fs.FileInfo, err error) {
	if err != nil {
		s.errStatus(id, err)
		return
	}
	b := newBuf()
	b.Byte(wire.Attrs)
	b.U32(id)
	putAttrs(&b, fi)
	s.send(b)
}

// setstat applies attributes to name (through the root) or to the open f.
func (s *sftpServer) setstat(name string, f *os.File, a wire.FileAttrs, decodeErr error) error {
	if decodeErr != nil {
		return errBadMessage
	}
	if err := s.writable(); err != nil {
		return err
	}
	// A SETSTAT by path acts on the very file it was checked on — opened
	// beneath the root, its kernel path neither hidden nor one git obeys
	// — through its descriptor (its /proc link on Linux): a symlinked
	// directory swapped in after the check reaches nothing hidden, nor
	// anything of git's.
	pinned := ""
	real := name // the kernel's path of the file acted on, where by path
	if f == nil {
		pf, plain, err := s.fast.openFile(name, pinFlags(a.Flags&wire.AttrSize != 0), 0)
		if err != nil {
			return err
		}
		defer pf.Close()
		var hidden bool
		real, hidden = s.opened(pf, name, plain)
		if hidden {
			return &hiddenAt{real}
		}
		if err := s.changeRefused(OpSetattr, real); err != nil {
			return err
		}
		if procPins {
			pinned = "/proc/self/fd/" + strconv.Itoa(int(pf.Fd()))
		} else {
			f = pf
		}
	}
	if a.Flags&wire.AttrSize != 0 {
		// The owner's file is not made shorter under NoDelete, and what
		// it grows by counts against the write limit.
		var fi fs.FileInfo
		var err error
		if f != nil {
			fi, err = f.Stat()
		} else {
			fi, err = os.Stat(pinned)
		}
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st != nil {
			if err := s.shrinks(real, st, a.Size); err != nil {
				return err
			}
		}
		grow := int64(a.Size) - fi.Size()
		if err := s.spend(grow); err != nil {
			return err
		}
		if f != nil {
			err = f.Truncate(int64(a.Size))
		} else {
			err = os.Truncate(pinned, int64(a.Size))
		}
		if err != nil {
			s.refund(grow)
			return err
		}
	}
	if a.Flags&wire.AttrPermissions != 0 {
		mode := fs.FileMode(a.Mode) & fs.ModePerm
		var err error
		if f != nil {
			err = f.Chmod(mode)
		} else {
			err = os.Chmod(pinned, mode)
		}
		if err != nil {
			return err
		}
	}
	if a.Flags&wire.AttrACModTime != 0 {
		// times@awcp's mtime nanoseconds are honoured: a client that told
		// its kernel a file's mtime sets that very one.
		at, mt := time.Unix(int64(a.Atime), 0), time.Unix(int64(a.Mtime), 0)
		if a.HasTimes && a.MtimeNsec < 1e9 {
			mt = time.Unix(int64(a.Mtime), int64(a.MtimeNsec))
		}
		var err error
		switch {
		case f != nil && a.HasTimes:
			err = setTimes(f, a)
		case f != nil:
			err = futimes(f, at, mt)
		default:
			err = os.Chtimes(pinned, at, mt)
		}
		if err != nil {
			return err
		}
	}
	// UIDGID is ignored: the session owns everything it creates.
	return nil
}

// setTimes sets f's access time to a's, in whole seconds, and its
// modification time to a's to the nanosecond where a carries times@awcp.
// It is futimens(3): utimensat on the descriptor with a NULL path, which
// x/sys/unix does not wrap.
func setTimes(f *os.File, a wire.FileAttrs) error {
	ts := [2]unix.Timespec{{Sec: int64(a.Atime)}, {Sec: int64(a.Mtime)}}
	if a.HasTimes {
		ts[1].Nsec = int64(a.MtimeNsec)
	}
	return setFileTimes(f, ts)
}

func futimes(f *os.File, at, mt time.Time) error {
	tv := []syscall.Timeval{syscall.NsecToTimeval(at.UnixNano()), syscall.NsecToTimeval(mt.UnixNano())}
	return syscall.Futimes(int(f.Fd()), tv)
}

// putAttrs appends fi's attributes to b.
func putAttrs(b *buf, fi fs.FileInfo) {
	a := statAttrs(fi)
	a.Encode(b)
}

// statAttrs is fi as ATTRS, with our extended attributes where the
// system's stat is there: the link count, and the times to the nanosecond.
func statAttrs(fi fs.FileInfo) wire.FileAttrs {
	a := wire.FileAttrs{Flags: wire.AttrSize | wire.AttrUIDGID | wire.AttrPermissions | wire.AttrACModTime,
		Size: uint64(fi.Size()), Mode: modeBits(fi.Mode()), Atime: uint32(fi.ModTime().Unix()), Mtime: uint32(fi.ModTime().Unix())}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		t := statTimes(st)
		a.UID, a.GID, a.Atime = st.Uid, st.Gid, uint32(t.atime.Unix())
		a.Nlink, a.HasNlink = uint32(st.Nlink), true
		a.MtimeNsec, a.Ctime, a.CtimeNsec, a.HasTimes = uint32(t.mtime.Nanosecond()), uint64(t.ctime.Unix()), uint32(t.ctime.Nanosecond()), true
	}
	return a
}

// modeBits encodes a Go file mode as POSIX st_mode bits, as SFTP carries
// them and as FUSE wants them.
func modeBits(m fs.FileMode) uint32 {
	v := uint32(m.Perm())
	switch {
	case m.IsDir():
		v |= syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		v |= syscall.S_IFLNK
	case m&fs.ModeNamedPipe != 0:
		v |= syscall.S_IFIFO
	case m&fs.ModeSocket != 0:
		v |= syscall.S_IFSOCK
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice != 0:
		v |= syscall.S_IFCHR
	case m&fs.ModeDevice != 0:
		v |= syscall.S_IFBLK
	default:
		v |= syscall.S_IFREG
	}
	if m&fs.ModeSetuid != 0 {
		v |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		v |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		v |= syscall.S_ISVTX
	}
	return v
}
