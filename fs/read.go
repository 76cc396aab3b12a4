package fs

// What answers a read of an open file: the kernel asks the mount only for
// what its pages lack, and the mount answers from what it already holds
// where it can — the file's start brought along with its open, the
// contents fetched ahead with its directory, what this handle wrote —
// before it reads across the link.

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/awcp/awcp/fs/sftpc"
)

// headRead is the start of a file, read along with its open (OpenRead). It
// answers the first read at offset 0, if nothing was written to the file
// through this mount since; it is dropped at the first read either way.
type headRead struct {
	data    []byte
	eof     bool    // data is the whole file
	changes uint64  // the node's changes counter at the open
	version version // the file's attributes at the open: the delegator's changes
	ok      bool
}

// headSize is how much of a file an open for reading brings along: the
// whole of most source files, as much as the kernel's first read asks
// for many.
const headSize = 64 << 10

// wholeSize is the largest file an open for reading brings whole, where
// the kernel knows its size: git's index of a few thousand files, a large
// source file — one round trip, not two. Larger, and the second round trip
// costs less than bytes a reader may never want (head, file(1)).
const wholeSize = 256 << 10

// openHead is how much of a file of kernelSize bytes an open for reading
// brings along: a byte past its size, so that its end is seen to be there
// (the answer's EOF; openedWith hands the kernel only a file seen whole).
func openHead(kernelSize uint64) int {
	if kernelSize >= headSize && kernelSize < wholeSize {
		return int(kernelSize) + 1
	}
	return headSize
}

// fromHead answers a read at off from the handle's head: n bytes in dest,
// and whether that is the whole answer (the head covered dest, or reached
// the end of the file).
func (h *fileHandle) fromHead(dest []byte, off int64) (n int, whole bool) {
	h.mu.Lock()
	head := h.head
	h.head = headRead{}
	h.mu.Unlock()
	if !head.ok || off != 0 || h.node.changes.Load() != head.changes {
		return 0, false
	}
	// Attributes read since the open that differ (the kernel asked for
	// them, found them changed and dropped its pages) mean the delegator
	// changed the file: the head is of the old one.
	h.node.mu.Lock()
	seen := h.node.seen
	h.node.mu.Unlock()
	if seen != head.version {
		return 0, false
	}
	n = copy(dest, head.data)
	return n, n == len(dest) || head.eof
}

// fromKept answers a read of a handle only reading, not yet open on the
// delegator, from the file's contents fetched ahead (warmStore.file), if
// they are kept and of the file as the kernel knows it: n bytes in dest.
func (h *fileHandle) fromKept(dest []byte, off int64) (n int, ok bool) {
	f := h.node.fsys
	gen := f.exactNow()
	if h.flags&syscall.O_ACCMODE != syscall.O_RDONLY || gen == 0 || off < 0 {
		return 0, false
	}
	o, ok := f.warm.file(h.node.rpath(), gen, false)
	if !ok || !o.EOF {
		return 0, false
	}
	var a fuse.Attr
	f.fillAttr(o.Attrs, &a)
	h.node.mu.Lock()
	seen := h.node.seen
	h.node.mu.Unlock()
	if versionOf(&a) != seen || uint64(len(o.Head)) != a.Size {
		return 0, false
	}
	if off >= int64(len(o.Head)) {
		return 0, true
	}
	return copy(dest, o.Head[off:]), true
}

// readWhole records that a read at off, answered with n of the asked
// bytes, handed the kernel's page cache the whole file: it started at 0
// and came short (the end of the file). Reads with O_DIRECT pass the page
// cache by.
func (h *fileHandle) readWhole(off int64, n, asked int) {
	if off != 0 || n >= asked || h.flags&syscall.O_DIRECT != 0 {
		return
	}
	h.node.mu.Lock()
	h.node.whole = true
	h.node.mu.Unlock()
}

func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if n, ok := h.fromWritten(dest, off); ok {
		return fuse.ReadResultData(dest[:n]), 0
	}
	had, whole := h.fromHead(dest, off)
	if whole {
		h.readWhole(off, had, len(dest))
		return fuse.ReadResultData(dest[:had]), 0
	}
	if had == 0 && h.deferred() {
		if n, ok := h.fromKept(dest, off); ok {
			h.readWhole(off, n, len(dest))
			return fuse.ReadResultData(dest[:n]), 0
		}
		// Its open brings the file's start along.
		if err := h.withFile(ctx, func(*sftpc.File) error { return nil }); err != nil {
			return nil, h.node.errno(ctx, "read", h.node.rpath(), err)
		}
		if had, whole = h.fromHead(dest, off); whole {
			h.readWhole(off, had, len(dest))
			return fuse.ReadResultData(dest[:had]), 0
		}
	}
	var n int
	err := h.withFile(ctx, func(f *sftpc.File) (err error) {
		n, err = f.ReadAt(dest[had:], off+int64(had))
		if isEOF(err) {
			err = nil
		}
		return err
	})
	// A short answer is the end of the file to the kernel: never one for
	// a failed read after the head.
	if err != nil && (n == 0 || had > 0) {
		return nil, h.node.errno(ctx, "read", h.node.rpath(), err)
	}
	h.readWhole(off, had+n, len(dest))
	if h.flags&syscall.O_DIRECT == 0 {
		h.node.scatter(off, had+n, len(dest))
	}
	return fuse.ReadResultData(dest[:had+n]), 0
}
