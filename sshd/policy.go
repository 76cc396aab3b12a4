package sshd

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/untrusted"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// What an export's policy refuses (wire.ExportPolicy). Each is answered
// as PERMISSION_DENIED with its own message, which the mount turns into
// EACCES for the agent.
var (
	errHidden     = errors.New("hidden by the owner's export policy")
	errNoDelete   = errors.New("deleting is refused by the owner's export policy")
	errWriteLimit = errors.New("the export's write limit is reached")
	errGitControl = errors.New("a path git executes or obeys (.git/config, hooks, info): read-only to the executor")
	errOutOfScope = errors.New("outside the delegation's write scope: read-only to the executor")
)

// isRefusal reports whether err is the export refusing a request: its
// access mode or its policy.
func isRefusal(err error) bool {
	return errors.Is(err, errReadOnly) || errors.Is(err, errHidden) || errors.Is(err, errNoDelete) ||
		errors.Is(err, errWriteLimit) || errors.Is(err, errGitControl) || errors.Is(err, errOutOfScope)
}

// hidden reports whether name (relative to the root) is hidden.
func (s *sftpServer) hidden(name string) bool {
	return s.hide != nil && s.hide.Hidden(name)
}

// refuseByPolicy checks the paths a request names before it is handled: a
// request naming a hidden path is refused, and recorded. So is one whose
// path is hidden once the directories above it are resolved by the kernel
// (a symlink x -> .aws makes x/credentials .aws/credentials), and the
// rename of a directory that would move a hidden path out of its pattern
// (.docker to dock, for .docker/config.json). It returns false if the
// request was answered. (The kernelRoot's guard checks again, race-free,
// where the request's own call opens the directory.)
//
// Under ProtectGit it refuses, the same way, a request that would change
// a path git executes or obeys (untrusted.GitControlled), named or
// reached through a symlinked directory; the guard checks those again on
// the directory the change's own call opens.
func (s *sftpServer) refuseByPolicy(id uint32, typ byte, r reader) bool {
	git := s.guardsChanges() && writes(typ, r)
	if s.hide == nil && !git {
		return true
	}
	kind, paths := requestPaths(typ, &r)
	for i, p := range paths {
		name := s.rel(p)
		if s.hidden(name) {
			s.done(id, Op{Kind: kind, Path: name}, errHidden)
			return false
		}
		real := s.realName(name)
		if real != name && s.hidden(real) {
			s.done(id, Op{Kind: kind, Path: real}, errHidden)
			return false
		}
		if s.hide != nil && i == 0 && kind == OpRename && s.hide.Splits(real) {
			s.done(id, Op{Kind: kind, Path: real}, errHidden)
			return false
		}
		if git {
			err := s.changeRefused(kind, name)
			if err == nil {
				err = s.changeRefused(kind, real)
			}
			if err != nil {
				s.done(id, Op{Kind: kind, Path: real}, err)
				return false
			}
		}
	}
	return true
}

// protectsGit reports whether the export keeps git's control paths from
// the executor.
func (s *sftpServer) protectsGit() bool { return s.policy.ProtectGit && !s.readOnly }

// guardsChanges reports whether the export refuses changes to some paths
// of a writable export: git's control paths, or all outside its write
// scope. Such a change is checked on the request's names, then on the
// kernel's path of what it reaches (the guard, an open's descriptor).
func (s *sftpServer) guardsChanges() bool {
	return !s.readOnly && (s.policy.ProtectGit || s.policy.WriteScope != "")
}

// changeRefused is why a change of kind to rel (relative to the root) is
// refused: one of git's control paths, or outside the write scope; nil if
// it is not.
func (s *sftpServer) changeRefused(kind, rel string) error {
	switch {
	case s.protectsGit() && gitRefused(kind, rel):
		return errGitControl
	case s.policy.WriteScope != "" && !s.readOnly && !wire.Within(rel, s.policy.WriteScope):
		return errOutOfScope
	}
	return nil
}

// gitRefused reports whether a change of kind (an Op kind, or the
// guard's "mkdir") to rel, a path relative to the root, is one
// ProtectGit refuses: one of git's control paths, except a `.git`
// directory being made (an agent's git init: its config is still
// refused).
func gitRefused(kind, rel string) bool {
	return untrusted.GitControlled(rel) && !(kind == OpMkdir && untrusted.GitDir(rel))
}

// writes reports whether a request changes what it names: every
// request that makes, moves, links, removes or sets attributes, and an
// open for writing, creating or truncating.
func writes(typ byte, r reader) bool {
	const changing = wire.FlagWrite | wire.FlagAppend | wire.FlagCreat | wire.FlagTrunc
	switch typ {
	case wire.Setstat, wire.Remove, wire.Rmdir, wire.Mkdir, wire.Rename, wire.Symlink:
		return true
	case wire.Open:
		r.Str()
		return r.U32()&changing != 0 || r.Err != nil
	case wire.Extended:
		switch r.Str() {
		case "posix-rename@openssh.com", "hardlink@openssh.com":
			return true
		case wire.OpenRead:
			r.Str()
			return r.U32()&changing != 0 || r.Err != nil
		case wire.OpenNamed:
			r.Str()
			r.Str()
			return r.U32()&changing != 0 || r.Err != nil
		}
	}
	return false
}

// guardAt is the kernelRoot's guard: base in the directory fd (or fd
// itself, base ""), at the path the kernel has for it, must not be hidden.
//
// change is "" for a read; for a change to base ("mkdir", "remove",
// "link" for what names or moves a name) it also refuses, under
// ProtectGit, one of git's control paths. The paths are the kernel's, of
// the very directory the change's call acts in: no symlink swapped in
// after the request was checked changes what is refused.
func (s *sftpServer) guardAt(fd int, at, base, change string) error {
	rel := at
	if rel == "" {
		abs, err := fdPathOf(fd)
		if err != nil {
			return errHidden // cannot tell: refuse
		}
		var ok bool
		if rel, ok = s.realRel(abs); !ok {
			return errEscape
		}
	}
	if base != "" {
		rel = joinRel(rel, base)
	}
	if s.hidden(rel) {
		return &hiddenAt{rel}
	}
	if change != "" {
		return s.changeRefused(change, rel)
	}
	return nil
}

// hiddenAt is the guard's refusal, with the real path it found hidden.
type hiddenAt struct{ path string }

func (e *hiddenAt) Error() string        { return errHidden.Error() }
func (e *hiddenAt) Is(target error) bool { return target == errHidden }

// refusedPath is the real path a refusal of the guard names, else name.
func refusedPath(err error, name string) string {
	var h *hiddenAt
	if errors.As(err, &h) {
		return h.path
	}
	return name
}

// realRel is abs, a path the kernel gave for an open file, relative to
// the root; false if it is not inside it.
func (s *sftpServer) realRel(abs string) (string, bool) {
	rel, err := filepath.Rel(s.rootReal, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// realName is name with the directories above it resolved by the kernel
// inside the root, symlinks followed: the path a request on name acts on.
// Where they cannot be resolved (missing), it is name.
func (s *sftpServer) realName(name string) string {
	dir, base, ok := splitName(name)
	if !ok || dir == "." || s.rootReal == "" {
		return name
	}
	fd, plain, ok, err := s.fast.parentFd(dir)
	if !ok || err != nil {
		return name
	}
	defer unix.Close(fd)
	if plain { // no symlink on the way: the kernel's path is name's
		return name
	}
	abs, err := fdPathOf(fd)
	if err != nil {
		return name
	}
	rel, ok := s.realRel(abs)
	if !ok {
		return name
	}
	return joinRel(rel, base)
}

// requestPaths is the paths a request names, and the Op kind it is
// recorded under if refused. A symlink's target is not a path of the
// request: what it reaches is checked where it is opened (opened).
func requestPaths(typ byte, r *reader) (string, []string) {
	switch typ {
	case wire.Open:
		return OpOpen, []string{r.Str()}
	case wire.Lstat, wire.Stat, wire.Readlink, wire.Realpath:
		return OpLookup, []string{r.Str()}
	case wire.Setstat:
		return OpSetattr, []string{r.Str()}
	case wire.Opendir:
		return OpList, []string{r.Str()}
	case wire.Remove:
		return OpRemove, []string{r.Str()}
	case wire.Rmdir:
		return OpRmdir, []string{r.Str()}
	case wire.Mkdir:
		return OpMkdir, []string{r.Str()}
	case wire.Rename:
		return OpRename, []string{r.Str(), r.Str()}
	case wire.Symlink:
		r.Str() // the target
		return OpSymlink, []string{r.Str()}
	case wire.Extended:
		switch r.Str() {
		case "posix-rename@openssh.com":
			return OpRename, []string{r.Str(), r.Str()}
		case "hardlink@openssh.com":
			return OpLink, []string{r.Str(), r.Str()}
		case wire.OpenRead:
			return OpOpen, []string{r.Str()}
		case wire.OpenNamed:
			r.Str() // the handle
			return OpOpen, []string{r.Str()}
		case wire.List, wire.ListRead:
			return OpList, []string{r.Str()}
		}
	}
	return "", nil
}

// opened is the real path of f, just opened by the path name, and whether
// it is hidden: the request named a path that is not hidden, but the
// kernel resolved it (inside the root, through a symlink) to one that is.
// plain is that the kernel's walk followed no symlink (kernelRoot's
// openFile): its path is then name, not read back.
func (s *sftpServer) opened(f *os.File, name string, plain bool) (real string, hidden bool) {
	if plain {
		return name, s.hidden(name)
	}
	abs, err := fdPath(f)
	if err != nil {
		return name, s.hide != nil // cannot tell: refuse
	}
	rel, ok := s.realRel(abs)
	if !ok {
		return name, s.hide != nil
	}
	return rel, s.hidden(rel)
}

// fdPath is the path the kernel has for f's open file.
func fdPath(f *os.File) (string, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", err
	}
	var p string
	var rerr error
	if err := rc.Control(func(fd uintptr) { p, rerr = fdPathOf(int(fd)) }); err != nil {
		return "", err
	}
	return p, rerr
}

// visible is the entries of directory dir's listing that are not hidden.
func (s *sftpServer) visible(dir string, ents []fs.DirEntry) []fs.DirEntry {
	if s.hide == nil {
		return ents
	}
	return slices.DeleteFunc(ents, func(e fs.DirEntry) bool { return s.hidden(joinRel(dir, e.Name())) })
}

// joinRel is name in dir, both relative to the root.
func joinRel(dir, name string) string {
	if dir == "." || dir == "" {
		return name
	}
	return dir + "/" + name
}
