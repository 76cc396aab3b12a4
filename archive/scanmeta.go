package archive

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/confine"
	"github.com/awcp/awcp/internal/treewalk"
)

// ScanMeta is Scan without reading contents: a file's Hash is its mtime and
// size. It tells changes apart cheaply where reading is expensive (through
// a network mount), at the price of missing a rewrite that kept both.
//
// Its directories are read side by side (treewalk), each entry stated
// once by its directory's descriptor: through a live mount of 24,000
// directories a scan one directory at a time took 3.6 s warm and 8.6 s
// cold. The rules are walk's: node_modules/ and .git/ left out, a symlink
// leading out and special files left out.
func ScanMeta(dir string) (Manifest, error) {
	m := Manifest{}
	var mu sync.Mutex // guards m
	err := treewalk.Walk(dir, func(rel string, fd int, ents []os.DirEntry) ([]string, error) {
		var descend []string
		found := make(map[string]Entry, len(ents))
		for _, e := range ents {
			if e.IsDir() && Skip(e.Name()) {
				continue
			}
			p := path.Join(rel, e.Name())
			var st unix.Stat_t
			if err := unix.Fstatat(fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if err == unix.ENOENT {
					continue // gone since it was listed
				}
				return nil, &os.PathError{Op: "lstat", Path: p, Err: err}
			}
			perm := fs.FileMode(st.Mode) & fs.ModePerm
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				if Skip(e.Name()) { // the entry's type was unknown until stated
					continue
				}
				found[p] = Entry{Kind: KindDir, Perm: perm}
				descend = append(descend, p)
			case unix.S_IFREG:
				found[p] = Entry{Kind: KindFile, Perm: perm, Size: st.Size, Hash: fmt.Sprintf("mtime:%d", st.Mtim.Nano())}
			case unix.S_IFLNK:
				target, err := confine.Readlink(fd, e.Name())
				if err != nil {
					return nil, &os.PathError{Op: "readlink", Path: p, Err: err}
				}
				if LinkStaysInside(p, target) {
					found[p] = Entry{Kind: KindSymlink, Perm: 0o777, Hash: target}
				}
			}
		}
		mu.Lock()
		for p, e := range found {
			m[p] = e
		}
		mu.Unlock()
		return descend, nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan workspace: %w", err)
	}
	return m, nil
}
