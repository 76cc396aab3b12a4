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
type dirHandle struct {
	node *node
	l    *listing
	pos  int
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	l, cached := n.cachedListing()
	if !cached {
		var err error
		if l, err = n.list(ctx); err != nil {
			return nil, 0, n.errno(ctx, "readdir", n.rpath(), err)
		}
	}
	return &dirHandle{node: n, l: l}, 0, 0
}

// dots is how many entries a listing has before the directory's own:
// "." and "..", which ls -a, find and shells expect, as on any disk.
const dots = 2

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
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
	if ch, ok := d.node.fromListing(ctx, d.l, name, out); ok {
		return ch, 0
	}
	return nil, syscall.ENOENT // go-fuse lists the name, with no attributes
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno { return 0 }

func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {}
