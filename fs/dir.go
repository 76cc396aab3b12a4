package fs

import (
	"context"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/awcp/awcp/sshd"
)

// dirHandle is an open directory: one READDIR exchange fetched the names
// with their attributes, and lookups during READDIRPLUS are answered from
// it, so listing a directory costs no round trip per entry.
type dirHandle struct {
	node    *node
	entries []os.FileInfo
	byName  map[string]os.FileInfo
	pos     int
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	p := n.rpath()
	ents, err := n.fsys.at(ctx).ReadDir(p)
	if err != nil {
		return nil, 0, n.errno(ctx, "readdir", p, err)
	}
	d := &dirHandle{node: n, entries: ents, byName: make(map[string]os.FileInfo, len(ents))}
	names := make([]string, len(ents))
	for i, fi := range ents {
		d.byName[fi.Name()] = fi
		names[i] = fi.Name()
	}
	n.knowNames(names)
	return d, 0, 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if d.pos >= len(d.entries) {
		return nil, 0
	}
	fi := d.entries[d.pos]
	d.pos++
	return &fuse.DirEntry{Name: fi.Name(), Mode: sshd.ModeBits(fi.Mode()), Off: uint64(d.pos)}, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off > uint64(len(d.entries)) {
		return syscall.EINVAL
	}
	d.pos = int(off)
	return 0
}

// Lookup answers READDIRPLUS from the listing, falling back to LSTAT for a
// name it does not hold.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	fi, ok := d.byName[name]
	if !ok {
		return d.node.Lookup(ctx, name, out)
	}
	return d.node.newChild(ctx, name, fi, out), 0
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno { return 0 }

func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {}
