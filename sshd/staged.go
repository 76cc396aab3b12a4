package sshd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/awcp/awcp/internal/stage"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// stagedView serves a session of a staged export (Export.Stage): a
// copy-on-write view of the owner's directory. The owner's directory is
// the lower layer: read, never written. Every change goes to the staging
// area's upper directory: a file is copied up before it is opened for
// writing or its attributes set, the directories above a new entry are
// made there, and a deletion of the owner's entry is recorded in the area
// (a whiteout). A read goes to upper where it holds the path, else to the
// owner's directory, live. Listings merge the two.
//
// Each layer is a whole sftpServer, with the export's policy, audit and
// write limit: a request is routed to one, after the copy-up it needs.
// Both share the session's handles. Changes hold the area's lock across
// the copy-up, the request and its record, so that a read (which holds it
// shared) never sees one half done.
//
// A path through a symlinked directory is resolved in the layer that
// holds the link.
type stagedView struct {
	lower *sftpServer // the owner's directory
	upper *sftpServer // the area's upper directory
	base  *os.Root    // the area's base directory (saveBase)
	area  *stage.Area
}

// layerSession makes the upper layer of s's staged session: a server on
// the area's upper directory sharing s's handles, policy and answers.
// s's fields up to out must be set.
func (s *sftpServer) layerSession(area *stage.Area) (*stagedView, func(), error) {
	root, err := os.OpenRoot(area.Upper())
	if err != nil {
		return nil, nil, fmt.Errorf("sftp: the staging area cannot be opened: %w", err)
	}
	u := &sftpServer{root: root, readOnly: s.readOnly, policy: s.policy, hide: s.hide, audit: s.audit,
		written: s.written, made: s.made, metrics: s.metrics, log: s.log, out: s.out,
		alias: s.alias, env: s.env, handleTable: s.handleTable}
	release, err := u.openRoot()
	if err != nil {
		root.Close()
		return nil, nil, err
	}
	base, err := os.OpenRoot(area.BaseDir())
	if err != nil {
		release()
		root.Close()
		return nil, nil, fmt.Errorf("sftp: the staging area cannot be opened: %w", err)
	}
	s.ownerLayer = true
	return &stagedView{lower: s, upper: u, base: base, area: area}, func() { base.Close(); release(); root.Close() }, nil
}

// handle routes one request; it never panics out of the session.
func (v *stagedView) handle(pkt []byte) {
	typ := pkt[0]
	r := newReader(pkt[1:])
	id := r.U32()
	defer func() {
		if x := recover(); x != nil {
			v.lower.log.Error("sftp: staged handler panic", "type", typ, "panic", fmt.Sprint(x))
			v.lower.status(id, wire.Failure, "internal error")
		}
	}()
	if r.Err != nil || v.lower.readOnly {
		v.lower.handle(pkt)
		return
	}
	if !v.lower.refuseByPolicy(id, typ, r) {
		return
	}
	switch typ {
	case wire.Open:
		v.open(id, pkt, &r)
	case wire.Lstat, wire.Stat, wire.Readlink:
		v.read(id, pkt, v.name(&r))
	case wire.Opendir:
		v.opendir(id, v.name(&r), r.Err)
	case wire.Setstat:
		v.change(id, pkt, v.name(&r), false)
	case wire.Fsetstat:
		v.fsetstat(id, pkt, &r)
	case wire.Remove, wire.Rmdir:
		v.remove(id, v.name(&r), typ == wire.Rmdir, r.Err)
	case wire.Mkdir:
		v.make(id, pkt, v.name(&r), true, r.Err)
	case wire.Symlink:
		r.Str() // the target
		v.make(id, pkt, v.name(&r), false, r.Err)
	case wire.Rename:
		from, to := v.name(&r), v.name(&r)
		v.rename(id, pkt, from, to, true, r.Err)
	case wire.Extended:
		v.extended(id, pkt, &r)
	default: // handles, REALPATH
		v.lower.handle(pkt)
	}
}

func (v *stagedView) extended(id uint32, pkt []byte, r *reader) {
	switch r.Str() {
	case "posix-rename@openssh.com":
		from, to := v.name(r), v.name(r)
		v.rename(id, pkt, from, to, false, r.Err)
	case "hardlink@openssh.com":
		from, to := v.name(r), v.name(r)
		v.link(id, pkt, from, to, r.Err)
	case wire.OpenRead:
		v.open(id, pkt, r)
	case wire.OpenNamed:
		r.Str() // the handle's name
		v.open(id, pkt, r)
	case wire.List:
		v.list(id, v.name(r), r.Err)
	case wire.ListRead, wire.TreeRead:
		// Pages of a merged listing, with contents from either layer:
		// not served; the client walks the plain way.
		v.lower.status(id, wire.OpUnsupported, "extension unsupported on a staged export")
	case wire.Room:
		// Writes go to the staging area: its file system's room.
		v.upper.handle(pkt)
	default: // fsync, statvfs, write barriers: handles and the owner's file system
		v.lower.handle(pkt)
	}
}

// name is the request's next path, relative to the root.
func (v *stagedView) name(r *reader) string { return v.lower.rel(r.Str()) }

// open routes an OPEN (or its extensions, r past the handle's name): one
// that may change the file goes to upper, after a copy-up; a read goes to
// the layer that holds the file.
func (v *stagedView) open(id uint32, pkt []byte, r *reader) {
	name := v.name(r)
	pflags := r.U32()
	if r.Err != nil {
		v.lower.handle(pkt)
		return
	}
	if pflags&(wire.FlagWrite|wire.FlagAppend|wire.FlagCreat|wire.FlagTrunc) == 0 {
		v.read(id, pkt, name)
		return
	}
	v.change(id, pkt, name, pflags&wire.FlagCreat != 0)
}

// read sends a request that changes nothing to the layer holding name.
func (v *stagedView) read(id uint32, pkt []byte, name string) {
	v.area.RLock()
	defer v.area.RUnlock()
	layer, _ := v.find(name)
	if layer == nil {
		v.lower.errStatus(id, fs.ErrNotExist)
		return
	}
	layer.handle(pkt)
}

// find is the layer holding name and what it holds; nil if neither does.
// The root, and the environment root's names, are the owner's.
func (v *stagedView) find(name string) (*sftpServer, fs.FileInfo) {
	if name == "." || name == envRoot || inEnv(name) {
		fi, _ := v.lower.fast.Lstat(".")
		return v.lower, fi
	}
	if fi, err := v.upper.fast.Lstat(name); err == nil {
		return v.upper, fi
	}
	if fi, ok := v.owners(name); ok {
		return v.lower, fi
	}
	return nil, nil
}

// owners is the owner's entry at name where the view shows it.
func (v *stagedView) owners(name string) (fs.FileInfo, bool) {
	if v.area.OwnerHidden(name) {
		return nil, false
	}
	fi, err := v.lower.fast.Lstat(name)
	return fi, err == nil
}

// ownersToo reports whether the view shows the owner's entry at name
// too, found in layer: upper may shadow one.
func (v *stagedView) ownersToo(name string, layer *sftpServer) bool {
	switch layer {
	case v.lower:
		return name != "."
	case v.upper:
		_, ok := v.owners(name)
		return ok
	}
	return false
}

// change sends a request that writes name (an OPEN for writing, SETSTAT)
// to upper, copying the owner's file up first; creating: the request may
// make the file.
func (v *stagedView) change(id uint32, pkt []byte, name string, creating bool) {
	v.area.Lock()
	defer v.area.Unlock()
	layer, _ := v.find(name)
	var err error
	switch {
	case layer == v.lower:
		err = v.copyUp(name, true, 0)
	case layer == nil && creating:
		err = v.ready(name)
	}
	if err != nil {
		v.lower.done(id, Op{Kind: OpOpen, Path: name}, err)
		return
	}
	v.upper.handle(pkt)
	if layer == nil && creating {
		v.made(name, false)
	}
}

// fsetstat sets the attributes of a handle's file: one of the owner's,
// opened for reading, is copied up and set there instead.
func (v *stagedView) fsetstat(id uint32, pkt []byte, r *reader) {
	h, err := v.lower.get(r.Str())
	if err != nil || !h.ownerLayer {
		v.lower.handle(pkt)
		return
	}
	a := wire.DecodeAttrs(r)
	v.area.Lock()
	defer v.area.Unlock()
	if err := v.copyUp(h.name, false, 0); err != nil {
		v.lower.done(id, Op{Kind: OpSetattr, Path: h.name}, err)
		return
	}
	v.upper.setattrDone(id, h.name, a, v.upper.setstat(h.name, nil, a, r.Err))
}

// made records, after a request that may have made name in upper, that
// it did.
func (v *stagedView) made(name string, dir bool) {
	if fi, err := v.upper.fast.Lstat(name); err == nil {
		if err := v.area.Made(name, dir && fi.IsDir()); err != nil {
			v.lower.log.Warn("sftp: staging area", "err", err)
		}
	}
}

// make routes a MKDIR (dir) or SYMLINK of name to upper, which must not
// show an entry there yet.
func (v *stagedView) make(id uint32, pkt []byte, name string, dir bool, decodeErr error) {
	kind := OpSymlink
	if dir {
		kind = OpMkdir
	}
	if decodeErr != nil {
		v.lower.handle(pkt)
		return
	}
	v.area.Lock()
	defer v.area.Unlock()
	if layer, _ := v.find(name); layer != nil {
		v.lower.done(id, Op{Kind: kind, Path: name}, fs.ErrExist)
		return
	}
	if err := v.ready(name); err != nil {
		v.lower.done(id, Op{Kind: kind, Path: name}, err)
		return
	}
	v.upper.handle(pkt)
	v.made(name, dir)
}

// remove is a REMOVE (or, dir, an RMDIR) of name: upper's entry is
// removed, and the owner's is deleted from the view.
func (v *stagedView) remove(id uint32, name string, dir bool, decodeErr error) {
	op := Op{Kind: OpRemove, Path: name}
	if dir {
		op.Kind = OpRmdir
	}
	if decodeErr != nil {
		v.lower.errStatus(id, errBadMessage)
		return
	}
	v.area.Lock()
	defer v.area.Unlock()
	layer, fi := v.find(name)
	owned := v.ownersToo(name, layer)
	var err error
	switch {
	case layer == nil:
		err = fs.ErrNotExist
	case name == ".":
		err = syscall.EBUSY
	case dir && !fi.IsDir():
		err = syscall.ENOTDIR
	case !dir && fi.IsDir():
		err = syscall.EISDIR
	case layer == v.lower:
		err = v.lower.keeps(v.lower.realName(name))
	}
	if err == nil && dir {
		var ents []fs.DirEntry
		if ents, err = v.entries(name); err == nil && len(ents) > 0 {
			err = syscall.ENOTEMPTY
		}
	}
	if err == nil {
		err = v.saveBase(name)
	}
	if err == nil && layer == v.upper {
		err = v.upper.mutateName(name, func(name string) error { return v.upper.fast.Remove(name, dir) })
	}
	if err == nil && owned {
		err = v.area.Delete(name)
	}
	v.lower.done(id, op, err)
}

// rename routes a RENAME (noReplace) or posix-rename to upper, with the
// whole of from copied up first: a directory moves with everything the
// view shows beneath it.
func (v *stagedView) rename(id uint32, pkt []byte, from, to string, noReplace bool, decodeErr error) {
	op := Op{Kind: OpRename, Path: from, To: to}
	if decodeErr != nil {
		v.lower.handle(pkt)
		return
	}
	v.area.Lock()
	defer v.area.Unlock()
	layer, fi := v.find(from)
	toLayer, toFi := v.find(to)
	op.Replaced = toLayer != nil
	owned := v.ownersToo(from, layer)
	var err error
	switch {
	case layer == nil:
		err = fs.ErrNotExist
	case from == "." || to == ".":
		err = syscall.EBUSY
	case toLayer != nil && noReplace:
		err = fs.ErrExist
	case toLayer != nil && fi.IsDir() && !toFi.IsDir():
		err = syscall.ENOTDIR
	case toLayer != nil && !fi.IsDir() && toFi.IsDir():
		err = syscall.EISDIR
	case toLayer == v.lower && v.lower.policy.NoDelete:
		err = errNoDelete // upper's rename would replace the owner's entry unseen
	case layer == v.lower:
		err = v.lower.keeps(v.lower.realName(from))
	}
	if err == nil && toLayer != nil && toFi.IsDir() {
		var ents []fs.DirEntry
		if ents, err = v.entries(to); err == nil && len(ents) > 0 {
			err = syscall.ENOTEMPTY
		}
	}
	if err == nil {
		err = v.saveBase(from)
	}
	if err == nil {
		err = v.copyUpTree(from, fi)
	}
	if err == nil {
		err = v.ready(to)
	}
	if err != nil {
		v.lower.done(id, op, err)
		return
	}
	v.upper.handle(pkt)
	if _, err := v.upper.fast.Lstat(from); err == nil {
		return // refused
	}
	if owned {
		v.keep(v.area.Delete(from))
	}
	if toLayer == v.lower && toFi.IsDir() {
		// The owner's empty directory at to is replaced: nothing of it
		// shows beneath the moved one.
		v.keep(v.area.Delete(to))
	}
	v.made(to, true)
	if fi.IsDir() {
		v.keep(v.area.Shadow(to))
	}
	v.keep(v.touchTree(to))
}

// link routes a hardlink of from at to to upper, with from copied up.
func (v *stagedView) link(id uint32, pkt []byte, from, to string, decodeErr error) {
	op := Op{Kind: OpLink, Path: from, To: to}
	if decodeErr != nil {
		v.lower.handle(pkt)
		return
	}
	v.area.Lock()
	defer v.area.Unlock()
	layer, fi := v.find(from)
	var err error
	switch {
	case layer == nil:
		err = fs.ErrNotExist
	case fi.IsDir():
		err = syscall.EPERM
	}
	if toLayer, _ := v.find(to); err == nil && toLayer != nil {
		err = fs.ErrExist
	}
	if err == nil && layer == v.lower {
		err = v.copyUp(from, false, 0)
	}
	if err == nil {
		err = v.ready(to)
	}
	if err != nil {
		v.lower.done(id, op, err)
		return
	}
	v.upper.handle(pkt)
	v.made(to, false)
}

// keep logs a failure to record in the area what a request did, which
// was answered already.
func (v *stagedView) keep(err error) {
	if err != nil {
		v.lower.log.Warn("sftp: staging area", "err", err)
	}
}

// mutateName is mutate for a name decoded already.
func (s *sftpServer) mutateName(name string, fn func(name string) error) error {
	real := s.realName(name)
	if err := s.keeps(real); err != nil {
		return err
	}
	if err := fn(name); err != nil {
		return err
	}
	s.made.gone(real)
	return nil
}

// errNotStaged is a copy-up of an entry the view cannot hold.
var errNotStaged = errors.New("sftp: not a file, directory or symlink")
