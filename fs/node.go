package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/awcp/awcp/fs/sftpc"
)

// node is a file, directory or symlink of the delegated tree. Its remote
// path is derived from its place in the inode tree, which go-fuse keeps
// current across renames.
type node struct {
	fs.Inode
	fsys *filesystem

	mu sync.Mutex // guards seen, opened, atime, uid, mode, deferred, writers, names, namesUntil and listing
	// seen is the file's size and mtime as last reported by the server,
	// opened the same at the last open; when they agree at an open, the
	// kernel may keep its cached pages (FOPEN_KEEP_CACHE).
	seen, opened version
	// atime is the access time last reported, what a change of the mtime
	// alone sends again (v3 sets both); 0 if none was.
	atime uint32
	// uid and mode are the owner and mode last reported (removeBehind).
	uid, mode uint32
	// deferred are the handles whose remote open waits for a first read.
	deferred map[*fileHandle]struct{}
	// writers are the handles open for writing, until released.
	writers map[*fileHandle]struct{}
	// changes counts the writes and truncations made through this mount:
	// what a handle read at its open is stale once it moved.
	changes atomic.Uint64
	// changedAt is filesystem.changes at the start or the answer of the
	// latest change made to n through this mount, whichever came last
	// (filesystem.changing).
	changedAt atomic.Uint64
	// names is what n, a directory, holds as far as this mount knows —
	// from a listing, or from having made it empty — until namesUntil (an
	// entry timeout later). Until then a lookup of any other name is
	// ENOENT without asking: tools probe for many names that do not exist,
	// in directories they have just made above all (untar, git).
	names      map[string]struct{}
	namesUntil time.Time
	// listing is n's last READDIR while it is kept (listingRing).
	listing *listing
	// childUID and childGID are the owner the delegator gave the last
	// file created in n, a directory, if ownerKnown: what the next one
	// gets too (createBehind).
	childUID, childGID uint32
	ownerKnown         bool
	// missed is the last name a lookup in n found missing on the
	// delegator's side, at missedAt: the kernel's create of a file
	// follows the lookup that found it missing.
	missed   string
	missedAt time.Time
}

// knowNames records that directory n holds exactly names, for an entry
// timeout.
func (n *node) knowNames(names []string) {
	m := make(map[string]struct{}, len(names))
	for _, name := range names {
		m[name] = struct{}{}
	}
	n.mu.Lock()
	n.names, n.namesUntil = m, time.Now().Add(n.fsys.entry)
	n.mu.Unlock()
}

// absent reports whether directory n is known not to hold name: from its
// names, or from a lookup that found it missing within an entry timeout.
func (n *node) absent(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if name == n.missed && now.Before(n.missedAt.Add(n.fsys.entry)) {
		return true
	}
	if n.names == nil || now.After(n.namesUntil) {
		return false
	}
	_, ok := n.names[name]
	return !ok
}

// forgetNames drops what n's names (and its last miss) say: a name the
// mount made turned out not to be there (createBehind).
func (n *node) forgetNames() {
	n.mu.Lock()
	n.names, n.missed = nil, ""
	n.mu.Unlock()
}

// named and unnamed keep n's known names current with this mount's own
// changes.
func (n *node) named(name string) {
	n.mu.Lock()
	if n.names != nil {
		n.names[name] = struct{}{}
	}
	if n.missed == name {
		n.missed = ""
	}
	n.mu.Unlock()
}

func (n *node) unnamed(name string) {
	n.mu.Lock()
	delete(n.names, name)
	n.mu.Unlock()
}

// stamp records a change to n at count v; a stamp never goes back.
func (n *node) stamp(v uint64) {
	for {
		old := n.changedAt.Load()
		if old >= v || n.changedAt.CompareAndSwap(old, v) {
			return
		}
	}
}

// unchangedSince reports whether n, nil for a name the kernel has no node
// for, was not changed through this mount after count at.
func (n *node) unchangedSince(at uint64) bool {
	return n == nil || n.changedAt.Load() <= at
}

// childNode is n's child name, nil if it has none.
func (n *node) childNode(name string) *node {
	if ch := n.GetChild(name); ch != nil {
		cn, _ := ch.Operations().(*node)
		return cn
	}
	return nil
}

// version identifies a file's content as far as attributes can tell: the
// ctime too, which a rewrite moves even where it puts the mtime back.
type version struct {
	size         uint64
	mtime, ctime uint64
	nsec, cnsec  uint32
}

func versionOf(a *fuse.Attr) version {
	return version{size: a.Size, mtime: a.Mtime, nsec: a.Mtimensec, ctime: a.Ctime, cnsec: a.Ctimensec}
}

func (n *node) observe(a *fuse.Attr) {
	n.mu.Lock()
	n.seen = versionOf(a)
	n.atime = uint32(a.Atime)
	n.uid, n.mode = a.Owner.Uid, a.Mode
	n.mu.Unlock()
}

// Every namespace operation is implemented: go-fuse reports success for a
// missing Unlink or Rmdir, so none may be left out.
var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
)

// rpath is the node's path on the delegator's side ("/" is the export).
func (n *node) rpath() string { return "/" + n.Path(nil) }

func (n *node) child(name string) string { return path.Join(n.rpath(), name) }

func (n *node) errno(ctx context.Context, op, p string, err error) syscall.Errno {
	return toErrno(ctx, n.fsys.log, op, p, err)
}

// newChild is the inode for a, named name under n.
func (n *node) newChild(ctx context.Context, name string, a sftpc.Attrs, out *fuse.EntryOut) *fs.Inode {
	fillAttr(a, &out.Attr)
	return n.childFromAttr(ctx, name, out)
}

// childFromAttr is the inode for the attributes in out, named name under n:
// the one the kernel already knows if it is still of the same kind, so that
// what it remembers — its cached pages above all (FOPEN_KEEP_CACHE) —
// outlives an expired entry; else a new one.
func (n *node) childFromAttr(ctx context.Context, name string, out *fuse.EntryOut) *fs.Inode {
	n.fsys.setEntryTimeouts(out)
	mode := out.Attr.Mode & syscall.S_IFMT
	ch := n.GetChild(name)
	if ch == nil || ch.StableAttr().Mode != mode {
		ch = n.NewInode(ctx, &node{fsys: n.fsys}, fs.StableAttr{Mode: mode})
	}
	if cn, ok := ch.Operations().(*node); ok {
		cn.observe(&out.Attr)
	}
	return ch
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.absent(name) {
		return nil, syscall.ENOENT
	}
	if l := n.keptListing(); l != nil {
		if ch, ok := n.fromListing(ctx, l, name, out); ok {
			return ch, 0
		}
	}
	if l, ok := n.relist(ctx); ok {
		if _, held := l.position(name); !held {
			return nil, syscall.ENOENT
		}
		if ch, ok := n.fromListing(ctx, l, name, out); ok {
			return ch, 0
		}
	}
	p := n.child(name)
	a, err := n.fsys.at(ctx).Lstat(p) // a round trip: no lock is held here
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			n.mu.Lock()
			n.missed, n.missedAt = name, time.Now()
			n.mu.Unlock()
		}
		return nil, n.errno(ctx, "lookup", p, err)
	}
	return n.newChild(ctx, name, a, out), 0
}

// relistMax is the most names a directory may have held for a lookup in
// it to list it again (relist).
const relistMax = 64

// relist lists n again for a lookup in it, where n is a small directory
// whose names the mount knew until they expired: one round trip, as the
// LSTAT would be, after which the lookups of its other names within the
// entry timeout need none. git adds each object with three lookups of
// names its object directory does not hold (the object twice, its
// temporary file once), and each source file with a lookup in a
// directory it listed before. ok is false where it does not apply, or
// the listing failed: the lookup then asks for its name alone.
func (n *node) relist(ctx context.Context) (l *listing, ok bool) {
	n.mu.Lock()
	expired := n.names != nil && len(n.names) <= relistMax && !time.Now().Before(n.namesUntil)
	n.mu.Unlock()
	if !expired {
		return nil, false
	}
	l, err := n.list(ctx)
	return l, err == nil
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*fileHandle); ok {
		a, err := h.stat(ctx)
		if err != nil {
			return n.errno(ctx, "fstat", n.rpath(), err)
		}
		fillAttr(a, &out.Attr)
		n.observe(&out.Attr)
		return 0
	}
	p := n.rpath()
	a, err := n.fsys.at(ctx).Lstat(p)
	if err != nil {
		return n.errno(ctx, "getattr", p, err)
	}
	fillAttr(a, &out.Attr)
	n.observe(&out.Attr)
	return 0
}

// Setattr sends what changes in one SETSTAT (FSETSTAT with a handle) and
// the request that reads the attributes back right behind it: one round
// trip. Ownership is not delegated: chown is accepted and has no effect.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	defer n.fsys.changing(n)()
	p := n.rpath()
	var set sftpc.Attrs
	if size, ok := in.GetSize(); ok {
		set.Flags |= sftpc.AttrSize
		set.Size = size
		n.changes.Add(1)
	}
	if mode, ok := in.GetMode(); ok {
		set.Flags |= sftpc.AttrPermissions
		set.Mode = mode & 0o7777
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		set.Flags |= sftpc.AttrTimes
		// v3 sets both times at once: the one not asked for is sent as
		// it was last seen (asked for if it never was).
		n.mu.Lock()
		set.Atime, set.Mtime = n.atime, uint32(n.seen.mtime)
		n.mu.Unlock()
		if !mok || (!aok && set.Atime == 0) {
			a, err := n.fsys.at(ctx).Lstat(p)
			if err != nil {
				return n.errno(ctx, "utimens", p, err)
			}
			set.Atime, set.Mtime = a.Atime, a.Mtime
		}
		if mok {
			set.Mtime = uint32(mtime.Unix())
		}
		if aok {
			set.Atime = uint32(atime.Unix())
		}
	}
	if set.Flags == 0 {
		return n.Getattr(ctx, f, out)
	}
	var (
		a   sftpc.Attrs
		err error
	)
	h, _ := f.(*fileHandle)
	if h == nil {
		// futimens(2) and truncate(2) come without a handle. If the file
		// is open for writing here, going through that handle keeps the
		// change behind the writes without waiting for them (see
		// fileHandle.ordered): one round trip instead of two for tar.
		h = n.writer()
	}
	if h != nil {
		a, err = h.setstat(ctx, set)
	} else {
		a, err = n.fsys.at(ctx).Setstat(p, set)
	}
	if err != nil {
		return n.errno(ctx, "setattr", p, err)
	}
	fillAttr(a, &out.Attr)
	n.observe(&out.Attr)
	// go-fuse sets the attribute timeout after GETATTR but not after
	// SETATTR: without this the kernel would ask again at the next stat.
	out.SetTimeout(n.fsys.attr)
	return 0
}

// openedWith records on h what an open for reading brought along (the
// attributes, the file's start) and returns the open's FUSE flags. A start
// that is the whole file, of the size the kernel has, is stored in the
// kernel's page cache (FUSE_NOTIFY_STORE) and kept there
// (FOPEN_KEEP_CACHE): the reader's first read is then answered by the
// kernel, with no READ request.
func (n *node) openedWith(h *fileHandle, o sftpc.Opened, changes, kernelSize uint64) uint32 {
	if o.Attrs.Flags == 0 { // a server without open-read@awcp
		return noFlush
	}
	var a fuse.Attr
	fillAttr(o.Attrs, &a)
	n.observe(&a)
	n.mu.Lock()
	n.opened = n.seen // the pages the kernel reads now are of this version
	n.mu.Unlock()
	h.head = headRead{data: o.Head, eof: o.EOF, changes: changes, version: versionOf(&a), ok: true}
	if !o.EOF || len(o.Head) == 0 || a.Size != kernelSize || uint64(len(o.Head)) != kernelSize ||
		n.changes.Load() != changes || n.WriteCache(0, o.Head) != 0 {
		return noFlush
	}
	// A write through the mount that raced the store has moved changes
	// by now: the kernel holds a page being written until the WRITE is
	// answered, and Write counts before it answers. The store may have
	// put back what the write replaced; drop it.
	if n.changes.Load() != changes {
		n.NotifyContent(0, 0)
		return noFlush
	}
	return fuse.FOPEN_KEEP_CACHE | noFlush
}

// noFlush spares a read-only handle the FLUSH of each close(2): it has no
// writes to wait for or errors to report, and the mount takes no POSIX
// locks that a flush would drop (one FUSE request less per file grep or
// git reads).
const noFlush = fuse.FOPEN_NOFLUSH

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		n.changes.Add(1)
		defer n.fsys.changing(n)()
	}
	// The kernel refreshed the attributes before this open if they were
	// stale; if the file is as it was at the last open, its cached pages
	// are still right.
	n.mu.Lock()
	keep := n.seen == n.opened && n.seen != (version{}) && flags&syscall.O_TRUNC == 0
	n.opened = n.seen
	kernelSize := n.seen.size // every size the kernel is told passes observe
	n.mu.Unlock()
	if keep && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		// Reads will mostly come from the page cache: open remotely only
		// if one does not.
		return n.deferredHandle(int(flags)), fuse.FOPEN_KEEP_CACHE | noFlush, 0
	}
	p := n.rpath()
	pf := pflags(int(flags) &^ (syscall.O_CREAT | syscall.O_EXCL))
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		// Not in the page cache: the first read is coming. The open
		// brings the file's start along (one round trip, not two, for
		// the small files grep and git read whole), unless it was read
		// ahead (no round trip at all).
		if h, fuseFlags := n.openAhead(ctx, int(flags), kernelSize); h != nil {
			return h, fuseFlags, 0
		}
		changes := n.changes.Load()
		f, o, err := n.fsys.at(ctx).OpenRead(p, pf, 0, headSize)
		if err != nil {
			return nil, 0, n.errno(ctx, "open", p, err)
		}
		h := n.newHandle(f, int(flags))
		return h, n.openedWith(h, o, changes, kernelSize), 0
	}
	f, err := n.fsys.at(ctx).OpenFile(p, pf, 0)
	if err != nil {
		return nil, 0, n.errno(ctx, "open", p, err)
	}
	var fuseFlags uint32
	if keep {
		fuseFlags = fuse.FOPEN_KEEP_CACHE
	}
	return n.newHandle(f, int(flags)), fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	defer n.fsys.changing(n, n.childNode(name))()
	p := n.child(name)
	perm := mode & 0o7777
	if child, h := n.createBehind(ctx, name, flags, perm, out); h != nil {
		return child, h, 0, 0
	}
	// The open brings the file's attributes along (OpenRead, reading
	// nothing): the new entry needs them, and they show the mode made.
	f, o, err := n.fsys.at(ctx).OpenRead(p, pflags(int(flags)|syscall.O_CREAT), perm, 0)
	if err != nil {
		if isFailure(err) && n.exists(ctx, p) {
			return nil, nil, 0, syscall.EEXIST
		}
		return nil, nil, 0, n.errno(ctx, "create", p, err)
	}
	n.named(name)
	a := o.Attrs
	if a.Flags == 0 { // a server without OpenRead
		if a, err = f.Stat(); err != nil {
			f.Close()
			return nil, nil, 0, n.errno(ctx, "create", p, err)
		}
	}
	// Our server creates with exactly perm. One that cut it with its umask
	// (or kept an existing file's mode, as open(2) does) is set right.
	if a.Mode&0o7777 != perm && flags&syscall.O_EXCL != 0 {
		if a, err = f.Setstat(sftpc.Attrs{Flags: sftpc.AttrPermissions, Mode: perm}); err != nil {
			f.Close()
			return nil, nil, 0, n.errno(ctx, "create", p, err)
		}
	}
	n.mu.Lock()
	n.childUID, n.childGID, n.ownerKnown = a.UID, a.GID, true
	n.mu.Unlock()
	n.fsys.learnOwner(a)
	child := n.newChild(ctx, name, a, out)
	cn := child.Operations().(*node)
	if flags&syscall.O_TRUNC != 0 {
		cn.changes.Add(1)
	}
	return child, cn.newHandle(f, int(flags)), 0, 0
}

// createBehind creates file name without waiting for the delegator: the
// open goes out under a handle named here (sftpc.StartOpenNamed), and the
// file's writes, its futimens and its close follow it on the wire at once.
// A file that tar, git or a build writes then costs one round trip (that
// of its close or its futimens) instead of two. It is done only where the
// answer is known: n's names say name is not there, the delegator's owner
// of a new file in n was seen on the last one, and the mode is perm (our
// server, the only one with named opens, creates with exactly that, but
// never sets the setuid, setgid and sticky bits: a file asked for with
// them is created the plain way, which reads back what was made).
// And only with O_EXCL or O_TRUNC: a file the delegator made meanwhile is
// then refused or emptied, never opened at a size the kernel was not told
// (an append would write over its start). Should the open fail anyway (the
// delegator made the name meanwhile, its disk is full), the handle's next
// write, flush (close) or fsync reports it, as for a failed write
// (fileHandle.created). It returns a nil handle where it does not apply.
func (n *node) createBehind(ctx context.Context, name string, flags, perm uint32, out *fuse.EntryOut) (*fs.Inode, *fileHandle) {
	n.mu.Lock()
	uid, gid, known := n.childUID, n.childGID, n.ownerKnown
	n.mu.Unlock()
	if !known || flags&(syscall.O_EXCL|syscall.O_TRUNC) == 0 || perm&^0o777 != 0 || !n.absent(name) {
		return nil, nil
	}
	// A file of that name unlinked behind goes first: the server runs a
	// named open by its handle, not its path, so it would not wait.
	p := n.child(name)
	if err := n.fsys.conn.writes.settleRemoves(ctx, p); err != nil {
		return nil, nil
	}
	client, gen := n.fsys.conn.liveAt()
	if client == nil || !client.OpensNamed() {
		return nil, nil
	}
	f, call := client.StartOpenNamed(p, pflags(int(flags)|syscall.O_CREAT), perm)
	n.named(name)
	now := uint32(time.Now().Unix())
	child := n.newChild(ctx, name, sftpc.Attrs{Mode: syscall.S_IFREG | perm, UID: uid, GID: gid,
		Atime: now, Mtime: now, Nlink: 1, HasNlink: true}, out)
	cn := child.Operations().(*node)
	if flags&syscall.O_TRUNC != 0 {
		cn.changes.Add(1)
	}
	h := cn.newHandle(f, int(flags))
	h.mu.Lock()
	h.gen, h.open, h.creating, h.perm = gen, call, true, perm
	h.mu.Unlock()
	n.fsys.conn.writes.queueOpen(h, gen, call)
	return child, h
}

func (n *node) exists(ctx context.Context, p string) bool {
	_, err := n.fsys.at(ctx).Lstat(p)
	return err == nil
}

// Mkdir sends MKDIR and the LSTAT of the new directory back to back (our
// server runs requests on one path in order): one round trip.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	defer n.fsys.changing(n)()
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
	ch := n.newChild(ctx, name, a, out)
	if cn, ok := ch.Operations().(*node); ok {
		cn.knowNames(nil) // made here, empty
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
	answered := n.fsys.changing(n, n.childNode(name)) // its link count, if linked elsewhere
	n.openDeferredChild(ctx, name)
	p := n.child(name)
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
	answered := n.fsys.changing(n)
	p := n.child(name)
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
// runs. It reports false where it does not apply.
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
	if err := w.settleFor(ctx); err != nil {
		return false
	}
	client, gen := n.fsys.conn.liveAt()
	if client == nil || (dir && !client.RmdirsInOrder()) {
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
	fsys := r.dir.fsys
	fsys.log.Warn("fs: the delegator refused a removal made here; the name is still there", "path", r.path, "err", err)
	r.dir.forgetNames()
	fsys.closing.Add(1)
	go func() {
		defer fsys.closing.Done()
		// Not from here: the request settling may be one the kernel
		// runs holding the directory's lock, which the notice takes.
		r.dir.NotifyEntry(r.name)
	}()
}

const (
	renameNoReplace = 0x1 // RENAME_NOREPLACE
	renameExchange  = 0x2 // RENAME_EXCHANGE
)

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, _ := newParent.EmbeddedInode().Operations().(*node)
	var replaced *node
	if np != nil {
		replaced = np.childNode(newName)
	}
	defer n.fsys.changing(n, np, n.childNode(name), replaced)()
	from := n.child(name)
	to := path.Join("/"+newParent.EmbeddedInode().Path(nil), newName)
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
	defer n.fsys.changing(n)()
	p := n.child(name)
	a, err := n.fsys.at(ctx).Symlink(target, p)
	if err != nil {
		if isFailure(err) && n.exists(ctx, p) {
			return nil, syscall.EEXIST
		}
		return nil, n.errno(ctx, "symlink", p, err)
	}
	n.named(name)
	return n.newChild(ctx, name, a, out), 0
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
	defer n.fsys.changing(n, tn)() // tn: its link count
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
	fillAttr(a, &out.Attr)
	n.fsys.setEntryTimeouts(out)
	// The same inode under a second name, as the kernel expects of link(2).
	return target.EmbeddedInode(), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st, err := n.fsys.at(ctx).StatVFS("/")
	if err != nil {
		return n.errno(ctx, "statfs", "/", err)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.Frsize = uint32(st.Bsize), uint32(st.Frsize)
	out.NameLen = uint32(st.Namemax)
	return 0
}

// Extended attributes are not carried by SFTP v3.

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.ENOTSUP
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) { return 0, 0 }

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno { return syscall.ENOTSUP }

// fillAttr copies what SFTP v3 carries: type and permission bits, size,
// owner, access and modification times, and the link count our server adds.
func fillAttr(a sftpc.Attrs, out *fuse.Attr) {
	out.Mode = a.Mode
	out.Size = a.Size
	out.Nlink = a.Nlink
	if !a.HasNlink {
		out.Nlink = 1
		if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			out.Nlink = 2
		}
	}
	out.Mtime, out.Mtimensec = uint64(a.Mtime), 0
	out.Ctime, out.Ctimensec = out.Mtime, 0
	if a.HasTimes {
		out.Mtimensec = a.MtimeNsec
		out.Ctime, out.Ctimensec = a.Ctime, a.CtimeNsec
	}
	out.Atime, out.Atimensec = uint64(a.Atime), 0
	out.Uid, out.Gid = a.UID, a.GID
	out.Blksize = 4096
	out.Blocks = (out.Size + 511) / 512
}
