// Package confine is the rule that keeps a lent directory's symlinks
// inside it, wherever they are made or moved: by the SFTP server for a
// live mount, by the archive extraction and by the result applied back.
//
// # The rule
//
// A symlink may be made (or moved, or hard-linked) only if its target is
// relative and climbs with ".." only at its start ("../../lib/x", never
// "a/../.."), no more levels than the directory holding the link lies
// below the root. The depth is the directory's real one, found by walking
// ".." up to the root, not what the request's path says.
//
// If every symlink in the tree keeps the rule, no path resolved from
// inside it leaves it: ".." is the only way up, it only ever comes first,
// and every symlink followed on the way keeps the rule in turn. A string
// check of the target alone (path.Join of the link's directory and its
// target) is not enough: "dot -> ." then "par -> dot/.." passes it, and the
// kernel resolves par to the root's parent. So is moving a directory up
// that holds a link climbing out of it: CheckTree checks such a move.
//
// The walks use *at system calls on directory descriptors (POSIX: Linux,
// macOS, FreeBSD).
package confine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/openflag"
)

// ErrEscape is a symlink that would lead out of the root.
var ErrEscape = errors.New("symlink would lead out of the delegated directory")

// LinkTarget checks target for a symlink in a directory depth levels below
// the root (0: in the root itself).
func LinkTarget(target string, depth int) error {
	if target == "" || strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) {
		return ErrEscape
	}
	up, named := 0, false
	for elem := range strings.SplitSeq(target, "/") {
		switch elem {
		case "", ".":
		case "..":
			if named {
				return ErrEscape // climbs after a name, which may itself be a link
			}
			up++
		default:
			named = true
		}
	}
	if up > depth {
		return ErrEscape
	}
	return nil
}

// Root identifies the root directory by device and inode.
type Root struct{ dev, ino uint64 }

// RootOf is the identity of the directory open at fd.
func RootOf(fd int) (Root, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Root{}, fmt.Errorf("stat root: %w", err)
	}
	return Root{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}

// Of is the identity of root's directory.
func Of(root *os.Root) (Root, error) {
	dir, err := root.Open(".")
	if err != nil {
		return Root{}, err
	}
	defer dir.Close()
	return RootOf(int(dir.Fd()))
}

// Fits checks target for a symlink in the directory open at dirfd, at
// that directory's real depth below the root.
func (r Root) Fits(target string, dirfd int) error {
	depth, err := r.Depth(dirfd)
	if err != nil {
		return err
	}
	return LinkTarget(target, depth)
}

// Symlink makes base, in the directory open at dirfd, a symlink to target
// if target Fits there; else ErrEscape.
func (r Root) Symlink(target string, dirfd int, base string) error {
	if err := r.Fits(target, dirfd); err != nil {
		return err
	}
	if err := unix.Symlinkat(target, dirfd, base); err != nil {
		return &os.PathError{Op: "symlink", Path: base, Err: err}
	}
	return nil
}

// maxDepth bounds the walk up: deeper than PATH_MAX allows is not a tree
// a tool could use.
const maxDepth = 4096

// Depth is how many levels below the root the directory open at fd lies,
// walking ".." up to it. A directory not below the root is ErrEscape.
func (r Root) Depth(fd int) (int, error) {
	cur := fd
	defer func() {
		if cur != fd {
			unix.Close(cur)
		}
	}()
	for depth := 0; depth < maxDepth; depth++ {
		var st unix.Stat_t
		if err := unix.Fstat(cur, &st); err != nil {
			return 0, err
		}
		if uint64(st.Dev) == r.dev && uint64(st.Ino) == r.ino {
			return depth, nil
		}
		up, err := unix.Openat(cur, "..", openflag.Search|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		var ust unix.Stat_t
		if err := unix.Fstat(up, &ust); err != nil {
			unix.Close(up)
			return 0, err
		}
		if ust.Dev == st.Dev && ust.Ino == st.Ino { // "/": its own parent
			unix.Close(up)
			return 0, ErrEscape
		}
		if cur != fd {
			unix.Close(cur)
		}
		cur = up
	}
	return 0, ErrEscape
}

// CheckTree checks every symlink beneath the directory open at fd as if
// that directory lay depth levels below the root: before a directory is
// moved up, its links must keep the rule at their new depth.
func CheckTree(fd int, depth int) error {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	dir := os.NewFile(uintptr(dfd), ".")
	defer dir.Close()
	for {
		ents, err := dir.ReadDir(256)
		for _, e := range ents {
			switch e.Type() {
			case os.ModeSymlink:
				target, err := Readlink(dfd, e.Name())
				if err != nil {
					return err
				}
				if err := LinkTarget(target, depth); err != nil {
					return err
				}
			case os.ModeDir:
				sub, err := unix.Openat(dfd, e.Name(), openflag.Search|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					return err
				}
				err = CheckTree(sub, depth+1)
				unix.Close(sub)
				if err != nil {
					return err
				}
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(ents) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Readlink is readlinkat(2) of name in the directory open at dirfd.
func Readlink(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		b := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, b)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(b[:n]), nil
		}
	}
}
