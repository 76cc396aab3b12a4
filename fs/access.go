package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var _ fs.NodeAccesser = (*node)(nil)

// Access answers access(2) from the owner and mode the kernel was last
// told, as the kernel itself checks permissions: without it, go-fuse asks
// Getattr, which asks the delegator — a round trip for each of git's
// access() calls on its config and excludes, at every command. A node
// whose attributes were never reported is asked for them. The answer is
// advice only: the delegator checks every request it is sent.
func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	n.mu.Lock()
	uid, gid, mode := n.uid, n.gid, n.mode
	n.mu.Unlock()
	if mode == 0 {
		var out fuse.AttrOut
		if errno := n.Getattr(ctx, nil, &out); errno != 0 {
			return errno
		}
		uid, gid, mode = out.Owner.Uid, out.Owner.Gid, out.Mode
	}
	caller, ok := fuse.FromContext(ctx)
	if !ok || allowed(caller.Uid, caller.Gid, uid, gid, mode, mask) {
		return 0
	}
	return syscall.EACCES
}

// allowed reports whether a caller of uid and gid may do what mask asks
// (R_OK, W_OK, X_OK) to a file of owner fileUID:fileGID and mode, as
// access(2) decides from the mode bits. Supplementary groups are not
// known here: where the group's bits and the others' differ for mask, a
// caller neither the owner nor in the file's primary group is allowed
// (the delegator decides in the end; a mount lent to the agent shows every
// file as its own, and never gets here).
func allowed(uid, gid, fileUID, fileGID, mode, mask uint32) bool {
	mask &= 7
	if mask == 0 {
		return true
	}
	if uid == 0 {
		return mask&1 == 0 || mode&0o111 != 0 || mode&syscall.S_IFMT == syscall.S_IFDIR
	}
	bits := mode
	switch {
	case uid == fileUID:
		bits = mode >> 6
	case gid == fileGID:
		bits = mode >> 3
	case (mode>>3)&mask != mode&mask:
		return true // a supplementary group may decide it: cannot tell
	}
	return bits&mask == mask
}
