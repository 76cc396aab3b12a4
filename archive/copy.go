package archive

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// CopyView copies what an archive of dir would hold — the package's
// rules, less what hide says is hidden — to dst, which must not exist:
// the view of the directory an executor is lent, as a tree of its own
// (compare's check runs the executor's code on one). Each file is read
// through the directory's root, so a link swapped in meanwhile cannot
// lead the copy out; permissions are kept but for set-id bits.
func CopyView(dir, dst string, hide func(rel string) bool) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	out, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	ln, err := newLinker(out)
	if err != nil {
		return err
	}
	_, _, err = walk(dir, hide, func(rel string, info fs.FileInfo, target string, open func() (*os.File, error)) error {
		perm := info.Mode().Perm()
		switch e := entryOf(info, target); e.Kind {
		case KindDir:
			return out.Mkdir(rel, perm|0o700)
		case KindSymlink:
			return ln.symlink(target, rel)
		default:
			in, err := open()
			if err != nil {
				return err
			}
			defer in.Close()
			f, err := out.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, in)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
	})
	if err != nil {
		return fmt.Errorf("copy the lent view of %s: %w", dir, err)
	}
	return nil
}
