package fs

// Negative entries kept long: while the delegator's watch is exact, a name
// found missing is kept by the kernel as long as one found there. The
// mount records those it hands out, so that a reconnection or an overflow
// can have the kernel forget them too (a name the kernel holds as missing
// is not in the tree the mount knows).

import (
	"github.com/hanwen/go-fuse/v2/fuse"
)

// negativeEntry is a name a directory was told not to hold.
type negativeEntry struct {
	parent uint64
	name   string
}

// maxLongNegatives bounds longNegatives: past it, a missing name is kept
// only the configured time.
const maxLongNegatives = 1 << 16

// keepNegative records that the kernel keeps name as missing in parent
// for long, and reports whether it may (the record has room).
func (f *filesystem) keepNegative(parent uint64, name string) bool {
	f.negMu.Lock()
	defer f.negMu.Unlock()
	if f.longNegatives == nil {
		f.longNegatives = map[negativeEntry]struct{}{}
	}
	if len(f.longNegatives) >= maxLongNegatives {
		return false
	}
	f.longNegatives[negativeEntry{parent, name}] = struct{}{}
	return true
}

// notNegative forgets that name in parent was kept as missing.
func (f *filesystem) notNegative(parent uint64, name string) {
	f.negMu.Lock()
	delete(f.longNegatives, negativeEntry{parent, name})
	f.negMu.Unlock()
}

// dropNegatives has the kernel forget every name it keeps as missing for
// long.
func (f *filesystem) dropNegatives() {
	f.negMu.Lock()
	kept := f.longNegatives
	f.longNegatives = nil
	notify := f.notifyEntry
	f.negMu.Unlock()
	if notify == nil {
		return
	}
	for e := range kept {
		notify(e.parent, e.name)
	}
}

// negatives has the kernel keep a name found missing as long as one found
// there (keepFor): go-fuse gives every negative entry the NegativeTimeout
// fixed at the mount, and a lookup no way to set its own.
type negatives struct {
	fuse.RawFileSystem
	fsys *filesystem
}

func (n negatives) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	s := n.fsys.stamp()
	st := n.RawFileSystem.Lookup(cancel, h, name, out)
	if st == fuse.OK && out.NodeId == 0 { // go-fuse's negative entry
		entry, _ := n.fsys.keepFor(s)
		if entry > n.fsys.entry && !n.fsys.keepNegative(h.NodeId, name) {
			entry = n.fsys.entry
		}
		out.SetEntryTimeout(entry)
	} else if st == fuse.OK {
		n.fsys.notNegative(h.NodeId, name)
	}
	return st
}

// A name made here is no longer missing: dropping the negatives must not
// tell the kernel to forget the entry it now holds (the kernel would then
// forget the node, and the file get a new inode number under a program
// that had just stat'ed it).

func (n negatives) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	n.fsys.notNegative(in.NodeId, name)
	return n.RawFileSystem.Create(cancel, in, name, out)
}

func (n negatives) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	n.fsys.notNegative(in.NodeId, name)
	return n.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (n negatives) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	n.fsys.notNegative(in.NodeId, name)
	return n.RawFileSystem.Mknod(cancel, in, name, out)
}

func (n negatives) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	n.fsys.notNegative(h.NodeId, name)
	return n.RawFileSystem.Symlink(cancel, h, target, name, out)
}

func (n negatives) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	n.fsys.notNegative(in.NodeId, name)
	return n.RawFileSystem.Link(cancel, in, name, out)
}

func (n negatives) Rename(cancel <-chan struct{}, in *fuse.RenameIn, from, to string) fuse.Status {
	n.fsys.notNegative(in.Newdir, to)
	return n.RawFileSystem.Rename(cancel, in, from, to)
}
