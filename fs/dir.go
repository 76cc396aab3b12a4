package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirHandle is an open directory: one READDIR exchange fetched the names
// with their attributes, and lookups during READDIRPLUS are answered from
// it, so listing a directory costs no round trip per entry.
//
// While the delegator's watch is exact, the kernel keeps what it read of
// a directory across opens (FOPEN_CACHE_DIR with FOPEN_KEEP_CACHE), as it
// keeps entries and pages: a walk of a tree it listed before asks the
// mount for no listing, only to open and close each directory. It drops
// what it keeps when the mount changes the directory (it counts such
// changes itself) and when told of a change on the delegator's side
// (changedThere, drop). A handle opened so lists only when the kernel
// asks, and then lists again if the directory changed since its open:
// what the kernel keeps must not be older than the last change it was
// told of.
type dirHandle struct {
	node *node
	l    *listing // nil until the kernel reads, for a handle kept
	kept bool     // opened with keptDir
	pos  int
}

// keptDir has the kernel keep a directory's listing across opens.
const keptDir = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if g := n.kernelListed.Load(); g != 0 && g == n.fsys.exactNow() {
		// The kernel keeps the listing it read last: it asks for one
		// only if it dropped it since.
		return &dirHandle{node: n, kept: true}, keptDir, 0
	}
	l, err := n.listingNow(ctx)
	if err != nil {
		return nil, 0, n.errno(ctx, "readdir", n.rpath(), err)
	}
	if n.kernelKeeps(l) {
		return &dirHandle{node: n, l: l, kept: true}, keptDir, 0
	}
	return &dirHandle{node: n, l: l}, 0, 0
}

// kernelKeeps reports whether the kernel may keep l, n's listing, across
// opens (it was read under the exact watch that still holds), and records
// the answer for n's next open.
func (n *node) kernelKeeps(l *listing) bool {
	if g := n.fsys.exactNow(); g != 0 && l.exact == g {
		n.kernelListed.Store(g)
		return true
	}
	n.kernelListed.Store(0)
	return false
}

// listingNow is n's listing: the one kept if it may be used again, else
// the one read ahead, else a new one. A listing not kept starts the
// reading ahead of those below and beside (listahead.go).
func (n *node) listingNow(ctx context.Context) (*listing, error) {
	if l, ok := n.cachedListing(); ok {
		return l, nil
	}
	l, ok := n.fromWarm()
	if !ok {
		l, ok = n.fromAhead()
	}
	if !ok {
		var err error
		if l, err = n.list(ctx); err != nil {
			return nil, err
		}
	}
	n.readAheadOf(l)
	return l, nil
}

// current makes sure the kernel is handed a listing no older than the
// directory's last change: a handle kept lists when first read, and
// again if the directory changed since its listing was read.
func (d *dirHandle) current(ctx context.Context) syscall.Errno {
	n := d.node
	if d.l != nil && (!d.kept || n.unchangedSince(d.l.at)) {
		return 0
	}
	l, err := n.listingNow(ctx)
	if err != nil {
		return n.errno(ctx, "readdir", n.rpath(), err)
	}
	d.l = l
	n.kernelKeeps(l)
	return 0
}

// dots is how many entries a listing has before the directory's own:
// "." and "..", which ls -a, find and shells expect, as on any disk.
const dots = 2

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if d.pos == 0 || d.l == nil {
		if errno := d.current(ctx); errno != 0 {
			return nil, errno
		}
	}
	switch {
	case d.pos == 0:
		d.pos++
		return &fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: d.node.StableAttr().Ino, Off: uint64(d.pos)}, 0
	case d.pos == 1:
		d.pos++
		parent := d.node.EmbeddedInode()
		if _, p := parent.Parent(); p != nil {
			parent = p
		}
		return &fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: parent.StableAttr().Ino, Off: uint64(d.pos)}, 0
	case d.pos-dots >= len(d.l.entries):
		return nil, 0
	}
	e := d.l.entries[d.pos-dots]
	d.pos++
	return &fuse.DirEntry{Name: e.Name, Mode: e.Attrs.Mode, Off: uint64(d.pos)}, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if errno := d.current(ctx); errno != 0 {
		return errno
	}
	if off > uint64(len(d.l.entries)+dots) {
		return syscall.EINVAL
	}
	d.pos = int(off)
	return 0
}

// Lookup answers READDIRPLUS from the listing, as a lookup in the
// directory would be. An entry the listing no longer answers for (it is
// past its time, or the mount changed the entry since) goes without
// attributes: the kernel looks the name up when it is used, where asking
// here would cost a round trip per entry.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if d.l == nil {
		return nil, syscall.ENOENT // not read yet: go-fuse reads before it looks up
	}
	if ch, ok := d.node.fromListing(ctx, d.l, name, out); ok {
		return ch, 0
	}
	return nil, syscall.ENOENT // go-fuse lists the name, with no attributes
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno { return 0 }

func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {}
