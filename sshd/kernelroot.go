package sshd

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/confine"
	"github.com/awcp/awcp/internal/openflag"
	"github.com/awcp/awcp/internal/portable"
	"github.com/awcp/awcp/internal/treewalk"
)

// kernelRoot resolves names inside one directory with openat2(RESOLVE_BENEATH):
// the kernel walks the whole path in one call and refuses any step — "..",
// an absolute symlink, a symlink leading out — that would leave the
// directory. os.Root gives the same guarantee with an openat per path
// component, which is most of the server's cost for deep trees like .git;
// it stays the fallback where openat2 is missing.
type kernelRoot struct {
	dir  *os.File // the directory, opened through the root
	root *os.Root
	ok   bool // openat2 works here

	// guard, if set, is asked about each directory opened to act on a
	// name in it (base), or each file opened to stat (base ""), by the
	// descriptor the kernel resolved: the export's policy checks the real
	// path there, so a symlinked parent swapped in after a check of the
	// request's path changes nothing. at is the descriptor's path
	// relative to the root where the kernel's walk followed no symlink
	// (plain), "" where it must be read back from the descriptor.
	guard func(fd int, at, base, change string) error
}

func newKernelRoot(root *os.Root) *kernelRoot {
	b := &kernelRoot{root: root}
	dir, err := root.Open(".")
	if err != nil {
		return b
	}
	b.dir = dir
	// A portable build walks with os.Root, as macOS and FreeBSD do.
	b.ok = !portable.Selected && hasOpenat2(int(dir.Fd()))
	return b
}

func (b *kernelRoot) Close() error {
	if b.dir != nil {
		return b.dir.Close()
	}
	return nil
}

// openat2 opens name beneath the root. plain reports that the kernel's
// walk followed no symlink (RESOLVE_NO_SYMLINKS, tried first): the
// descriptor's path is then name itself, and the policy need not read it
// back from /proc/self/fd, which costs twice the open. A walk that meets
// a symlink is refused at once (ELOOP, nothing made) and walked again
// following it, as before.
func (b *kernelRoot) openat2(name string, flags int, perm fs.FileMode) (fd int, plain bool, err error) {
	fd, err = b.openHow(name, flags, perm, true)
	if !errors.Is(err, unix.ELOOP) {
		return fd, err == nil, err
	}
	fd, err = b.openHow(name, flags, perm, false)
	return fd, false, err
}

// errEscape is a path that would leave the delegated directory.
var errEscape = errors.New("path escapes from the delegated directory")

// OpenFile opens name inside the directory.
func (b *kernelRoot) OpenFile(name string, flags int, perm fs.FileMode) (*os.File, error) {
	f, _, err := b.openFile(name, flags, perm)
	return f, err
}

// openFile is OpenFile, and whether the kernel's walk to the file
// followed no symlink (openat2's plain): its path is then name.
func (b *kernelRoot) openFile(name string, flags int, perm fs.FileMode) (*os.File, bool, error) {
	if !b.ok {
		return b.openPortable(name, flags, perm)
	}
	fd, plain, err := b.openat2(name, flags, perm)
	if err != nil {
		return nil, false, err
	}
	return os.NewFile(uintptr(fd), name), plain, nil
}

// openPortable is openFile without openat2, walked as openat2's is: first
// following no symlink (plain: name is the file's path), in the directory
// that holds name, opened a component at a time; where that meets a
// symlink, or fails at all, through the os.Root, which follows symlinks
// that stay inside (what it opens is then named by the path the kernel
// has for it). Where the kernel has no path to give (FreeBSD), a file
// reached through a symlink is thus refused under a policy, and one
// reached without is not.
func (b *kernelRoot) openPortable(name string, flags int, perm fs.FileMode) (*os.File, bool, error) {
	if dir, base, ok := splitName(name); ok {
		if dfd, plain, err := b.dirBeneath(dir); err == nil {
			fd := -1
			if plain {
				fd, err = unix.Openat(dfd, base, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm())) // as openHow
			}
			unix.Close(dfd)
			if fd >= 0 {
				return os.NewFile(uintptr(fd), name), true, nil
			}
		}
	}
	f, err := b.root.OpenFile(name, flags, perm)
	return f, false, err
}

// Lstat is lstat inside the directory: a final symlink is not followed.
func (b *kernelRoot) Lstat(name string) (fs.FileInfo, error) {
	if !b.ok {
		return b.statPortable(name, false)
	}
	return b.stat(name, unix.O_NOFOLLOW)
}

// Stat follows a final symlink, as long as it stays inside.
func (b *kernelRoot) Stat(name string) (fs.FileInfo, error) {
	if !b.ok {
		return b.statPortable(name, true)
	}
	return b.stat(name, 0)
}

// statPortable is stat without openat2: fstatat in the guarded directory
// that holds name; a final symlink, followed, is opened through the
// os.Root (never leaving it) and the guard asked about what it reached.
func (b *kernelRoot) statPortable(name string, follow bool) (fs.FileInfo, error) {
	fd, at, base, ok, err := b.parent(name)
	if !ok {
		return b.root.Lstat(name) // the root itself
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := b.guarded(fd, at, base, ""); err != nil {
		return nil, err
	}
	var ust unix.Stat_t
	if err := unix.Fstatat(fd, base, &ust, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	st := *(*syscall.Stat_t)(unsafe.Pointer(&ust)) // the same C struct (sameStat)
	if !follow || st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return &statInfo{name: base, st: st}, nil
	}
	f, err := b.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := b.guarded(int(f.Fd()), "", "", ""); err != nil {
		return nil, err
	}
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return &statInfo{name: base, st: st}, nil
}

func (b *kernelRoot) stat(name string, extra int) (fs.FileInfo, error) {
	fd, plain, err := b.openat2(name, openflag.Search|extra, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if b.guard != nil {
		at := ""
		if plain {
			at = name
		}
		if err := b.guard(fd, at, "", ""); err != nil {
			return nil, err
		}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return &statInfo{name: path.Base(name), st: st}, nil
}

// sameStat: x/sys/unix's Stat_t and syscall's are the one C struct
// stat(2) fills, on every system built for (a compile-time check).
var (
	_ [unsafe.Sizeof(syscall.Stat_t{}) - unsafe.Sizeof(unix.Stat_t{})]byte
	_ [unsafe.Sizeof(unix.Stat_t{}) - unsafe.Sizeof(syscall.Stat_t{})]byte
)

// Readlink reads the symlink name in its guarded directory (the guard
// asked as for a read): a parent swapped after the request's check reads
// nothing hidden.
func (b *kernelRoot) Readlink(name string) (string, error) {
	fd, at, base, ok, err := b.parent(name)
	if !ok {
		return b.root.Readlink(name) // the root itself: never a symlink
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	if err := b.guarded(fd, at, base, ""); err != nil {
		return "", err
	}
	target, err := confine.Readlink(fd, base)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return target, nil
}

// statInfo is an fs.FileInfo from a Stat_t.
type statInfo struct {
	name string
	st   syscall.Stat_t
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return statTimes(&s.st).mtime }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.st }

func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	}
	if s.st.Mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// splitName is name's directory and last element; ok is false where name
// is the root itself, which no directory holds.
func splitName(name string) (dir, base string, ok bool) {
	dir, base = path.Split(name)
	if base == "" || base == "." || base == ".." {
		return "", "", false
	}
	if dir == "" {
		dir = "."
	}
	return dir, base, true
}

// parent opens the directory that holds name beneath the root — one
// openat2 however deep name is — and returns it with name's last element
// and, where the walk followed no symlink, the directory's path relative
// to the root (at; "" where it must be read back).
// ok is false where name is the root itself.
func (b *kernelRoot) parent(name string) (fd int, at, base string, ok bool, err error) {
	dir, base, ok := splitName(name)
	if !ok {
		return -1, "", "", false, nil
	}
	fd, plain, err := b.dirBeneath(dir)
	if plain {
		at = path.Clean(dir)
	}
	return fd, at, base, true, err
}

// dirBeneath opens directory dir beneath the root to act in (the *at
// calls) and stat. plain: the walk followed no symlink, so dir is the
// descriptor's path. Without openat2 (macOS, FreeBSD, a portable build) a
// walk a component at a time that follows none is tried first, then the
// os.Root's, which follows symlinks that stay inside the root: what the
// latter reaches is named by the path the kernel has for it (the guard
// reads it back), as openat2's walk through a symlink is.
func (b *kernelRoot) dirBeneath(dir string) (fd int, plain bool, err error) {
	if b.ok {
		return b.openat2(dir, openflag.Search|unix.O_DIRECTORY, 0)
	}
	if b.dir == nil {
		return -1, false, &fs.PathError{Op: "open", Path: dir, Err: unix.EBADF}
	}
	if fd, err := treewalk.OpenBeneath(int(b.dir.Fd()), dir, openflag.Search|unix.O_DIRECTORY); err == nil {
		return fd, true, nil
	}
	f, err := b.root.OpenFile(dir, openflag.Search|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, false, err
	}
	defer f.Close()
	fd, err = unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	return fd, false, err
}

// dirOf is parent where openat2 is missing too: the directory is then
// opened through the os.Root. It returns the directory's descriptor,
// name's last element and the descriptor's release. Its callers name or
// move name (symlink, rename, link): the guard is asked as for a change.
func (b *kernelRoot) dirOf(name string) (int, string, func(), error) {
	if fd, at, base, ok, err := b.parent(name); ok {
		if err != nil {
			return -1, "", nil, err
		}
		if err := b.guarded(fd, at, base, "link"); err != nil {
			unix.Close(fd)
			return -1, "", nil, err
		}
		return fd, base, func() { unix.Close(fd) }, nil
	}
	dir, base, ok := splitName(name)
	if !ok {
		return -1, "", nil, unix.EINVAL
	}
	f, err := b.root.Open(dir)
	if err != nil {
		return -1, "", nil, err
	}
	if err := b.guarded(int(f.Fd()), "", base, "link"); err != nil {
		f.Close()
		return -1, "", nil, err
	}
	return int(f.Fd()), base, func() { f.Close() }, nil
}

// guarded asks the guard, if any, about base in directory fd (whose path
// is at, if known), which change (the guard's: "mkdir", "remove", "link")
// is about to change.
func (b *kernelRoot) guarded(fd int, at, base, change string) error {
	if b.guard == nil {
		return nil
	}
	return b.guard(fd, at, base, change)
}

// inParent runs op (named what, for errors) on the directory that holds
// name and name's last element, so op acts on the last element itself,
// never following it. Where parent cannot, it runs fallback instead.
func (b *kernelRoot) inParent(what, name string, op func(dirfd int, base string) error, fallback func() error) error {
	fd, at, base, ok, err := b.parent(name)
	if !ok {
		return fallback()
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := b.guarded(fd, at, base, what); err != nil {
		return err
	}
	err = op(fd, base)
	if errno, ok := err.(syscall.Errno); ok {
		return &fs.PathError{Op: what, Path: name, Err: errno}
	}
	return err
}

// Remove removes the file (or, with dir, the empty directory) name: a file
// asked to go as a directory is ENOTDIR, a directory asked to go as a file
// EISDIR, as unlinkat(2) says.
func (b *kernelRoot) Remove(name string, dir bool) error {
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	return b.inParent("remove", name, func(fd int, base string) error { return unix.Unlinkat(fd, base, flags) },
		func() error {
			fi, err := b.root.Lstat(name)
			switch {
			case err != nil:
				return err
			case dir && !fi.IsDir():
				return syscall.ENOTDIR
			case !dir && fi.IsDir():
				return syscall.EISDIR
			}
			return b.root.Remove(name)
		})
}

// Mkdir makes the directory name with exactly perm: where the process
// umask cuts bits of perm, the new directory is opened (not following a
// symlink raced into its place) and chmodded.
func (b *kernelRoot) Mkdir(name string, perm fs.FileMode) error {
	perm = perm.Perm()
	return b.inParent("mkdir", name, func(fd int, base string) error {
		if err := unix.Mkdirat(fd, base, uint32(perm)); err != nil || !umaskCuts(perm) {
			return err
		}
		dfd, err := unix.Openat(fd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		return unix.Fchmod(dfd, uint32(perm))
	}, func() error {
		if err := b.root.Mkdir(name, perm); err != nil || !umaskCuts(perm) {
			return err
		}
		return b.root.Chmod(name, perm)
	})
}

// OpenCreating is OpenFile, except that a file it creates gets exactly
// perm, which the process umask would otherwise cut: the executor's tool
// asked for perm (its own umask already applied). To know whether the file
// is new, it tries an exclusive create first.
// plain is openFile's.
func (b *kernelRoot) OpenCreating(name string, flags int, perm fs.FileMode) (f *os.File, plain bool, err error) {
	perm = perm.Perm()
	if flags&os.O_CREATE == 0 || !umaskCuts(perm) {
		return b.openFile(name, flags, perm)
	}
	for {
		f, plain, err := b.openFile(name, flags|os.O_EXCL, perm)
		if err == nil {
			if err := f.Chmod(perm); err != nil {
				f.Close()
				return nil, false, err
			}
			return f, plain, nil
		}
		if flags&os.O_EXCL != 0 || !errors.Is(err, fs.ErrExist) {
			return nil, false, err
		}
		f, plain, err = b.openFile(name, flags&^os.O_CREATE, perm)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, plain, err
		}
		// Removed between the two: create it after all.
	}
}

// umaskCuts reports whether the process umask takes bits off perm.
func umaskCuts(perm fs.FileMode) bool { return perm&^processUmask() != perm }

// processUmask is the umask, read once (setting it to read it back would
// race with other goroutines creating files: readUmask reads it where the
// system shows it). If it cannot be read, every bit is taken as cut, so
// modes are always set.
var processUmask = sync.OnceValue(func() fs.FileMode {
	if m, ok := readUmask(); ok {
		return m
	}
	return 0o777
})

// parentFd opens directory dir beneath the root for its path
// (dirBeneath). No guard: the caller asks about what it finds.
// plain is dirBeneath's: dir is then the descriptor's path.
func (b *kernelRoot) parentFd(dir string) (fd int, plain, ok bool, err error) {
	fd, plain, err = b.dirBeneath(dir)
	return fd, plain, true, err
}
