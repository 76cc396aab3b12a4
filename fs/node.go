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

	// changes counts the writes and truncations made through this mount:
	// what a handle read at its open is stale once it moved.
	changes atomic.Uint64
	// warmVoided is the fetched-ahead store's count of directories kept,
	// plus one, when n's path was last voided in it (warmStore.voidNode).
	warmVoided atomic.Uint64
	// changedAt is filesystem.changes at the start or the answer of the
	// latest change made to n through this mount, whichever came last
	// (filesystem.changing).
	changedAt atomic.Uint64
	// allNamedAt is, for a directory, filesystem.changes at the latest
	// change to one of its entries not noted by name (namedAt): a change
	// to the directory as a whole, or past namedMax names.
	allNamedAt atomic.Uint64
	// kernelListed is the connection whose exact watch the kernel keeps
	// n's listing under (dirHandle), 0 if it keeps none; forgetEntries
	// clears it.
	kernelListed atomic.Uint64
	// logged is whether n's change was logged under its present name
	// (changeLog).
	logged atomic.Bool

	// mu guards every field below it, and is never held across a call to
	// the server (a lookup's Lstat, a create's open) or into go-fuse's
	// notifications: a request holds it only to read or record what the
	// server answered.
	mu sync.Mutex
	// namedAt is, for a directory, filesystem.changes at the latest
	// change the mount made to each name in it, by name: a name made,
	// removed or renamed, a file written. A listing older than the
	// directory's last change still answers a lookup of a name the change
	// did not touch (entryUnchangedSince): git's index.lock does not make
	// .git's every other name a round trip.
	namedAt map[string]uint64
	// seen is the file's size and mtime as last reported by the server,
	// opened the same at the last open; when they agree at an open, the
	// kernel may keep its cached pages (FOPEN_KEEP_CACHE).
	seen, opened version
	// kernel is the file's size and mtime as the kernel was last told
	// (told).
	kernel contentVersion
	// linked is whether the file had more than one link when last
	// reported (linkedElsewhere).
	linked bool
	// whole is whether the kernel was handed all of the file (a read of
	// it to its end, or its start stored with its open) since the mount
	// last wrote it or was told it changed: an open that keeps the pages
	// then needs nothing more from the delegator, unless the kernel
	// evicted some.
	whole bool
	// readEnd is where the last read that reached the mount ended;
	// scattered counts those that did not start there, and prefetched
	// whether the file was read whole since it last changed (prefetch.go).
	readEnd    int64
	scattered  int
	prefetched bool
	fetches    int // times read whole since it last changed
	// atime is the access time last reported, what a change of the mtime
	// alone sends again (v3 sets both); 0 if none was.
	atime uint32
	// uid, gid and mode are the owner and mode last reported, as the
	// kernel was told them (removeBehind, Access).
	uid, gid, mode uint32
	// deferred are the handles whose remote open waits for a first read.
	deferred map[*fileHandle]struct{}
	// writers are the handles open for writing, until released; closing
	// those released whose writes are not settled yet.
	writers, closing map[*fileHandle]struct{}
	// lateErr is the error of a write sent behind to n that its handle
	// did not report, until reported (fileHandle.failed).
	lateErr error
	// names is what n, a directory, holds as far as this mount knows —
	// from a listing, or from having made it empty — until namesUntil (an
	// entry timeout later). Until then a lookup of any other name is
	// ENOENT without asking: tools probe for many names that do not exist,
	// in directories they have just made above all (untar, git).
	names      map[string]struct{}
	namesUntil time.Time
	// listing is n's last READDIR while it is kept (listingRing).
	listing *listing
	// attrs is n's attributes, of a directory, as last read from the
	// delegator while an exact watch held (keepAttrs); nil if none were.
	attrs *keptAttrs
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

// knowNames records that directory n holds exactly names, as read since
// stamp s, for as long as the kernel keeps entries (keepFor). The stamp
// is checked under n.mu: the watch's invalidation, which counts before it
// forgets n's names (under n.mu too), either shortens them or forgets
// them after they are set.
func (n *node) knowNames(names []string, s uint64) {
	m := make(map[string]struct{}, len(names))
	for _, name := range names {
		m[name] = struct{}{}
	}
	n.mu.Lock()
	entry, _ := n.fsys.keepFor(s)
	n.names, n.namesUntil = m, time.Now().Add(entry)
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

// forgetNames drops what n's names (and its last miss) say, and that the
// kernel keeps its listing: a name the mount made turned out not to be
// there (notGone), or the watch reported a change in n.
func (n *node) forgetNames() {
	n.kernelListed.Store(0)
	n.mu.Lock()
	n.names, n.missed = nil, ""
	n.mu.Unlock()
}

// notGone is what a change the mount made to name in n, a directory,
// and answered before the delegator did, leaves where the delegator
// refused it (a file created behind, a removal behind): the names the
// mount knows in n, and what the kernel keeps of name and of n's listing,
// are forgotten, so that name is looked up again.
func (n *node) notGone(name string) {
	n.forgetNames()
	fsys := n.fsys
	fsys.closing.Add(1)
	go func() {
		defer fsys.closing.Done()
		// Not from here: the request settling may be one the kernel
		// runs holding the directory's lock, which the notice takes.
		n.NotifyEntry(name)
		n.NotifyContent(0, 0)
	}()
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
func (n *node) stamp(v uint64) { stampMax(&n.changedAt, v) }

// namedMax bounds the names a directory notes changes to by name
// (namedAt): past them, a change to one counts as one to them all.
const namedMax = 64

// entryChanged notes a change at count v to the entries of n, a directory:
// to those named, or to all if names is nil.
func (n *node) entryChanged(v uint64, names ...string) {
	if names == nil {
		stampMax(&n.allNamedAt, v)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.namedAt == nil {
		n.namedAt = map[string]uint64{}
	}
	for _, name := range names {
		n.namedAt[name] = max(n.namedAt[name], v)
	}
	if len(n.namedAt) > namedMax {
		for _, at := range n.namedAt {
			stampMax(&n.allNamedAt, at)
		}
		clear(n.namedAt)
	}
}

// entryUnchangedSince reports whether n, a directory, has had no change
// through this mount to its entry name after count at.
func (n *node) entryUnchangedSince(name string, at uint64) bool {
	if n.allNamedAt.Load() > at {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.namedAt[name] <= at
}

func stampMax(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if old >= v || a.CompareAndSwap(old, v) {
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

// told records the attributes a reply gives the kernel, and drops the
// kernel's pages of n, a file, where they may be stale. The mount asks
// the kernel not to do so itself (ExplicitDataCacheControl): it did
// whenever a file's size or mtime moved, after this mount's own writes
// too, whose pages are right. Where the watch is exact, what others
// change is reported, and the pages are kept.
func (n *node) told(a *fuse.Attr) {
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return
	}
	exact := n.fsys.exact() && !linkedElsewhere(a)
	now := contentVersion{size: a.Size, mtime: a.Mtime, nsec: a.Mtimensec}
	n.mu.Lock()
	was := n.kernel
	n.kernel = now
	n.mu.Unlock()
	if !exact && was != (contentVersion{}) && was != now {
		n.NotifyContent(0, 0)
	}
}

// contentVersion is what the kernel's cached pages are checked against.
type contentVersion struct {
	size, mtime uint64
	nsec        uint32
}

func (n *node) observe(a *fuse.Attr) {
	n.mu.Lock()
	n.linked = linkedElsewhere(a)
	n.seen = versionOf(a)
	n.atime = uint32(a.Atime)
	n.uid, n.gid, n.mode = a.Owner.Uid, a.Owner.Gid, a.Mode
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

// orphaned reports whether the kernel has taken n out of the tree (the
// file was removed, or its entry forgotten): it has no path any more, and
// rpath would name the export's root. A request by path must not be sent
// for it.
func (n *node) orphaned() bool {
	_, parent := n.Parent()
	return parent == nil && !n.IsRoot()
}

func (n *node) errno(ctx context.Context, op, p string, err error) syscall.Errno {
	return toErrno(ctx, n.fsys.log, op, p, err)
}

// newChild is the inode for a, named name under n.
// The kernel keeps the entry and attributes as keepFor(s) says.
func (n *node) newChild(ctx context.Context, s uint64, name string, a sftpc.Attrs, out *fuse.EntryOut) *fs.Inode {
	n.fsys.fillAttr(a, &out.Attr)
	return n.childFromAttr(ctx, s, name, out)
}

// childFromAttr is the inode for the attributes in out, named name under n:
// the one the kernel already knows if it is still of the same kind, so that
// what it remembers — its cached pages above all (FOPEN_KEEP_CACHE) —
// outlives an expired entry; else a new one.
func (n *node) childFromAttr(ctx context.Context, s uint64, name string, out *fuse.EntryOut) *fs.Inode {
	n.fsys.setEntryTimeouts(out, s)
	mode := out.Attr.Mode & syscall.S_IFMT
	ch := n.GetChild(name)
	if ch == nil || ch.StableAttr().Mode != mode {
		ch = n.NewInode(ctx, &node{fsys: n.fsys}, fs.StableAttr{Mode: mode})
	}
	if cn, ok := ch.Operations().(*node); ok {
		cn.observe(&out.Attr)
		cn.told(&out.Attr)
	}
	return ch
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	s := n.fsys.stamp()
	// A hidden name is refused as the server refuses it, also where a
	// listing (which leaves it out) would say it is not there. It is
	// still asked, so that its audit log records the refusal.
	if p := n.child(name); n.fsys.hidden(p) {
		n.fsys.at(ctx).Lstat(p)
		return nil, syscall.EACCES
	}
	if n.absent(name) {
		return nil, syscall.ENOENT
	}
	l := n.keptListing()
	if l == nil {
		if l, _ = n.fromWarm(); l == nil {
			l, _ = n.fromAhead()
		}
		// Either made n's names known: a name the listing lacks is not
		// there, as it would be had the listing been n's already (git
		// looks up a dozen such names in .git at every command).
		if l != nil && n.absent(name) {
			return nil, syscall.ENOENT
		}
	}
	if l != nil {
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
	at := n.fsys.changes.Load()
	a, err := n.fsys.at(ctx).Lstat(p) // a round trip: no lock is held here
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			n.mu.Lock()
			n.missed, n.missedAt = name, time.Now()
			n.mu.Unlock()
		}
		return nil, n.errno(ctx, "lookup", p, err)
	}
	ch := n.newChild(ctx, s, name, a, out)
	if cn, ok := ch.Operations().(*node); ok {
		cn.keepAttrs(&out.Attr, at, s)
	}
	return ch, 0
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

// keptAttrs is a node's attributes as read from the delegator when the
// mount's change count was at, under the exact watch of connection exact.
type keptAttrs struct {
	a     fuse.Attr
	at    uint64
	exact uint64
}

// keepAttrs records a, the attributes of n, a directory or a regular
// file, read when the mount's change count was at and its stamp s, if an
// exact watch reported nothing meanwhile: a GETATTR is answered from them
// until the mount changes n or the watch reports a change to it
// (forgetEntries moves its stamp past at), or the watch ends. The kernel
// keeps attributes for an hour, but asks again for those of each
// directory and file it has read (a read moves the access time, which it
// then counts as unknown): a walk of a tree then asks the delegator
// nothing for its stats, nor git for its index's after reading it. A file
// with links elsewhere is left out (linkedElsewhere). The access time
// answered is the one read, which a read on the delegator's side may
// have moved since, as a read of a file the kernel answers from its pages
// does not.
func (n *node) keepAttrs(a *fuse.Attr, at, s uint64) {
	g := n.fsys.exactSince(s)
	switch a.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
	case syscall.S_IFREG:
		if linkedElsewhere(a) {
			return
		}
	default:
		return
	}
	if g == 0 {
		return
	}
	n.mu.Lock()
	n.attrs = &keptAttrs{a: *a, at: at, exact: g}
	n.mu.Unlock()
}

// keptAttrs is n's attributes as last read, if they are still current.
func (n *node) keptAttrs() (fuse.Attr, bool) {
	n.mu.Lock()
	k := n.attrs
	n.mu.Unlock()
	if k == nil || k.exact != n.fsys.exactNow() || !n.unchangedSince(k.at) {
		return fuse.Attr{}, false
	}
	return k.a, true
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s := n.fsys.stamp()
	defer func() {
		// After the answer: an invalidation meanwhile shortens it.
		out.SetTimeout(n.fsys.attrFor(s, &out.Attr))
	}()
	if h := n.writer(); h != nil {
		if a, ok := h.attrsBehind(); ok {
			n.fsys.fillAttr(a, &out.Attr)
			n.observe(&out.Attr)
			n.told(&out.Attr)
			return 0
		}
	}
	if h, ok := f.(*fileHandle); ok {
		// A handle that only reads changes nothing: the attributes kept
		// are as good as its own (git's fstat of each file it reads).
		if h.flags&syscall.O_ACCMODE == syscall.O_RDONLY {
			if a, ok := n.keptAttrs(); ok {
				out.Attr = a
				return 0
			}
		}
		a, err := h.stat(ctx)
		if err != nil {
			return n.errno(ctx, "fstat", n.rpath(), err)
		}
		n.fsys.fillAttr(a, &out.Attr)
		n.observe(&out.Attr)
		n.told(&out.Attr)
		return 0
	}
	if a, ok := n.keptAttrs(); ok {
		out.Attr = a
		n.observe(&out.Attr)
		n.told(&out.Attr)
		return 0
	}
	if n.orphaned() {
		return syscall.ENOENT // its open handles are asked above
	}
	at := n.fsys.changes.Load()
	p := n.rpath()
	a, err := n.fsys.at(ctx).Lstat(p)
	if err != nil {
		return n.errno(ctx, "getattr", p, err)
	}
	n.fsys.fillAttr(a, &out.Attr)
	n.observe(&out.Attr)
	n.told(&out.Attr)
	n.keepAttrs(&out.Attr, at, s)
	return 0
}

// statfsFresh is how long an answer of the delegator's statvfs is used
// again. df, and file servers above all (dbench's Qfsinfo: a third of a
// millisecond, every time, against a twentieth through FUSE alone), ask
// it many times a second. Free space that a second of the mount's own
// writes may have moved is what a network file system shows; what frees
// space through the mount (a remove, a rename over a name, a truncation)
// voids it at once, so space freed here shows in the next answer.
const statfsFresh = time.Second

// statfsCache is the last statvfs answer, while fresh.
type statfsCache struct {
	mu    sync.Mutex
	st    sftpc.StatVFS
	at    time.Time
	freed uint64 // filesystem.freed when it was asked
}

func (c *statfsCache) get(freed uint64) (sftpc.StatVFS, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st, !c.at.IsZero() && c.freed == freed && time.Since(c.at) < statfsFresh
}

func (c *statfsCache) put(st sftpc.StatVFS, freed uint64, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st, c.freed, c.at = st, freed, at
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	f := n.fsys
	freed := f.freed.Load()
	st, ok := f.statfs.get(freed)
	if !ok {
		// A file removed while its close was still on the way holds its
		// space on the delegator until the close lands.
		f.awaitClosing(ctx)
		asked := time.Now()
		var err error
		if st, err = f.at(ctx).StatVFS("/"); err != nil {
			return n.errno(ctx, "statfs", "/", err)
		}
		f.statfs.put(st, freed, asked)
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

// Owner is a local uid and gid: the user a mount is lent to
// (Options.LentTo), whom fillAttr shows as every file's owner.
type Owner struct{ UID, GID uint32 }

// fillAttr copies what SFTP v3 carries: type and permission bits, size,
// owner (or the user the mount is lent to), access and modification
// times, and the link count our server adds.
func (f *filesystem) fillAttr(a sftpc.Attrs, out *fuse.Attr) {
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
	if f.lentTo != nil {
		out.Uid, out.Gid = f.lentTo.UID, f.lentTo.GID
	}
	out.Blksize = 4096
	out.Blocks = (out.Size + 511) / 512
}
