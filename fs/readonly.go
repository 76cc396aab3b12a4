package fs

// A read-only mount refuses writes itself, not by the kernel's "ro" flag:
// the kernel would answer EROFS without asking the mount, and the
// delegation's record would say the agent tried nothing. Refused here,
// each write is counted (Mount.Refused), so a run whose agent's writes all
// failed does not look clean. The server refuses every write of a ro
// delegation too: this is the count, not the boundary.

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// maxRefusalExamples bounds the refusals a mount remembers by name.
const maxRefusalExamples = 5

// refusals counts a read-only mount's refused writes.
type refusals struct {
	mu       sync.Mutex
	n        uint64
	examples []string // the first few, "create notes.txt"
}

func (r *refusals) add(what string) fuse.Status {
	r.mu.Lock()
	r.n++
	if len(r.examples) < maxRefusalExamples {
		r.examples = append(r.examples, what)
	}
	r.mu.Unlock()
	return fuse.Status(syscall.EROFS)
}

// Refusals is what a read-only mount refused: how many writes, and the
// first few (operation and name).
type Refusals struct {
	Count    uint64
	Examples []string
}

func (r *refusals) snapshot() Refusals {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Refusals{Count: r.n, Examples: append([]string(nil), r.examples...)}
}

// readOnly wraps a RawFileSystem to refuse, with EROFS, every request
// that would change the tree, and access(2) asking for write.
type readOnly struct {
	fuse.RawFileSystem
	refused *refusals
}

func (r readOnly) Create(_ <-chan struct{}, _ *fuse.CreateIn, name string, _ *fuse.CreateOut) fuse.Status {
	return r.refused.add("create " + name)
}

func (r readOnly) Mkdir(_ <-chan struct{}, _ *fuse.MkdirIn, name string, _ *fuse.EntryOut) fuse.Status {
	return r.refused.add("mkdir " + name)
}

func (r readOnly) Mknod(_ <-chan struct{}, _ *fuse.MknodIn, name string, _ *fuse.EntryOut) fuse.Status {
	return r.refused.add("mknod " + name)
}

func (r readOnly) Unlink(_ <-chan struct{}, _ *fuse.InHeader, name string) fuse.Status {
	return r.refused.add("unlink " + name)
}

func (r readOnly) Rmdir(_ <-chan struct{}, _ *fuse.InHeader, name string) fuse.Status {
	return r.refused.add("rmdir " + name)
}

func (r readOnly) Rename(_ <-chan struct{}, _ *fuse.RenameIn, oldName, newName string) fuse.Status {
	return r.refused.add("rename " + oldName + " to " + newName)
}

func (r readOnly) Link(_ <-chan struct{}, _ *fuse.LinkIn, name string, _ *fuse.EntryOut) fuse.Status {
	return r.refused.add("link " + name)
}

func (r readOnly) Symlink(_ <-chan struct{}, _ *fuse.InHeader, _, name string, _ *fuse.EntryOut) fuse.Status {
	return r.refused.add("symlink " + name)
}

// SetAttr and Open pass: the node refuses them (refuseWrite), naming the
// path, which the raw layer knows only as a node id.

func (r readOnly) SetXAttr(_ <-chan struct{}, in *fuse.SetXAttrIn, attr string, _ []byte) fuse.Status {
	return r.refused.add(fmt.Sprintf("setxattr %s of inode %d", attr, in.NodeId))
}

func (r readOnly) RemoveXAttr(_ <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	return r.refused.add(fmt.Sprintf("removexattr %s of inode %d", attr, h.NodeId))
}

func (r readOnly) Write(_ <-chan struct{}, in *fuse.WriteIn, _ []byte) (uint32, fuse.Status) {
	return 0, r.refused.add(fmt.Sprintf("write to inode %d", in.NodeId))
}

func (r readOnly) Fallocate(_ <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	return r.refused.add(fmt.Sprintf("fallocate of inode %d", in.NodeId))
}

func (r readOnly) CopyFileRange(_ <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return 0, r.refused.add(fmt.Sprintf("copy_file_range to inode %d", in.NodeIdOut))
}

// Access answers a question, and refuses nothing: it is not counted.
func (r readOnly) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if in.Mask&2 != 0 { // W_OK
		return fuse.Status(syscall.EROFS)
	}
	return r.RawFileSystem.Access(cancel, in)
}

// refuseWrite refuses, counted and named by path, what would change node
// n of a read-only mount; 0 on a writable one.
func (f *filesystem) refuseWrite(what string, n *node) syscall.Errno {
	if !f.readOnly {
		return 0
	}
	return syscall.Errno(f.refused.add(what + " " + n.Path(nil))) // relative to the mount
}
