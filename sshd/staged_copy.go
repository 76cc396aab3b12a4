package sshd

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/awcp/awcp/archive"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// maxLinkHops bounds the symlinks a copy-up follows, as the kernel's
// MAXSYMLINKS does a path walk.
const maxLinkHops = 40

// ready readies upper for an entry at name: the directories above it
// made (parents), and the owner's entry there, if any, recorded as the
// base of the change (saveBase).
func (v *stagedView) ready(name string) error {
	if err := v.parents(name); err != nil {
		return err
	}
	return v.saveBase(name)
}

// parents makes in upper the directories above name, with the modes of
// the owner's: a new entry's directory must be in upper to hold it.
func (v *stagedView) parents(name string) error {
	dir, _, ok := splitName(name)
	if !ok || dir == "." {
		return nil
	}
	dir = strings.TrimSuffix(dir, "/")
	if fi, err := v.upper.fast.Lstat(dir); err == nil {
		if !fi.IsDir() {
			return syscall.ENOTDIR
		}
		return nil
	}
	fi, ok := v.owners(dir)
	if !ok {
		return fs.ErrNotExist
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return v.copyUp(dir, true, 0)
	}
	if !fi.IsDir() {
		return syscall.ENOTDIR
	}
	if err := v.parents(dir); err != nil {
		return err
	}
	if err := v.upper.fast.Mkdir(dir, fi.Mode().Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// copyUp copies the owner's entry at name into upper (a directory without
// what it holds), recording its base; with follow, a symlink's target is
// copied up too, as the request that follows it will reach it in upper.
func (v *stagedView) copyUp(name string, follow bool, hops int) error {
	if hops > maxLinkHops {
		return syscall.ELOOP
	}
	ufi, err := v.upper.fast.Lstat(name)
	if err == nil {
		if follow && ufi.Mode()&fs.ModeSymlink != 0 {
			return v.copyUpTarget(name, v.upper, hops)
		}
		return nil
	}
	fi, ok := v.owners(name)
	if !ok {
		// A dangling link's target: a create through the link makes it
		// in upper, where its directory must be.
		return v.parents(name)
	}
	if err := v.ready(name); err != nil {
		return err
	}
	switch mode := fi.Mode(); {
	case mode.IsDir():
		if err := v.upper.fast.Mkdir(name, mode.Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return nil
	case mode&fs.ModeSymlink != 0:
		target, err := v.lower.root.Readlink(name)
		if err != nil {
			return err
		}
		if err := v.upper.spend(int64(len(target)) + inodeCost); err != nil {
			return err
		}
		if err := v.upper.root.Symlink(target, name); err != nil {
			return err
		}
		if follow {
			return v.copyUpTarget(name, v.upper, hops)
		}
		return nil
	case mode.IsRegular():
		return v.copyFile(name, fi)
	}
	return errNotStaged
}

// copyUpTarget copies up what the symlink name in layer leads to.
func (v *stagedView) copyUpTarget(name string, layer *sftpServer, hops int) error {
	target, err := layer.root.Readlink(name)
	if err != nil {
		return err
	}
	if path.IsAbs(target) {
		return errEscape
	}
	t := path.Join(path.Dir(name), target)
	if t == ".." || strings.HasPrefix(t, "../") {
		return errEscape
	}
	return v.copyUp(t, true, hops+1)
}

// copyFile copies the owner's file name (as fi) into upper, with its mode
// and times. Its bytes count against the write limit.
func (v *stagedView) copyFile(name string, fi fs.FileInfo) error {
	in, err := v.lower.fast.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	cost := fi.Size() + inodeCost
	if err := v.upper.spend(cost); err != nil {
		return err
	}
	out, err := v.upper.fast.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		v.upper.refund(cost)
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chmod(fi.Mode().Perm())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = v.upper.root.Chtimes(name, fi.ModTime(), fi.ModTime())
	}
	if err != nil {
		v.upper.root.Remove(name)
		v.upper.refund(cost)
	}
	return err
}

// copyUpTree copies up from (as fi) and, for a directory, everything the
// view shows beneath it but what the policy hides: a rename moves it all.
func (v *stagedView) copyUpTree(from string, fi fs.FileInfo) error {
	if err := v.copyUp(from, false, 0); err != nil || !fi.IsDir() {
		return err
	}
	if v.area.OwnerHidden(from) && from != "." {
		return nil
	}
	if _, ok := v.owners(from); !ok {
		return nil // made by the executor: all of it is in upper
	}
	d, err := v.lower.root.Open(from)
	if err != nil {
		return err
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range ents {
		child := joinRel(from, e.Name())
		if v.lower.hidden(child) || v.area.OwnerHidden(child) {
			continue
		}
		cfi, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		if err := v.copyUpTree(child, cfi); err != nil {
			return err
		}
		if err := v.saveBase(child); err != nil {
			return err
		}
	}
	return nil
}

// saveBase records name's base, the owner's entry there, at its first
// touch; a file's bytes are kept in the area's base directory for the
// diff.
func (v *stagedView) saveBase(name string) error {
	if v.area.Touched(name) {
		return nil
	}
	fi, ok := v.owners(name)
	if !ok {
		return v.area.Touch(name, nil)
	}
	e := &archive.Entry{Perm: fi.Mode().Perm()}
	switch mode := fi.Mode(); {
	case mode.IsDir():
		e.Kind = archive.KindDir
	case mode&fs.ModeSymlink != 0:
		target, err := v.lower.root.Readlink(name)
		if err != nil {
			return err
		}
		e.Kind, e.Perm, e.Hash = archive.KindSymlink, 0o777, target
	case mode.IsRegular():
		e.Kind = archive.KindFile
		var err error
		if e.Size, e.Hash, err = v.keepBase(name); err != nil {
			return err
		}
	default:
		return v.area.Touch(name, nil)
	}
	return v.area.Touch(name, e)
}

// keepBase copies the owner's file name into the area's base directory,
// returning its size and SHA-256.
func (v *stagedView) keepBase(name string) (int64, string, error) {
	in, err := v.lower.fast.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, "", err
	}
	defer in.Close()
	if dir := path.Dir(name); dir != "." {
		if err := v.base.MkdirAll(dir, 0o700); err != nil {
			return 0, "", err
		}
	}
	out, err := v.base.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, "", err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, hex.EncodeToString(h.Sum(nil)), err
}

// touchTree records the base of every path beneath to in upper (a
// directory just moved there): none, as what it shadows shows nothing.
func (v *stagedView) touchTree(to string) error {
	return fs.WalkDir(v.upper.root.FS(), to, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile
		}
		return v.saveBase(p)
	})
}

// listing is directory name as the view shows it: upper's entries, then
// the owner's that upper neither holds nor hides. f is one of the two
// directories, open (the handle's), and real its real path.
func (v *stagedView) listing(name string) (f *os.File, real string, ents []fs.DirEntry, err error) {
	seen := map[string]bool{}
	uf, ureal, uerr := v.upper.openDir(name, nil)
	if uerr != nil && !errors.Is(uerr, fs.ErrNotExist) {
		return nil, "", nil, uerr // a file in upper, or hidden
	}
	if uerr == nil {
		if ents, err = readDirAt(uf, -1); err != nil {
			uf.Close()
			return nil, "", nil, err
		}
		for _, e := range ents {
			seen[e.Name()] = true
		}
		f, real = uf, ureal
	}
	if name != "." && (v.area.OwnerHidden(name) || (uerr == nil && v.area.Opaque(name))) {
		if f == nil {
			return nil, "", nil, fs.ErrNotExist
		}
		return f, real, ents, nil
	}
	lf, lreal, lerr := v.lower.openDir(name, nil)
	if lerr != nil {
		if f == nil {
			return nil, "", nil, lerr
		}
		return f, real, ents, nil
	}
	owner, err := readDirAt(lf, -1)
	if err != nil {
		lf.Close()
		if f != nil {
			f.Close()
		}
		return nil, "", nil, err
	}
	for _, e := range owner {
		if !seen[e.Name()] && !v.area.OwnerHidden(joinRel(name, e.Name())) {
			ents = append(ents, e)
		}
	}
	if f == nil {
		return lf, lreal, ents, nil
	}
	lf.Close()
	return f, real, ents, nil
}

// entries is directory name's entries as the view shows them, hidden ones
// too (a directory holding only the owner's secrets is not empty).
func (v *stagedView) entries(name string) ([]fs.DirEntry, error) {
	f, _, ents, err := v.listing(name)
	if f != nil {
		f.Close()
	}
	return ents, err
}

// shown is directory name's merged listing as the client sees it (hidden
// entries left out, in name order), recorded; on an error it has answered
// id and ok is false. f is one of the directories, open.
func (v *stagedView) shown(id uint32, name string, decodeErr error) (f *os.File, real string, ents []fs.DirEntry, ok bool) {
	if decodeErr != nil {
		v.lower.errStatus(id, errBadMessage)
		return nil, "", nil, false
	}
	v.area.RLock()
	f, real, ents, err := v.listing(name)
	v.area.RUnlock()
	if err != nil {
		v.lower.errStatus(id, err)
		return nil, "", nil, false
	}
	ents = v.lower.visible(real, ents)
	sortByName(ents)
	v.lower.recordReal(Op{Kind: OpList, Path: real})
	return f, real, ents, true
}

// opendir answers an OPENDIR with a handle on the merged listing.
func (v *stagedView) opendir(id uint32, name string, decodeErr error) {
	if name == envRoot && decodeErr == nil {
		v.lower.openEnvRoot(id)
		return
	}
	if f, real, ents, ok := v.shown(id, name, decodeErr); ok {
		v.lower.sendHandle(id, &handle{f: f, dir: true, name: real, listed: true, entries: ents})
	}
}

// list answers wire.List with the merged listing.
func (v *stagedView) list(id uint32, name string, decodeErr error) {
	f, _, ents, ok := v.shown(id, name, decodeErr)
	if !ok {
		return
	}
	f.Close()
	if len(ents) > wire.ListMax {
		v.lower.status(id, wire.Failure, "too many entries for "+wire.List)
		return
	}
	v.lower.names(id, infosOf(ents), noLongName)
}
