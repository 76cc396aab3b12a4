package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"path"
	"syscall"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Mkdir sends MKDIR and the LSTAT of the new directory back to back (our
// server runs requests on one path in order): one round trip.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	defer n.fsys.changingIn(n, []string{name})()
	s := n.fsys.stamp()
	p := n.child(name)
	perm := mode & 0o7777
	a, err := n.fsys.at(ctx).Mkdir(p, perm)
	if err != nil {
		if isFailure(err) && n.exists(ctx, p) {
			return nil, syscall.EEXIST
		}
		return nil, n.errno(ctx, "mkdir", p, err)
	}
	n.named(name)
	// Our server makes it with exactly perm. One that cut it with its
	// umask is set right (the attributes read back in the same round
	// trip).
	if a.Mode&0o7777 != perm {
		if a, err = n.fsys.at(ctx).Setstat(p, sftpc.Attrs{Flags: sftpc.AttrPermissions, Mode: perm}); err != nil {
			return nil, n.errno(ctx, "mkdir", p, err)
		}
	}
	n.fsys.learnOwner(a)
	ch := n.newChild(ctx, s, name, a, out)
	if cn, ok := ch.Operations().(*node); ok {
		cn.knowNames(nil, s) // made here, empty
		// Its files will be the directory's owner's: the delegator's
		// user, and the group it gave the directory (its own, or that
		// of a setgid parent, which the new directory inherits).
		cn.mu.Lock()
		cn.childUID, cn.childGID, cn.ownerKnown = a.UID, a.GID, true
		cn.mu.Unlock()
	}
	return ch, 0
}

// Mknod: devices, fifos and sockets are not carried by SFTP.
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// openDeferredChild opens the deferred handles of child name, which is
// about to go.
func (n *node) openDeferredChild(ctx context.Context, name string) {
	if cn := n.childNode(name); cn != nil {
		cn.openDeferred(ctx)
	}
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	defer n.fsys.freed.Add(1)                                           // once the remove is out (statfs)
	answered := n.fsys.changingIn(n, []string{name}, n.childNode(name)) // its link count, if linked elsewhere
	n.openDeferredChild(ctx, name)
	p := n.child(name)
	n.fsys.warm.voidTree(p) // a file made under the name later is not this one
	if cn := n.childNode(name); cn != nil {
		cn.forgetWritten() // its link count moves: the delegator says what it is
	}
	if n.removeBehind(ctx, name, p, false, answered) {
		return 0
	}
	defer answered()
	if err := n.fsys.at(ctx).Remove(p); err != nil {
		return n.errno(ctx, "unlink", p, err)
	}
	n.unnamed(name)
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	defer n.fsys.freed.Add(1)
	answered := n.fsys.changingIn(n, []string{name})
	p := n.child(name)
	n.fsys.warm.voidTree(p)
	if n.removeBehind(ctx, name, p, true, answered) {
		return 0
	}
	defer answered()
	err := n.fsys.at(ctx).RemoveDirectory(p)
	if err == nil {
		n.unnamed(name)
		return 0
	}
	// SFTP v3 has no ENOTEMPTY: the server says SSH_FX_FAILURE. Probe.
	if isFailure(err) {
		if ents, lerr := n.fsys.at(ctx).ReadDir(p); lerr == nil && len(ents) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	return n.errno(ctx, "rmdir", p, err)
}

// removeBehind sends the REMOVE of file name, or the RMDIR of directory
// name, at p, and returns without waiting for its answer: rm -rf, make
// clean or git's temporary files then cost no round trip a file. Only a
// request naming p, or a directory above it, waits for the answer first
// (writeBehind.settleFor): a create or a lookup of the same name, a
// listing of the directory, a rename.
//
// It is done only where the answer is known: the kernel found the name
// and it is of the kind asked for (it checks both before asking), the
// mount is read-write (else the kernel refuses), and the delegator's user
// may write n (filesystem.mayRemoveIn). A directory must also be empty as
// far as this mount knows (its names, listed within an entry timeout, all
// removed here since), and the server must run its RMDIR after the
// removes of its names sent before (sftpc's RmdirsInOrder). What may
// still refuse it — the delegator changing the tree meanwhile, an
// immutable file, a failing disk — is logged, and the name is taken back
// out of the kernel's cache, so that it shows again and its directory's
// rmdir fails with ENOTEMPTY (removal.settled). Writes and opens in flight
// are settled first: a file created behind must exist before its REMOVE
// runs — unless the server keeps the REMOVE behind the file's create
// (settleBeforeRemove). It reports false where it does not apply.
func (n *node) removeBehind(ctx context.Context, name, p string, dir bool, answered func()) bool {
	n.mu.Lock()
	uid, mode := n.uid, n.mode
	n.mu.Unlock()
	if !n.fsys.mayRemoveIn(uid, mode) {
		return false
	}
	if dir {
		if cn := n.childNode(name); cn == nil || !cn.knownEmpty() {
			return false
		}
	}
	w := &n.fsys.conn.writes
	client, gen := n.fsys.conn.liveAt()
	// A remove the server may refuse waits for its answer: the refusal
	// must reach the caller.
	if client == nil || (dir && !client.RmdirsInOrder()) || client.Policy().NoDelete || refusesGit(client, p) {
		return false
	}
	if err := w.settleBeforeRemove(ctx, n.childNode(name), client, gen); err != nil {
		return false
	}
	n.unnamed(name)
	rm := &removal{dir: n, name: name, path: p, isDir: dir, answered: answered}
	var call *sftpc.Call
	if dir {
		call = client.StartRemoveDirectory(p)
	} else {
		call = client.StartRemove(p)
	}
	if upto := w.queueRemove(rm, gen, call); upto != 0 {
		// Past the bound; an interrupted wait leaves them queued.
		w.settleTo(ctx, upto)
	}
	return true
}

// knownEmpty reports whether n, a directory, holds no name as far as this
// mount knows (listed or made within an entry timeout, emptied since).
func (n *node) knownEmpty() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.names != nil && len(n.names) == 0 && time.Now().Before(n.namesUntil)
}

// removal is a file or directory removed behind: name in dir, at path on
// the delegator's side; answered ends the mount's change
// (filesystem.changing).
type removal struct {
	dir      *node
	name     string
	path     string
	isDir    bool
	answered func()
}

// resend sends the removal again on the live connection, without settling
// first: it is itself being settled (finish).
func (r *removal) resend(ctx context.Context) error {
	_, err := retried(ctx, r.dir.fsys.conn, func(cl *sftpc.Client) (struct{}, error) {
		if r.isDir {
			return unit(cl.RemoveDirectory(r.path))
		}
		return unit(cl.Remove(r.path))
	})
	return err
}

// settled takes the answer to the removal. The name not being there is
// what was asked. Any other failure is logged, and the name is taken back
// out of what the mount and the kernel know, so that it shows again.
func (r *removal) settled(err error) {
	defer r.answered()
	if err == nil || errors.Is(err, iofs.ErrNotExist) {
		return
	}
	r.dir.fsys.log.Warn("fs: the delegator refused a removal made here; the name is still there", "path", r.path, "err", err)
	r.dir.notGone(r.name)
}

const (
	renameNoReplace = 0x1 // RENAME_NOREPLACE
	renameExchange  = 0x2 // RENAME_EXCHANGE
)

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	defer n.fsys.freed.Add(1) // what it replaced is gone
	np, _ := newParent.EmbeddedInode().Operations().(*node)
	var replaced *node
	if np != nil {
		replaced = np.childNode(newName)
	}
	moved := n.childNode(name)
	from := n.child(name)
	to := path.Join("/"+newParent.EmbeddedInode().Path(nil), newName)
	names := []string{name}
	switch {
	case np == n:
		names = append(names, newName)
	case np != nil:
		defer np.fsys.changingIn(np, []string{newName})()
	}
	answered := n.fsys.changingIn(n, names, moved, replaced)
	// What was fetched ahead under either name is of the tree before.
	n.fsys.warm.voidTree(from)
	n.fsys.warm.voidTree(to)
	defer func() {
		answered()
		n.fsys.warm.voidTree(from)
		n.fsys.warm.voidTree(to)
	}()
	switch {
	case flags&renameExchange != 0:
		return syscall.EINVAL // SFTP cannot swap atomically
	case flags&renameNoReplace != 0:
		if n.exists(ctx, to) {
			return syscall.EEXIST
		}
	}
	if np != nil {
		np.openDeferredChild(ctx, newName) // it may be replaced
	}
	err := n.fsys.at(ctx).PosixRename(from, to)
	if err == nil {
		moved.loggedAs(n.fsys, to)
		n.unnamed(name)
		if np != nil {
			np.named(newName)
		}
		return 0
	}
	if isFailure(err) {
		src, serr := n.fsys.at(ctx).Lstat(from)
		dst, derr := n.fsys.at(ctx).Lstat(to)
		switch {
		case serr == nil && derr == nil && dst.IsDir() && !src.IsDir():
			return syscall.EISDIR
		case serr == nil && derr == nil && !dst.IsDir() && src.IsDir():
			return syscall.ENOTDIR
		case derr == nil && dst.IsDir():
			if ents, lerr := n.fsys.at(ctx).ReadDir(to); lerr == nil && len(ents) > 0 {
				return syscall.ENOTEMPTY
			}
		}
	}
	return n.errno(ctx, "rename", from, err)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	defer n.fsys.changingIn(n, []string{name})()
	s := n.fsys.stamp()
	p := n.child(name)
	a, err := n.fsys.at(ctx).Symlink(target, p)
	if err != nil {
		if isFailure(err) && n.exists(ctx, p) {
			return nil, syscall.EEXIST
		}
		return nil, n.errno(ctx, "symlink", p, err)
	}
	n.named(name)
	child := n.newChild(ctx, s, name, a, out)
	cn, _ := child.Operations().(*node)
	cn.loggedAs(n.fsys, p)
	return child, 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	p := n.rpath()
	target, err := n.fsys.at(ctx).ReadLink(p)
	if err != nil {
		return nil, n.errno(ctx, "readlink", p, err)
	}
	return []byte(target), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	tn, _ := target.EmbeddedInode().Operations().(*node)
	defer n.fsys.changingIn(n, []string{name}, tn)() // tn: its link count
	if tn != nil {
		tn.forgetWritten()
	}
	s := n.fsys.stamp()
	p := n.child(name)
	from := "/" + target.EmbeddedInode().Path(nil)
	a, err := n.fsys.at(ctx).Link(from, p)
	if err != nil {
		if isFailure(err) && n.exists(ctx, p) {
			return nil, syscall.EEXIST
		}
		return nil, n.errno(ctx, "link", p, err)
	}
	n.named(name)
	n.fsys.changed.add(p) // the node keeps its first name's flag
	n.fsys.fillAttr(a, &out.Attr)
	n.fsys.setEntryTimeouts(out, s)
	// The same inode under a second name, as the kernel expects of link(2).
	return target.EmbeddedInode(), 0
}
