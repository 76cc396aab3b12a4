package fs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Metrics is what a mount reports; the daemon's registry
// (internal/metrics) implements it. Operation names are a fixed set.
type Metrics interface {
	// FUSEOp is one FUSE request answered, with its errno (0: success).
	FUSEOp(op string, errno syscall.Errno)
	// MountLost is the connection to the delegator lost.
	MountLost()
	// MountBack is the connection back after an outage that long.
	MountBack(outage time.Duration)
	// CacheDropped is every cache dropped at once: the delegator's watch
	// began or overflowed, or a new connection began (watch.go).
	CacheDropped()
}

type noMetrics struct{}

func (noMetrics) FUSEOp(string, syscall.Errno) {}
func (noMetrics) MountLost()                   {}
func (noMetrics) CacheDropped()                {}
func (noMetrics) MountBack(time.Duration)      {}

// countingFS counts the requests the kernel sends the mount, by operation,
// with the status each was answered with. It wraps go-fuse's node
// filesystem, as go-fuse has no hook of its own; the requests it does not
// name (forgets, releases, locks, xattrs, which the mount disables) pass
// through uncounted.
type countingFS struct {
	fuse.RawFileSystem
	m Metrics
}

func (c countingFS) count(op string, st fuse.Status) fuse.Status {
	c.m.FUSEOp(op, syscall.Errno(st))
	return st
}

func (c countingFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	st := c.RawFileSystem.Lookup(cancel, h, name, out)
	if st == fuse.OK && out.NodeId == 0 {
		// A negative entry: go-fuse answers ENOENT this way so that the
		// kernel caches it.
		c.m.FUSEOp("lookup", syscall.ENOENT)
		return st
	}
	return c.count("lookup", st)
}

func (c countingFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	return c.count("getattr", c.RawFileSystem.GetAttr(cancel, in, out))
}

func (c countingFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return c.count("setattr", c.RawFileSystem.SetAttr(cancel, in, out))
}

func (c countingFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return c.count("mknod", c.RawFileSystem.Mknod(cancel, in, name, out))
}

func (c countingFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return c.count("mkdir", c.RawFileSystem.Mkdir(cancel, in, name, out))
}

func (c countingFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return c.count("unlink", c.RawFileSystem.Unlink(cancel, h, name))
}

func (c countingFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return c.count("rmdir", c.RawFileSystem.Rmdir(cancel, h, name))
}

func (c countingFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, from, to string) fuse.Status {
	return c.count("rename", c.RawFileSystem.Rename(cancel, in, from, to))
}

func (c countingFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return c.count("link", c.RawFileSystem.Link(cancel, in, name, out))
}

func (c countingFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return c.count("symlink", c.RawFileSystem.Symlink(cancel, h, target, name, out))
}

func (c countingFS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	out, st := c.RawFileSystem.Readlink(cancel, h)
	return out, c.count("readlink", st)
}

func (c countingFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	return c.count("access", c.RawFileSystem.Access(cancel, in))
}

func (c countingFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return c.count("create", c.RawFileSystem.Create(cancel, in, name, out))
}

func (c countingFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return c.count("open", c.RawFileSystem.Open(cancel, in, out))
}

func (c countingFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	res, st := c.RawFileSystem.Read(cancel, in, buf)
	return res, c.count("read", st)
}

func (c countingFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	n, st := c.RawFileSystem.Write(cancel, in, data)
	return n, c.count("write", st)
}

func (c countingFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	n, st := c.RawFileSystem.Writev(cancel, in, data)
	return n, c.count("write", st)
}

func (c countingFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	return c.count("lseek", c.RawFileSystem.Lseek(cancel, in, out))
}

func (c countingFS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	n, st := c.RawFileSystem.CopyFileRange(cancel, in)
	return n, c.count("copy_file_range", st)
}

func (c countingFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	return c.count("flush", c.RawFileSystem.Flush(cancel, in))
}

func (c countingFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return c.count("fsync", c.RawFileSystem.Fsync(cancel, in))
}

func (c countingFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	return c.count("fallocate", c.RawFileSystem.Fallocate(cancel, in))
}

func (c countingFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return c.count("opendir", c.RawFileSystem.OpenDir(cancel, in, out))
}

func (c countingFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return c.count("readdir", c.RawFileSystem.ReadDir(cancel, in, out))
}

func (c countingFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return c.count("readdirplus", c.RawFileSystem.ReadDirPlus(cancel, in, out))
}

func (c countingFS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return c.count("fsyncdir", c.RawFileSystem.FsyncDir(cancel, in))
}

func (c countingFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	return c.count("statfs", c.RawFileSystem.StatFs(cancel, h, out))
}

func (c countingFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	return c.count("statx", c.RawFileSystem.Statx(cancel, in, out))
}
