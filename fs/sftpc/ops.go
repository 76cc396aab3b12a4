package sftpc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// Attribute flags.
const (
	AttrSize        = wire.AttrSize
	AttrUIDGID      = wire.AttrUIDGID
	AttrPermissions = wire.AttrPermissions
	AttrTimes       = wire.AttrACModTime // atime and mtime, always together in v3
)

// Attrs are a file's attributes as SFTP v3 carries them; in a request,
// Flags says which are set, and only size, permissions and times are sent.
type Attrs = wire.FileAttrs

// settable is what a request may set of a: size, permission bits, times.
func settable(a Attrs) *Attrs {
	s := &Attrs{Flags: a.Flags & (AttrSize | AttrPermissions | AttrTimes), Size: a.Size, Mode: a.Mode & 0o7777,
		Atime: a.Atime, Mtime: a.Mtime}
	if a.HasTimes && a.Flags&AttrTimes != 0 {
		// Our server sets the mtime to the nanosecond; others ignore it.
		s.MtimeNsec, s.HasTimes = a.MtimeNsec, true
	}
	return s
}

func (c *Client) path(typ byte, p string) *Call {
	return c.start(typ, nil, func(e *encoder) { e.Str(p) })
}

// Within makes the client's paths relative to dir, a directory on the
// server (as RealPath names it): every path the client is given is taken
// under dir ("/" is dir itself), so nothing above dir can be named. A
// symlink's target is sent as given. Call it before the client is shared.
func (c *Client) Within(dir string) { c.root = dir }

// at is p, a path under the client's directory, as the server names it.
func (c *Client) at(p string) string {
	if c.root == "" {
		return p
	}
	return path.Join(c.root, path.Clean("/"+p))
}

// RealPath is the server's canonical absolute form of p (REALPATH), as
// given: not under the client's directory.
func (c *Client) RealPath(p string) (string, error) {
	names, err := c.path(wire.Realpath, p).names()
	if err != nil {
		return "", err
	}
	if len(names) != 1 {
		return "", errBadReply
	}
	return names[0].Name, nil
}

func (c *Client) extended(name string, args ...string) *Call {
	return c.start(wire.Extended, nil, func(e *encoder) {
		e.Str(name)
		for _, a := range args {
			e.Str(a)
		}
	})
}

// StartLstat sends LSTAT; the Call's Attrs has the answer.
func (c *Client) StartLstat(p string) *Call { return c.path(wire.Lstat, c.at(p)) }

// Lstat is the attributes of p, not following a final symlink.
func (c *Client) Lstat(p string) (Attrs, error) { return c.StartLstat(p).Attrs() }

// StartSetstat sends SETSTAT with the attributes a.Flags names.
func (c *Client) StartSetstat(p string, a Attrs) *Call {
	return c.start(wire.Setstat, nil, func(e *encoder) { e.Str(c.at(p)); settable(a).Encode(e) })
}

// Setstat sets the attributes a.Flags names.
func (c *Client) Setstat(p string, a Attrs) error { return c.StartSetstat(p, a).Err() }

// StartMkdir sends MKDIR with permissions perm.
func (c *Client) StartMkdir(p string, perm uint32) *Call {
	return c.start(wire.Mkdir, nil, func(e *encoder) {
		e.Str(c.at(p))
		settable(Attrs{Flags: AttrPermissions, Mode: perm}).Encode(e)
	})
}

// StartRemove sends REMOVE, unlinking a file.
func (c *Client) StartRemove(p string) *Call { return c.path(wire.Remove, c.at(p)) }

// Remove unlinks a file.
func (c *Client) Remove(p string) error { return c.StartRemove(p).Err() }

// StartRemoveDirectory sends RMDIR.
func (c *Client) StartRemoveDirectory(p string) *Call { return c.path(wire.Rmdir, c.at(p)) }

// RemoveDirectory removes an empty directory.
func (c *Client) RemoveDirectory(p string) error { return c.StartRemoveDirectory(p).Err() }

// RmdirsInOrder reports whether the server runs an RMDIR after the removes
// of names in the directory sent before it (wire.RmdirInOrder).
func (c *Client) RmdirsInOrder() bool { return c.rmdirInOrder }

// RemovesAfterOpens reports whether the server runs a REMOVE of a path
// after a named open of it sent before (wire.RemoveAfterOpen).
func (c *Client) RemovesAfterOpens() bool { return c.rmAfterOpen }

// PosixRename renames, replacing the target (posix-rename@openssh.com).
func (c *Client) PosixRename(from, to string) error {
	return c.extended("posix-rename@openssh.com", c.at(from), c.at(to)).Err()
}

// StartLink sends a hard link request (hardlink@openssh.com). Our server
// runs it in order with the requests on to.
func (c *Client) StartLink(from, to string) *Call {
	return c.extended("hardlink@openssh.com", c.at(from), c.at(to))
}

// Link makes a hard link.
func (c *Client) Link(from, to string) error { return c.StartLink(from, to).Err() }

// StartSymlink sends SYMLINK, making link point at target. The target goes
// first, as OpenSSH (and our server) read them. Our server runs it in order
// with the requests on link.
func (c *Client) StartSymlink(target, link string) *Call {
	return c.start(wire.Symlink, nil, func(e *encoder) { e.Str(target); e.Str(c.at(link)) })
}

// Symlink makes link point at target.
func (c *Client) Symlink(target, link string) error { return c.StartSymlink(target, link).Err() }

// ReadLink is a symlink's target.
func (c *Client) ReadLink(p string) (string, error) {
	names, err := c.path(wire.Readlink, c.at(p)).names()
	if err != nil {
		return "", err
	}
	if len(names) != 1 {
		return "", errBadReply
	}
	return names[0].Name, nil
}

// StatVFS is statvfs@openssh.com's answer.
type StatVFS struct {
	Bsize, Frsize, Blocks, Bfree, Bavail, Files, Ffree, Favail, Fsid, Flag, Namemax uint64
}

// StatVFS describes the file system p is on.
func (c *Client) StatVFS(p string) (StatVFS, error) {
	typ, d, err := c.extended("statvfs@openssh.com", c.at(p)).wait()
	if err != nil {
		return StatVFS{}, err
	}
	if typ != wire.ExtendedReply {
		return StatVFS{}, statusOf(typ, d)
	}
	var s StatVFS
	for _, v := range []*uint64{&s.Bsize, &s.Frsize, &s.Blocks, &s.Bfree, &s.Bavail, &s.Files, &s.Ffree,
		&s.Favail, &s.Fsid, &s.Flag, &s.Namemax} {
		*v = d.U64()
	}
	return s, d.Err
}

// Room is what the server lets the session write (wire.Room).
type Room struct {
	Left uint64 // bytes under the export's write limit; wire.RoomUnbounded if none
	Free uint64 // bytes free on the file system the writes go to
	// OwnerKnown: the server told who a file the session creates
	// belongs to — UID and GID, or, with DirGroup, its directory's
	// group whatever its set-group-ID bit.
	OwnerKnown bool
	UID, GID   uint32
	DirGroup   bool
}

// TellsRoom reports whether the server answers Room.
func (c *Client) TellsRoom() bool { return c.room }

// Room asks how much more the session may write (wire.Room).
func (c *Client) Room() (Room, error) {
	typ, d, err := c.extended(wire.Room).wait()
	if err != nil {
		return Room{}, err
	}
	if typ != wire.ExtendedReply {
		return Room{}, statusOf(typ, d)
	}
	r := Room{Left: d.U64(), Free: d.U64()}
	if len(d.B) >= 12 {
		r.UID, r.GID = d.U32(), d.U32()
		r.DirGroup, r.OwnerKnown = d.U32()&wire.RoomDirGroup != 0, true
	}
	return r, d.Err
}

// Entry is a directory entry.
type Entry struct {
	Name  string
	Attrs Attrs
}

func (c *Call) names() ([]Entry, error) {
	typ, d, err := c.wait()
	if err != nil {
		return nil, err
	}
	if typ != wire.Name {
		return nil, statusOf(typ, d)
	}
	n := d.U32()
	if int(n) > len(d.B)/12 { // a name, a long name and flags at least
		return nil, errBadReply
	}
	out := make([]Entry, 0, n)
	for ; n > 0; n-- {
		name := d.Str()
		d.Str() // the long name, for humans
		out = append(out, Entry{Name: name, Attrs: wire.DecodeAttrs(&d)})
	}
	return out, d.Err
}

// ReadDir lists directory p, without "." and "..". With a server that
// lists in one request (wire.List), a directory of up to wire.ListMax
// entries costs one round trip. Otherwise two READDIRs are kept in flight,
// so a directory of one page costs two round trips (OPENDIR and READDIR),
// and the handle is closed without waiting.
func (c *Client) ReadDir(p string) ([]Entry, error) {
	if call := c.StartList(p); call != nil {
		ents, err := c.ListResult(call)
		var st *StatusError
		if !errors.As(err, &st) || st.Code != wire.Failure { // FAILURE: too many; list them the plain way
			return ents, err
		}
	}
	h, err := c.path(wire.Opendir, c.at(p)).handle()
	if err != nil {
		return nil, err
	}
	defer c.path(wire.Close, h) // nobody waits for the answer
	var out []Entry
	next := c.path(wire.Readdir, h)
	for {
		ahead := c.path(wire.Readdir, h)
		page, err := next.names()
		if errors.Is(err, io.EOF) {
			<-ahead.Done()
			return out, nil
		}
		if err != nil {
			<-ahead.Done()
			return nil, err
		}
		for _, e := range page {
			if e.Name != "." && e.Name != ".." {
				out = append(out, e)
			}
		}
		next = ahead
	}
}

// StartList sends the listing of directory p in one request (wire.List),
// nil where the server does not list so; ListResult takes its answer.
func (c *Client) StartList(p string) *Call {
	if !c.list {
		return nil
	}
	return c.extended(wire.List, c.at(p))
}

// ListResult is the listing a StartList call was answered with, without
// "." and "..". A directory of more than wire.ListMax entries is a
// FAILURE: ReadDir lists it.
func (c *Client) ListResult(call *Call) ([]Entry, error) { return call.names() }

// PageEntry is an entry of a directory's page (StartListRead), with the
// file's contents where it is a small regular file the server sent whole.
type PageEntry struct {
	Entry
	Data    []byte
	HasData bool
}

// StartListRead asks for a page of directory p's entries from the
// start'th on, with the contents of its regular files of up to small
// bytes, in an answer of at most budget bytes (wire.ListRead); nil where
// the server does not serve it. ListReadResult takes its answer.
func (c *Client) StartListRead(p string, start, small, budget int) *Call {
	if !c.listRead {
		return nil
	}
	return c.start(wire.Extended, nil, func(e *encoder) {
		e.Str(wire.ListRead)
		e.Str(c.at(p))
		e.U32(uint32(start))
		e.U32(uint32(small))
		e.U32(uint32(min(budget, MaxData)))
	})
}

// ListReadResult is the page a StartListRead call was answered with, and
// how many entries the directory holds in all.
func (c *Client) ListReadResult(call *Call) (total int, page []PageEntry, err error) {
	typ, d, err := call.wait()
	if err != nil {
		return 0, nil, err
	}
	if typ != wire.ExtendedReply {
		return 0, nil, statusOf(typ, d)
	}
	total = int(d.U32())
	if page, err = decodePage(&d); err != nil {
		return 0, nil, err
	}
	return total, page, nil
}

// decodePage reads a page's entries (ListRead's answer after its total).
func decodePage(d *decoder) ([]PageEntry, error) {
	n := d.U32()
	if int(n) > len(d.B)/10 { // a name, flags and a byte at least
		return nil, errBadReply
	}
	page := make([]PageEntry, 0, n)
	for ; n > 0; n-- {
		e := PageEntry{Entry: Entry{Name: d.Str(), Attrs: wire.DecodeAttrs(d)}}
		if flag := d.Take(1); len(flag) == 1 && flag[0] == 1 {
			e.Data, e.HasData = bytes.Clone(d.Bytes()), true
		}
		page = append(page, e)
	}
	if d.Err != nil {
		return nil, d.Err
	}
	return page, nil
}

// TreeStart is a directory a StartTreeRead asks for, and the index of
// its first entry wanted.
type TreeStart struct {
	Path  string
	Start int
}

// TreePage is a directory's page in a TreeRead answer: which of the
// request's directories it lies under, its path below it ("" for that
// one), and its page (as ListReadResult's) — or Err where the server
// could not list it.
type TreePage struct {
	From  int
	Sub   string
	Err   error
	Total int
	Start int
	Page  []PageEntry
}

// StartTreeRead asks for pages of the directories dirs and of those below
// them, breadth first, with the contents of regular files of up to small
// bytes, in an answer of at most budget bytes (wire.TreeRead); nil where
// the server does not serve it. TreeReadResult takes its answer.
func (c *Client) StartTreeRead(dirs []TreeStart, small, budget int) *Call {
	if !c.treeRead || len(dirs) == 0 {
		return nil
	}
	return c.start(wire.Extended, nil, func(e *encoder) {
		e.Str(wire.TreeRead)
		e.U32(uint32(small))
		e.U32(uint32(min(budget, MaxData)))
		e.U32(uint32(len(dirs)))
		for _, d := range dirs {
			e.Str(c.at(d.Path))
			e.U32(uint32(d.Start))
		}
	})
}

// TreeReadResult is the pages a StartTreeRead call was answered with, for
// starts, the directories it asked for.
func (c *Client) TreeReadResult(call *Call, starts int) ([]TreePage, error) {
	typ, d, err := call.wait()
	if err != nil {
		return nil, err
	}
	if typ != wire.ExtendedReply {
		return nil, statusOf(typ, d)
	}
	n := d.U32()
	if int(n) > len(d.B)/12 { // an index, a path and a status at least
		return nil, errBadReply
	}
	pages := make([]TreePage, 0, n)
	for ; n > 0 && d.Err == nil; n-- {
		p := TreePage{From: int(d.U32()), Sub: d.Str()}
		if p.From >= starts || !validSub(p.Sub) {
			return nil, errBadReply
		}
		if code := d.U32(); code != wire.OK {
			p.Err = &StatusError{Code: code, Msg: "tree-read"}
		} else {
			p.Total = int(d.U32())
			p.Page, err = decodePage(&d)
			if err != nil {
				return nil, err
			}
		}
		pages = append(pages, p)
	}
	if d.Err != nil {
		return nil, d.Err
	}
	return pages, nil
}

// validSub reports whether sub, a path below a directory asked for, is
// one: relative, clean, no step out. A server that names another could
// have its pages kept as another directory's.
func validSub(sub string) bool {
	if sub == "" {
		return true
	}
	return path.Clean(sub) == sub && !path.IsAbs(sub) && sub != ".." && !strings.HasPrefix(sub, "../")
}

// File is an open remote file.
type File struct {
	c      *Client
	handle string
}

// StartOpen sends OPEN; OpenResult turns the Call into a File.
func (c *Client) StartOpen(p string, pflags uint32, perm uint32) *Call {
	return c.start(wire.Open, nil, func(e *encoder) {
		e.Str(c.at(p))
		e.U32(pflags)
		settable(Attrs{Flags: AttrPermissions, Mode: perm}).Encode(e)
	})
}

// OpenResult waits for an OPEN.
func (c *Client) OpenResult(call *Call) (*File, error) {
	h, err := call.handle()
	if err != nil {
		return nil, err
	}
	return &File{c: c, handle: h}, nil
}

// OpenFile opens p with pflags; perm is for a file it creates.
func (c *Client) OpenFile(p string, pflags uint32, perm uint32) (*File, error) {
	return c.OpenResult(c.StartOpen(p, pflags, perm))
}

// OpensNamed reports whether the server takes an OPEN under a handle the
// client names (StartOpenNamed).
func (c *Client) OpensNamed() bool { return c.openNamed }

// StartOpenNamed sends an OPEN of p under a handle named here, and returns
// the File at once: its writes, FSTAT, FSETSTAT and CLOSE may be sent
// before the open is answered (the server runs them after it); anything
// else on it waits for the Call, whose Err is the open's outcome. Only for
// a server that OpensNamed. A file it creates or truncates is given made
// as its access and modification times, to the nanosecond, unless made is
// zero: the client can then tell the file's times before the open is
// answered, and they are the file's real ones.
func (c *Client) StartOpenNamed(p string, pflags, perm uint32, made time.Time) (*File, *Call) {
	handle := wire.NamedPrefix + strconv.FormatUint(c.named.Add(1), 36)
	a := Attrs{Flags: AttrPermissions, Mode: perm & 0o7777}
	if !made.IsZero() {
		sec := uint32(made.Unix())
		a.Flags |= AttrTimes
		a.Atime, a.Mtime, a.MtimeNsec, a.HasTimes = sec, sec, uint32(made.Nanosecond()), true
	}
	call := c.start(wire.Extended, nil, func(e *encoder) {
		e.Str(wire.OpenNamed)
		e.Str(handle)
		e.Str(c.at(p))
		e.U32(pflags)
		a.Encode(e)
	})
	return &File{c: c, handle: handle}, call
}

// Opened is what OpenRead learns besides the handle.
type Opened struct {
	Attrs Attrs  // the open file's; Flags is 0 if the server did not say
	Head  []byte // the file's first bytes, as of the open
	EOF   bool   // Head is the whole file
}

// OpenRead opens p with pflags (perm for a file it creates) and, in the
// same round trip, reads up to n bytes at its start and its attributes
// (our server's wire.OpenRead). From other servers it is a plain OPEN:
// Opened is empty.
func (c *Client) OpenRead(p string, pflags, perm uint32, n int) (*File, Opened, error) {
	return c.OpenReadResult(c.StartOpenRead(p, pflags, perm, n))
}

// OpenReadCall is an OpenRead in flight.
type OpenReadCall struct {
	call  *Call
	n     int
	plain bool // the server lacks wire.OpenRead: a plain OPEN
}

// StartOpenRead sends OpenRead's request.
func (c *Client) StartOpenRead(p string, pflags, perm uint32, n int) OpenReadCall {
	if !c.openRead {
		return OpenReadCall{call: c.StartOpen(p, pflags, perm), plain: true}
	}
	n = min(n, MaxData) // the most the server reads
	return OpenReadCall{n: n, call: c.start(wire.Extended, nil, func(e *encoder) {
		e.Str(wire.OpenRead)
		e.Str(c.at(p))
		e.U32(pflags)
		settable(Attrs{Flags: AttrPermissions, Mode: perm}).Encode(e)
		e.U32(uint32(n))
	})}
}

// OpenReadResult waits for an OpenRead.
func (c *Client) OpenReadResult(o OpenReadCall) (*File, Opened, error) {
	if o.plain {
		f, err := c.OpenResult(o.call)
		return f, Opened{}, err
	}
	typ, d, err := o.call.wait()
	if err != nil {
		return nil, Opened{}, err
	}
	if typ != wire.ExtendedReply {
		return nil, Opened{}, statusOf(typ, d)
	}
	f := &File{c: c, handle: d.Str()}
	opened := Opened{Attrs: wire.DecodeAttrs(&d)}
	opened.Head = d.Bytes()
	opened.EOF = len(opened.Head) < o.n
	if d.Err != nil {
		f.Close()
		return nil, Opened{}, d.Err
	}
	return f, opened, nil
}

// ReadAt reads up to len(dst) bytes at off (at most MaxData are asked
// for); at the end of the file it returns what there was and io.EOF.
func (f *File) ReadAt(dst []byte, off int64) (int, error) {
	dst = dst[:min(len(dst), MaxData)]
	call := f.c.start(wire.Read, dst, func(e *encoder) {
		e.Str(f.handle)
		e.U64(uint64(off))
		e.U32(uint32(len(dst)))
	})
	typ, d, err := call.wait()
	switch {
	case err != nil:
		return 0, err
	case typ == wire.Data:
		if call.n < len(dst) {
			return call.n, io.EOF
		}
		return call.n, nil
	}
	return 0, statusOf(typ, d)
}

// StartWrite sends a WRITE of data (at most MaxData bytes) at off; the
// Call's Err is its outcome. data may be reused once it returns.
func (f *File) StartWrite(data []byte, off int64) *Call {
	return f.startWrite(data, off, false)
}

// StartWriteBehind is StartWrite for a write nobody waits for yet: while
// other writes sent behind are unanswered it may be held, to go out with
// the writes after it (see Client.held). Waiting for it sends it.
func (f *File) StartWriteBehind(data []byte, off int64) *Call {
	return f.startWrite(data, off, true)
}

func (f *File) startWrite(data []byte, off int64, behind bool) *Call {
	if len(data) > MaxData {
		call := &Call{done: make(chan struct{}), err: errors.New("sftp: write larger than MaxData")}
		close(call.done)
		return call
	}
	return f.c.startWith(wire.Write, nil, func(e *encoder) {
		e.Str(f.handle)
		e.U64(uint64(off))
		e.U32(uint32(len(data)))
	}, data, behind)
}

// WriteAt writes data at off and waits for it.
func (f *File) WriteAt(data []byte, off int64) (int, error) {
	for done := 0; done < len(data); {
		n := min(len(data)-done, MaxData)
		if err := f.StartWrite(data[done:done+n], off+int64(done)).Err(); err != nil {
			return done, err
		}
		done += n
	}
	return len(data), nil
}

// StartStat sends FSTAT.
func (f *File) StartStat() *Call { return f.c.path(wire.Fstat, f.handle) }

// Stat is FSTAT: it works for a file unlinked while open.
func (f *File) Stat() (Attrs, error) { return f.StartStat().Attrs() }

// StartSetstat sends FSETSTAT.
func (f *File) StartSetstat(a Attrs) *Call {
	return f.c.start(wire.Fsetstat, nil, func(e *encoder) { e.Str(f.handle); settable(a).Encode(e) })
}

// Setstat sends FSETSTAT and FSTAT back to back and returns the file's
// attributes after the change.
func (f *File) Setstat(a Attrs) (Attrs, error) { return f.StartSetstat(a).Then(f.StartStat()) }

// Sync is fsync@openssh.com.
func (f *File) Sync() error { return f.c.extended("fsync@openssh.com", f.handle).Err() }

// WriteBarrier reports whether the file's server keeps its FSTAT, FSETSTAT
// and CLOSE behind its writes (Client.WriteBarrier).
func (f *File) WriteBarrier() bool { return f.c.writeBarrier }

// StartClose sends CLOSE.
func (f *File) StartClose() *Call { return f.c.path(wire.Close, f.handle) }

// Close closes the handle.
func (f *File) Close() error { return f.StartClose().Err() }

// Watches reports whether the server tells what changes (wire.Watch).
func (c *Client) Watches() bool { return c.watch }

// ErrNoWatch is Watch's error where the server cannot watch the export.
var ErrNoWatch = errors.New("sftp: the server does not watch this export")

// Changes is what a Watch answer reports.
type Changes struct {
	// Paths changed, relative to the export.
	Paths []string
	// Overflow: what changed is not known; drop every cache.
	Overflow bool
	// Exact: the server reports every change made other than through
	// this session, for as long as its answers say so.
	Exact bool
}

// Watch waits until the server reports changes made to the export other
// than through this session (wire.Watch), or ctx ends. It ends with the
// session's error when the session does.
func (c *Client) Watch(ctx context.Context) (Changes, error) {
	if !c.watch {
		return Changes{}, ErrNoWatch
	}
	call := c.extended(wire.Watch)
	select {
	case <-call.Done():
	case <-ctx.Done():
		return Changes{}, ctx.Err() // the answer, when it comes, finds no one
	}
	typ, d, err := call.wait()
	if err != nil {
		return Changes{}, err
	}
	if typ != wire.ExtendedReply {
		err := statusOf(typ, d)
		var se *StatusError
		if errors.As(err, &se) && se.Code == wire.OpUnsupported {
			err = ErrNoWatch
		}
		return Changes{}, err
	}
	var ch Changes
	if flags := d.Take(1); len(flags) == 1 {
		ch.Overflow = flags[0]&wire.WatchOverflow != 0
		ch.Exact = flags[0]&wire.WatchExact != 0
	}
	n := d.U32()
	if int(n) > len(d.B)/4 {
		return Changes{}, errBadReply
	}
	for ; n > 0; n-- {
		ch.Paths = append(ch.Paths, d.Str())
	}
	return ch, d.Err
}
