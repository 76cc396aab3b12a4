// Package archive is the data plane of the archive transport (spec §5.3):
// packing a workspace into a ZIP, its SHA-256 checksum, safe extraction, and
// applying an executor's result back onto the delegator's directory.
//
// # What is in an archive
//
// Regular files (with their permission bits and mtime), directories, and
// symlinks whose target stays inside the tree. Directories named .git and
// node_modules are left out at any depth (the admission check does not count
// them either), as are symlinks leading out of the tree and special files.
// The same rules decide what a result may change: a path that was never sent
// is never touched on the way back.
package archive

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/awcp/awcp/internal/confine"
)

// CompressionLevel is the deflate level of spec §5.3.
const CompressionLevel = 6

// Skip reports whether a directory with this base name is left out.
func Skip(name string) bool { return name == ".git" || name == "node_modules" }

// Kind is the type of a manifest entry.
type Kind string

// Entry kinds.
const (
	KindFile    Kind = "file"
	KindDir     Kind = "dir"
	KindSymlink Kind = "symlink"
)

// Entry describes one path of a tree.
type Entry struct {
	Kind Kind        `json:"kind"`
	Perm fs.FileMode `json:"perm"`
	Size int64       `json:"size,omitempty"`
	// Hash is the hex SHA-256 of a file's content; for a symlink, its target.
	Hash string `json:"hash,omitempty"`
}

// Manifest maps slash-separated relative paths to their entries.
type Manifest map[string]Entry

// Checksum is the hex SHA-256 of data, as START's checksum field carries it.
func Checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// LinkStaysInside reports whether a symlink at rel (slash-separated,
// relative to the root, through no symlink) with target keeps confine's
// rule: it climbs only at its start, and no higher than the root.
func LinkStaysInside(rel, target string) bool {
	depth := 0
	if dir := path.Dir(rel); dir != "." {
		depth = strings.Count(dir, "/") + 1
	}
	return confine.LinkTarget(target, depth) == nil
}

// linker makes symlinks inside a root under confine's rule, at the real
// depth of the directory that holds each (which the root reaches through
// the links it follows).
type linker struct {
	root *os.Root
	id   confine.Root
}

func newLinker(root *os.Root) (linker, error) {
	id, err := confine.Of(root)
	return linker{root: root, id: id}, err
}

// symlink makes name a symlink to target, or fails with confine.ErrEscape.
func (l linker) symlink(target, name string) error {
	dir, err := l.root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer dir.Close()
	return l.id.Symlink(target, int(dir.Fd()), path.Base(name))
}

// visit is called by walk for each path kept; open reads a regular file
// through the root, so a file swapped for a symlink meanwhile cannot lead out.
type visit func(rel string, info fs.FileInfo, target string, open func() (*os.File, error)) error

// walk visits dir's tree in lexical order without following symlinks and
// applies the package's rules, and leaves out what hide (if not nil) says
// is hidden, with everything beneath. It returns the paths it left out:
// by the rules, and hidden.
func walk(dir string, hide func(rel string) bool, fn visit) (skipped, hidden []string, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if d.IsDir() && Skip(d.Name()) {
			return fs.SkipDir
		}
		if hide != nil && hide(rel) {
			hidden = append(hidden, rel)
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var target string
		switch {
		case info.Mode().IsRegular(), info.IsDir():
		case info.Mode()&fs.ModeSymlink != 0:
			if target, err = root.Readlink(rel); err != nil {
				return err
			}
			if !LinkStaysInside(rel, target) {
				skipped = append(skipped, rel)
				return nil
			}
		default: // device, socket, fifo
			skipped = append(skipped, rel)
			return nil
		}
		return fn(rel, info, target, func() (*os.File, error) { return root.Open(rel) })
	})
	return skipped, hidden, err
}

func entryOf(info fs.FileInfo, target string) Entry {
	e := Entry{Perm: info.Mode().Perm()}
	switch {
	case info.IsDir():
		e.Kind = KindDir
	case info.Mode()&fs.ModeSymlink != 0:
		e.Kind, e.Perm, e.Hash = KindSymlink, 0o777, target
	default:
		e.Kind, e.Size = KindFile, info.Size()
	}
	return e
}

// Scan returns the manifest of dir under the package's rules.
func Scan(dir string) (Manifest, error) { return ScanHiding(dir, nil) }

// ScanHiding is Scan leaving out what hide says is hidden.
func ScanHiding(dir string, hide func(rel string) bool) (Manifest, error) {
	m := Manifest{}
	_, _, err := walk(dir, hide, func(rel string, info fs.FileInfo, target string, open func() (*os.File, error)) error {
		e := entryOf(info, target)
		if e.Kind == KindFile {
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			h := sha256.New()
			if e.Size, err = io.Copy(h, f); err != nil {
				return fmt.Errorf("read %s: %w", rel, err)
			}
			e.Hash = hex.EncodeToString(h.Sum(nil))
		}
		m[rel] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan workspace: %w", err)
	}
	return m, nil
}

// ScanMeta is Scan without reading contents: a file's Hash is its mtime and
// size. It tells changes apart cheaply where reading is expensive (through
// a network mount), at the price of missing a rewrite that kept both.
func ScanMeta(dir string) (Manifest, error) {
	m := Manifest{}
	_, _, err := walk(dir, nil, func(rel string, info fs.FileInfo, target string, _ func() (*os.File, error)) error {
		e := entryOf(info, target)
		if e.Kind == KindFile {
			e.Hash = fmt.Sprintf("mtime:%d", info.ModTime().UnixNano())
		}
		m[rel] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan workspace: %w", err)
	}
	return m, nil
}

// Packed is a workspace as a ZIP.
type Packed struct {
	Zip      []byte
	Manifest Manifest // what the ZIP holds
	Skipped  []string // paths left out: links leading out, special files
	Hidden   []string // paths left out as PackOptions.Hide said
}

// PackOptions are PackWith's.
type PackOptions struct {
	// Folder, if set, holds every entry (one path element), as the head
	// dialect of AWCP sends a resource. The manifest's paths stay
	// relative to dir.
	Folder string
	// Hide, if set, says which paths (relative to dir, slash-separated)
	// are left out, with everything beneath them.
	Hide func(rel string) bool
	// Stored keeps files as they are instead of deflating them: for a ZIP
	// read on this machine alone, which compressing only slows (the git
	// transport's view: 64 MiB took a second and a half of CPU).
	Stored bool
}

// Pack zips dir (deflate level 6) under the package's rules, in memory.
func Pack(dir string) (*Packed, error) {
	var buf bytes.Buffer
	p, err := PackTo(&buf, dir)
	if err != nil {
		return nil, err
	}
	p.Zip = buf.Bytes()
	return p, nil
}

// PackTo zips dir (deflate level 6) under the package's rules into w, as it
// walks: a workspace is never held in memory. The result's Zip is nil.
func PackTo(w io.Writer, dir string) (*Packed, error) { return PackIn(w, dir, "") }

// PackIn is PackTo with every entry in folder (one path element; "" for
// none), as the head dialect of AWCP sends a resource. The manifest's
// paths stay relative to dir.
func PackIn(w io.Writer, dir, folder string) (*Packed, error) {
	return PackWith(w, dir, PackOptions{Folder: folder})
}

// PackWith is PackTo as opts say.
func PackWith(w io.Writer, dir string, opts PackOptions) (*Packed, error) {
	folder := opts.Folder
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, pooledDeflate)
	prefix := ""
	if folder != "" {
		if !filepath.IsLocal(folder) || strings.ContainsRune(folder, '/') {
			return nil, fmt.Errorf("pack workspace: folder %q is not one path element", folder)
		}
		prefix = folder + "/"
		hdr := &zip.FileHeader{Name: prefix, Method: zip.Store}
		hdr.SetMode(fs.ModeDir | 0o755)
		if _, err := zw.CreateHeader(hdr); err != nil {
			return nil, fmt.Errorf("pack workspace: %w", err)
		}
	}
	m := Manifest{}
	skipped, hidden, err := walk(dir, opts.Hide, func(rel string, info fs.FileInfo, target string, open func() (*os.File, error)) error {
		e := entryOf(info, target)
		hdr := &zip.FileHeader{Name: prefix + rel, Method: zip.Deflate, Modified: info.ModTime()}
		if opts.Stored {
			hdr.Method = zip.Store
		}
		hdr.SetMode(info.Mode())
		switch e.Kind {
		case KindDir:
			hdr.Name += "/"
			hdr.Method = zip.Store
			if _, err := zw.CreateHeader(hdr); err != nil {
				return err
			}
		case KindSymlink:
			hdr.Method = zip.Store
			w, err := zw.CreateHeader(hdr)
			if err != nil {
				return err
			}
			if _, err := io.WriteString(w, target); err != nil {
				return err
			}
		case KindFile:
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			w, err := zw.CreateHeader(hdr)
			if err != nil {
				return err
			}
			h := sha256.New()
			if e.Size, err = io.Copy(io.MultiWriter(w, h), f); err != nil {
				return fmt.Errorf("read %s: %w", rel, err)
			}
			e.Hash = hex.EncodeToString(h.Sum(nil))
		}
		m[rel] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pack workspace: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("pack workspace: %w", err)
	}
	return &Packed{Manifest: m, Skipped: skipped, Hidden: hidden}, nil
}

// deflaters recycles flate writers: each holds about a megabyte of state,
// and a workspace has thousands of files.
var deflaters sync.Pool

// pooledDeflate is a zip.Compressor at CompressionLevel from the pool.
func pooledDeflate(w io.Writer) (io.WriteCloser, error) {
	if fw, ok := deflaters.Get().(*flate.Writer); ok {
		fw.Reset(w)
		return pooledWriter{fw}, nil
	}
	fw, err := flate.NewWriter(w, CompressionLevel)
	if err != nil {
		return nil, err
	}
	return pooledWriter{fw}, nil
}

type pooledWriter struct{ *flate.Writer }

func (p pooledWriter) Close() error {
	err := p.Writer.Close()
	deflaters.Put(p.Writer)
	return err
}

// Limits bound what Extract writes. Zero fields take the defaults.
type Limits struct {
	// MaxEntries is the most entries an archive may have. Default 100,000.
	MaxEntries int
	// MaxBytes is the most bytes extraction may write, counted as they are
	// decompressed (headers can lie). Default 1 GiB.
	MaxBytes int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = 100_000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 1 << 30
	}
	return l
}

// ErrUnsafe marks an archive refused for what it tries to do.
var ErrUnsafe = errors.New("unsafe archive")

func unsafef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsafe, fmt.Sprintf(format, args...))
}

// Extract writes the ZIP data into dir, which must exist. It refuses absolute
// names, names with "..", duplicate names, symlinks leading outside dir,
// and archives over the limits; every write goes through an os.Root on dir,
// so nothing lands outside it even through links made earlier in the same
// archive. On error dir may hold part of the archive: the caller removes it.
func Extract(data []byte, dir string, lim Limits) error {
	return ExtractFrom(bytes.NewReader(data), int64(len(data)), dir, lim)
}

// ExtractFrom is Extract of the size bytes of r, a ZIP file for instance.
func ExtractFrom(r io.ReaderAt, size int64, dir string, lim Limits) error {
	lim = lim.withDefaults()
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return fmt.Errorf("%w: not a ZIP archive: %v", ErrUnsafe, err)
	}
	if n := len(zr.File); n > lim.MaxEntries {
		return unsafef("%d entries, more than the limit of %d", n, lim.MaxEntries)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	links, err := newLinker(root)
	if err != nil {
		return err
	}

	budget := lim.MaxBytes
	seen := make(map[string]bool, len(zr.File))
	type dirMode struct {
		name string
		perm fs.FileMode
	}
	var dirs []dirMode
	for _, f := range zr.File {
		name := strings.TrimSuffix(f.Name, "/")
		if name == "" || strings.HasPrefix(f.Name, "/") || strings.ContainsAny(name, "\\\x00") || !filepath.IsLocal(name) {
			return unsafef("entry %q leaves the work directory", f.Name)
		}
		if seen[name] {
			return unsafef("entry %q appears twice", name)
		}
		seen[name] = true
		mode := f.Mode()
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		}
		switch {
		case mode.IsDir():
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("extract %s: %w", name, err)
			}
			dirs = append(dirs, dirMode{name, mode.Perm()})
		case mode&fs.ModeSymlink != 0:
			target, err := readSmall(f, 4096)
			if err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
			if err := links.symlink(target, name); errors.Is(err, confine.ErrEscape) {
				return unsafef("symlink %q points outside the work directory", name)
			} else if err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		case mode.IsRegular():
			n, err := extractFile(root, f, name, budget)
			if err != nil {
				return err
			}
			budget -= n
		default:
			return unsafef("entry %q is not a file, directory or symlink", name)
		}
	}
	// Directory modes last: a read-only directory would refuse its entries.
	// The owner keeps full access so the work dir can always be removed.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := root.Chmod(dirs[i].name, dirs[i].perm|0o700); err != nil {
			return fmt.Errorf("extract %s: %w", dirs[i].name, err)
		}
	}
	return nil
}

func extractFile(root *os.Root, f *zip.File, name string, budget int64) (int64, error) {
	rc, err := f.Open()
	if err != nil {
		return 0, fmt.Errorf("%w: entry %s: %v", ErrUnsafe, name, err)
	}
	defer rc.Close()
	out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("extract %s: %w", name, err)
	}
	n, err := io.Copy(out, io.LimitReader(rc, budget+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case n > budget:
		return n, unsafef("archive expands beyond the limit (zip bomb?)")
	case err != nil:
		return n, fmt.Errorf("extract %s: %w", name, err)
	}
	// Setuid, setgid and sticky bits are not carried over.
	if err := root.Chmod(name, f.Mode().Perm()); err != nil {
		return n, fmt.Errorf("extract %s: %w", name, err)
	}
	if !f.Modified.IsZero() {
		if err := root.Chtimes(name, f.Modified, f.Modified); err != nil {
			return n, fmt.Errorf("extract %s: %w", name, err)
		}
	}
	return n, nil
}

func readSmall(f *zip.File, max int64) (string, error) {
	rc, err := f.Open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return "", err
	}
	if int64(len(b)) > max {
		return "", unsafef("symlink target longer than %d bytes", max)
	}
	return string(b), nil
}

// Changed lists the paths of after that are new or differ from before:
// the highlights of a task.
func Changed(before, after Manifest) []string {
	var out []string
	for p, e := range after {
		if e.Kind == KindDir {
			continue
		}
		if b, ok := before[p]; !ok || b != e {
			out = append(out, p)
		}
	}
	sortPaths(out)
	return out
}
