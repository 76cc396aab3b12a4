package fs

import (
	"context"
	"syscall"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Setattr sends what changes in one SETSTAT (FSETSTAT with a handle) and
// the request that reads the attributes back right behind it: one round
// trip. Ownership is not delegated: chown is accepted and has no effect.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := n.fsys.refuseWrite("setattr of", n); errno != 0 {
		return errno
	}
	s := n.fsys.stamp()
	defer n.fsys.changing(n)()
	p := n.rpath()
	var set sftpc.Attrs
	if size, ok := in.GetSize(); ok {
		set.Flags |= sftpc.AttrSize
		set.Size = size
		n.forgetWritten()
		n.changes.Add(1)
		defer n.fsys.freed.Add(1) // a truncation frees space (statfs)
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
		if (!mok || (!aok && set.Atime == 0)) && !n.orphaned() {
			a, err := n.fsys.at(ctx).Lstat(p)
			if err != nil {
				return n.errno(ctx, "utimens", p, err)
			}
			set.Atime, set.Mtime = a.Atime, a.Mtime
		}
		if mok {
			set.Mtime = uint32(mtime.Unix())
			set.MtimeNsec, set.HasTimes = uint32(mtime.Nanosecond()), true
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
		if a, ok := h.setattrBehind(set, mok); ok {
			n.fsys.fillAttr(a, &out.Attr)
			n.observe(&out.Attr)
			n.told(&out.Attr)
			out.SetTimeout(n.fsys.attr) // made up here, as at the create
			return 0
		}
		h.mu.Lock()
		h.madeOK = false // the delegator's attributes from now on
		h.mu.Unlock()
		a, err = h.setstat(ctx, set)
	} else if n.orphaned() {
		return syscall.ENOENT // removed, and no handle to set it through
	} else {
		a, err = n.fsys.at(ctx).Setstat(p, set)
	}
	if err != nil {
		return n.errno(ctx, "setattr", p, err)
	}
	if set.Flags&(sftpc.AttrSize|sftpc.AttrPermissions) != 0 || mok {
		n.logChange()
	}
	n.fsys.fillAttr(a, &out.Attr)
	n.observe(&out.Attr)
	n.told(&out.Attr)
	// go-fuse sets the attribute timeout after GETATTR but not after
	// SETATTR: without this the kernel would ask again at the next stat.
	out.SetTimeout(n.fsys.attrFor(s, &out.Attr))
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
	n.fsys.fillAttr(o.Attrs, &a)
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
	n.mu.Lock()
	n.whole = true
	n.mu.Unlock()
	return fuse.FOPEN_KEEP_CACHE | noFlush
}

// noFlush spares a read-only handle the FLUSH of each close(2): it has no
// writes to wait for or errors to report, and the mount takes no POSIX
// locks that a flush would drop (one FUSE request less per file grep or
// git reads).
const noFlush = fuse.FOPEN_NOFLUSH

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if err := n.takeLateErr(); err != nil {
		return nil, 0, n.errno(ctx, "write", n.rpath(), err)
	}
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		if errno := n.fsys.refuseWrite("open for writing of", n); errno != 0 {
			return nil, 0, errno
		}
	}
	if flags&syscall.O_TRUNC != 0 {
		n.changes.Add(1)
		defer n.fsys.changing(n)()
		n.mu.Lock()
		n.whole = false
		n.mu.Unlock()
	}
	// The kernel refreshed the attributes before this open if they were
	// stale; if the file is as it was at the last open, its cached pages
	// are still right. Where the watch is exact, they are unless it said
	// the file changed since (which forgets the last open): the mount's
	// own writes moved its mtime, but they are in the pages.
	exact := n.fsys.exact()
	n.mu.Lock()
	keep := (n.seen == n.opened || exact && !n.linked) && n.opened != (version{}) && flags&syscall.O_TRUNC == 0
	n.opened = n.seen
	kernelSize := n.seen.size // every size the kernel is told passes observe
	whole := n.whole
	n.mu.Unlock()
	if keep && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		// Reads will mostly come from the page cache: open remotely only
		// if one does not. Where the kernel may lack a page (the tail of
		// a file the mount wrote), what was read ahead of a reader going
		// through the directory is used all the same.
		if !whole {
			if h, _ := n.openWarm(int(flags), kernelSize); h != nil {
				return h, fuse.FOPEN_KEEP_CACHE | noFlush, 0
			}
			if h, _ := n.openAhead(ctx, int(flags), kernelSize); h != nil {
				return h, fuse.FOPEN_KEEP_CACHE | noFlush, 0
			}
		}
		return n.deferredHandle(int(flags)), fuse.FOPEN_KEEP_CACHE | noFlush, 0
	}
	if n.orphaned() {
		return nil, 0, syscall.ENOENT
	}
	p := n.rpath()
	pf := pflags(int(flags) &^ (syscall.O_CREAT | syscall.O_EXCL))
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		// Not in the page cache: the first read is coming. The open
		// brings the file's start along (one round trip, not two, for
		// the small files grep and git read whole), unless it was read
		// ahead (no round trip at all).
		if h, fuseFlags := n.openWarm(int(flags), kernelSize); h != nil {
			return h, fuseFlags, 0
		}
		if h, fuseFlags := n.openAhead(ctx, int(flags), kernelSize); h != nil {
			return h, fuseFlags, 0
		}
		changes := n.changes.Load()
		f, o, err := n.fsys.at(ctx).OpenRead(p, pf, 0, openHead(kernelSize))
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
	if flags&syscall.O_TRUNC != 0 {
		n.logChange()
	}
	var fuseFlags uint32
	if keep {
		fuseFlags = fuse.FOPEN_KEEP_CACHE
	}
	return n.newHandle(f, int(flags)), fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	defer n.fsys.changingIn(n, []string{name}, n.childNode(name))()
	s := n.fsys.stamp()
	p := n.child(name)
	perm := mode & 0o7777
	if child, h := n.createBehind(ctx, s, name, flags, perm, out); h != nil {
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
	child := n.newChild(ctx, s, name, a, out)
	cn := child.Operations().(*node)
	cn.loggedAs(n.fsys, p)
	if flags&syscall.O_TRUNC != 0 {
		cn.changes.Add(1)
	}
	cn.mu.Lock()
	cn.opened = cn.seen // the kernel's pages are this file's: it is being made
	cn.mu.Unlock()
	h := cn.newHandleAt(f, int(flags), p)
	if a.Size == 0 {
		h.mu.Lock()
		h.writtenOK = true // empty as made (or truncated) by this open
		h.mu.Unlock()
	}
	return child, h, 0, 0
}

// createBehind creates file name without waiting for the delegator: the
// open goes out under a handle named here (sftpc.StartOpenNamed), and the
// file's writes, its futimens and its close follow it on the wire at once.
// A file that tar, git or a build writes then costs one round trip (that
// of its close or its futimens) instead of two. It is done only where the
// answer is known: n's names say name is not there, the delegator's owner
// of a new file in n was seen on the last one or told (room.creator),
// and the mode is perm (our
// server, the only one with named opens, creates with exactly that, but
// never sets the setuid, setgid and sticky bits: a file asked for with
// them is created the plain way, which reads back what was made).
// And only with O_EXCL or O_TRUNC: a file the delegator made meanwhile is
// then refused or emptied, never opened at a size the kernel was not told
// (an append would write over its start). Should the open fail anyway (the
// delegator made the name meanwhile, its disk is full), the handle's next
// write, flush (close) or fsync reports it, as for a failed write
// (fileHandle.created). It returns a nil handle where it does not apply.
func (n *node) createBehind(ctx context.Context, s uint64, name string, flags, perm uint32, out *fuse.EntryOut) (*fs.Inode, *fileHandle) {
	n.mu.Lock()
	uid, gid, known := n.childUID, n.childGID, n.ownerKnown
	dirMode, dirGID := n.mode, n.gid
	n.mu.Unlock()
	if !known {
		uid, gid, known = n.fsys.room.creator(dirMode, dirGID)
	}
	// A name too long for the delegator's file system must fail at the
	// open, where the caller looks for it, not at a later fsync.
	if !known || flags&(syscall.O_EXCL|syscall.O_TRUNC) == 0 || perm&^0o777 != 0 || len(name) > 255 || !n.absent(name) {
		return nil, nil
	}
	// The server refuses a hidden name, and one of git's control paths
	// where it protects them: that must reach the caller.
	if n.fsys.hidden(n.child(name)) || refusesGit(n.fsys.conn.live(), n.child(name)) {
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
	// The name costs the delegator's write limit what it costs there
	// (sshd's inodeCost); without room for it, it is made the plain way,
	// and a refusal fails the open.
	cost := int64(len(name)) + nameCost
	behind := n.fsys.roomFor(ctx, gen, cost)
	defer n.fsys.room.queued(cost)
	if !behind {
		return nil, nil
	}
	// The file's times are chosen here and set by the delegator as it
	// creates the file, so that what the kernel is told now is what a
	// stat will say later (a made-up time, in whole seconds, changed to
	// the delegator's by itself: make and git saw a change nobody made).
	made := time.Now()
	f, call := client.StartOpenNamed(p, pflags(int(flags)|syscall.O_CREAT), perm, made)
	n.named(name)
	sec := uint32(made.Unix())
	madeAttrs := sftpc.Attrs{Flags: sftpc.AttrSize | sftpc.AttrUIDGID | sftpc.AttrPermissions | sftpc.AttrTimes,
		Mode: syscall.S_IFREG | perm, UID: uid, GID: gid,
		Atime: sec, Mtime: sec, MtimeNsec: uint32(made.Nanosecond()),
		Ctime: uint64(sec), CtimeNsec: uint32(made.Nanosecond()), HasTimes: true, Nlink: 1, HasNlink: true}
	child := n.newChild(ctx, s, name, madeAttrs, out)
	// The entry is kept as any other; the rest of the attributes (the
	// ctime) are made up here, so they are kept only the configured time.
	out.SetAttrTimeout(n.fsys.attr)
	cn := child.Operations().(*node)
	cn.loggedAs(n.fsys, p)
	if flags&syscall.O_TRUNC != 0 {
		cn.changes.Add(1)
	}
	cn.mu.Lock()
	cn.opened = cn.seen // the kernel's pages are this file's: it is being made
	cn.mu.Unlock()
	h := cn.newHandleAt(f, int(flags), p)
	h.mu.Lock()
	h.gen, h.open, h.creating, h.perm = gen, call, true, perm
	h.made, h.madeOK = madeAttrs, true
	h.writtenOK = true // made empty here
	h.mu.Unlock()
	n.fsys.conn.writes.queueOpen(h, gen, call)
	return child, h
}

func (n *node) exists(ctx context.Context, p string) bool {
	_, err := n.fsys.at(ctx).Lstat(p)
	return err == nil
}
