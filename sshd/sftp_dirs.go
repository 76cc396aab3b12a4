package sshd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

func (s *sftpServer) opendir(id uint32, r *reader) {
	name := s.rel(r.Str())
	if name == envRoot && r.Err == nil {
		s.openEnvRoot(id)
		return
	}
	f, real, err := s.openDir(name, r.Err)
	if err != nil {
		s.errStatus(id, err)
		return
	}
	s.recordReal(Op{Kind: OpList, Path: real})
	s.sendHandle(id, &handle{f: f, dir: true, name: real})
}

// openEnvRoot opens the environment root: a handle on the export's root
// (so that closing it is as for any directory) listing only the export.
func (s *sftpServer) openEnvRoot(id uint32) {
	ent, err := s.envEntry()
	if err != nil {
		s.errStatus(id, err)
		return
	}
	f, err := s.root.Open(".")
	if err != nil {
		s.errStatus(id, err)
		return
	}
	s.sendHandle(id, &handle{f: f, dir: true, listed: true, entries: []fs.DirEntry{ent}})
}

// openDir opens the directory name (OPENDIR, wire.List), and returns its
// real path too (what its entries' names are checked against); decodeErr
// is the request's decoding error.
func (s *sftpServer) openDir(name string, decodeErr error) (*os.File, string, error) {
	if decodeErr != nil {
		return nil, "", errBadMessage
	}
	if err := s.handleRoom(); err != nil {
		return nil, "", err
	}
	// One openat2 beneath the root, however deep (os.Root's Open
	// walks a component at a time); its path not read back where the
	// walk followed no symlink. O_DIRECTORY: a FIFO named is refused,
	// never opened (an open for reading would wait for a writer).
	f, plain, err := s.fast.openFile(name, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, "", err
	}
	fi, err := f.Stat()
	if err == nil && !fi.IsDir() {
		err = syscall.ENOTDIR
	}
	real := name
	if err == nil {
		var hidden bool
		if real, hidden = s.opened(f, name, plain); hidden {
			err = errHidden
		}
	}
	if err != nil {
		f.Close()
		return nil, "", err
	}
	return f, real, nil
}

func (s *sftpServer) readdir(id uint32, r *reader) {
	h, err := s.get(r.Str())
	if err == nil && !h.dir {
		err = syscall.ENOTDIR
	}
	if err != nil {
		s.errStatus(id, err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.listed {
		if h.entries, err = readDirAt(h.f, -1); err != nil {
			s.errStatus(id, err)
			return
		}
		h.entries = s.visible(h.name, h.entries)
		sortByName(h.entries)
		h.listed = true
	}
	if h.pos >= len(h.entries) {
		s.status(id, wire.EOF, "EOF")
		return
	}
	page := h.entries[h.pos:min(h.pos+readdirPage, len(h.entries))]
	h.pos += len(page)
	s.names(id, infosOf(page), longName)
}

// list answers wire.List: the directory's entries with their
// attributes, in one NAME.
func (s *sftpServer) list(id uint32, r *reader) {
	f, name, err := s.openDir(s.rel(r.Str()), r.Err)
	if err != nil {
		s.errStatus(id, err)
		return
	}
	s.recordReal(Op{Kind: OpList, Path: name}) // openDir's path is the kernel's
	defer f.Close()
	ents, err := f.ReadDir(wire.ListMax + 1)   // stated below, once known not too many
	if err != nil && !errors.Is(err, io.EOF) { // EOF: empty
		s.errStatus(id, err)
		return
	}
	if len(ents) > wire.ListMax {
		s.status(id, wire.Failure, "too many entries for "+wire.List)
		return
	}
	ents = withAttrs(f, s.visible(name, ents)) // a hidden entry is not even stated
	sortByName(ents)
	s.names(id, infosOf(ents), noLongName)
}

// readDirAt reads up to n entries (n <= 0: all) of the directory open
// at f, each with its attributes read by the directory's descriptor
// (fstatat), never by a path: os.File's entries of a directory opened by
// openat2 would lstat parent+"/"+name, a name relative to nothing here.
// An entry gone meanwhile is left out.
func readDirAt(f *os.File, n int) ([]fs.DirEntry, error) {
	ents, err := f.ReadDir(n)
	return withAttrs(f, ents), err
}

// withAttrs is ents, entries of the directory open at f, each with its
// attributes read by f's descriptor; an entry gone meanwhile is left out.
func withAttrs(f *os.File, ents []fs.DirEntry) []fs.DirEntry {
	fd := int(f.Fd())
	out := ents[:0]
	for _, e := range ents {
		if info, ok := statAt(fd, e.Name()); ok {
			out = append(out, statEntry{info})
		}
	}
	return out
}

// statAt is what fstatat says of name in the directory open at dirFd, not
// following a link; ok is false if it is gone.
func statAt(dirFd int, name string) (*statInfo, bool) {
	var st unix.Stat_t
	if unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return nil, false
	}
	// The kernel's struct stat both ways (what putAttrs reads from
	// Sys(), as os's entries hold it): the sizes are checked below.
	return &statInfo{name: name, st: *(*syscall.Stat_t)(unsafe.Pointer(&st))}, true
}

// These fail to compile where x/sys's and syscall's struct stat differ in size.
var _ [unsafe.Sizeof(unix.Stat_t{}) - unsafe.Sizeof(syscall.Stat_t{})]struct{}
var _ [unsafe.Sizeof(syscall.Stat_t{}) - unsafe.Sizeof(unix.Stat_t{})]struct{}

// statEntry is a directory entry whose attributes were read with it.
type statEntry struct{ info *statInfo }

func (e statEntry) Name() string               { return e.info.name }
func (e statEntry) IsDir() bool                { return e.info.IsDir() }
func (e statEntry) Type() fs.FileMode          { return e.info.Mode().Type() }
func (e statEntry) Info() (fs.FileInfo, error) { return e.info, nil }

// infosOf is the attributes of ents, read without following links; an
// entry removed meanwhile is left out.
func infosOf(ents []fs.DirEntry) []fs.FileInfo {
	infos := make([]fs.FileInfo, 0, len(ents))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			infos = append(infos, fi)
		}
	}
	return infos
}

// sortByName puts a directory's entries in name order: the order most
// tools that walk a tree read its files in (git, tar's and find's sorted
// modes), which lets the client read ahead of them.
func sortByName(ents []fs.DirEntry) {
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
}

// name answers with one name and optional attributes.
func (s *sftpServer) name(id uint32, name string, fi fs.FileInfo) {
	b := newBuf()
	b.Byte(wire.Name)
	b.U32(id)
	b.U32(1)
	b.Str(name)
	b.Str(name)
	if fi != nil {
		putAttrs(&b, fi)
	} else {
		b.U32(0)
	}
	s.send(b)
}

// names answers with infos, each with the long name long makes of it.
func (s *sftpServer) names(id uint32, infos []fs.FileInfo, long func(fs.FileInfo) string) {
	b := newBuf()
	b.Byte(wire.Name)
	b.U32(id)
	b.U32(uint32(len(infos)))
	for _, fi := range infos {
		b.Str(fi.Name())
		b.Str(long(fi))
		putAttrs(&b, fi)
	}
	s.send(b)
}

// noLongName is the long name of a wire.List answer: our client has no use
// for one, and making it is most of the answer's cost.
func noLongName(fs.FileInfo) string { return "" }

// longName is the ls -l line v3 clients print.
func longName(fi fs.FileInfo) string {
	return fmt.Sprintf("%s 1 owner group %8d %s %s", fi.Mode().String(), fi.Size(),
		fi.ModTime().Format("Jan _2 15:04"), fi.Name())
}
