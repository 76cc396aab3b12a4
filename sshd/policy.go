package sshd

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// What an export's policy refuses (wire.ExportPolicy). Each is answered
// as PERMISSION_DENIED with its own message, which the mount turns into
// EACCES for the agent.
var (
	errHidden     = errors.New("hidden by the owner's export policy")
	errNoDelete   = errors.New("deleting is refused by the owner's export policy")
	errWriteLimit = errors.New("the export's write limit is reached")
)

// isRefusal reports whether err is the export refusing a request: its
// access mode or its policy.
func isRefusal(err error) bool {
	return errors.Is(err, errReadOnly) || errors.Is(err, errHidden) || errors.Is(err, errNoDelete) ||
		errors.Is(err, errWriteLimit)
}

// hidden reports whether name (relative to the root) is hidden.
func (s *sftpServer) hidden(name string) bool {
	return s.hide.Hidden(name)
}

// refuseHidden checks the paths a request names before it is handled: a
// request naming a hidden path is refused, and recorded. It returns false
// if the request was answered.
func (s *sftpServer) refuseHidden(id uint32, typ byte, r reader) bool {
	if s.hide == nil {
		return true
	}
	kind, paths := requestPaths(typ, &r)
	for _, p := range paths {
		if name := s.rel(p); s.hidden(name) {
			s.done(id, Op{Kind: kind, Path: name}, errHidden)
			return false
		}
	}
	return true
}

// requestPaths is the paths a request names, and the Op kind it is
// recorded under if refused. A symlink's target is not a path of the
// request: what it reaches is checked where it is opened (openedHidden).
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
		case wire.List:
			return OpList, []string{r.Str()}
		}
	}
	return "", nil
}

// openedHidden reports whether f, just opened, is a hidden file reached
// through a symlink: the request named a path that is not hidden, but
// the kernel resolved it (inside the root) to one that is.
func (s *sftpServer) openedHidden(f *os.File) bool {
	if s.hide == nil {
		return false
	}
	real, err := fdPath(f)
	if err != nil {
		return true // cannot tell: refuse
	}
	rel, err := filepath.Rel(s.rootReal, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return true
	}
	return s.hidden(filepath.ToSlash(rel))
}

// fdPath is the path the kernel has for f's open file.
func fdPath(f *os.File) (string, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", err
	}
	var p string
	var rerr error
	if err := rc.Control(func(fd uintptr) { p, rerr = os.Readlink("/proc/self/fd/" + strconv.Itoa(int(fd))) }); err != nil {
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
