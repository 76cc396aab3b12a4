// Package review is what the owner does with a staged result (issue:
// staged review): see it as a diff, apply it three-way against the base it
// was made from, record it as a commit on a branch of its own, or discard
// it. A result is the same thing on both transports — the base and the
// executor's version of each changed path — read from a live mount's
// staging area (internal/stage) or from an archive result with the
// archive it was made from.
package review

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/internal/stage"
	"github.com/awcp/awcp/internal/untrusted"
)

// Result is a staged result, ready to read: Paths are the paths the
// executor changed, parents first; Base and Res their entries before and
// after (absent: none). BaseDir holds the base's files, ResultDir the
// executor's.
type Result struct {
	BaseDir, ResultDir string
	Base, Res          archive.Manifest
	Paths              []string
	release            func()
}

// Close removes what reading the result unpacked.
func (r *Result) Close() {
	if r.release != nil {
		r.release()
	}
}

// FromArea reads a live mount's staging area. What hide (if not nil)
// says is hidden is left out: the server never lets the executor reach
// it, and the review never writes it either.
func FromArea(dir string, hide func(rel string) bool) (*Result, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("the staging area is gone: %w", err)
	}
	area, err := stage.Read(dir)
	if err != nil {
		return nil, err
	}
	paths, base := area.Changes()
	upper, err := os.OpenRoot(area.Upper())
	if err != nil {
		return nil, err
	}
	defer upper.Close()
	r := &Result{BaseDir: area.BaseDir(), ResultDir: area.Upper(), Base: archive.Manifest{}, Res: archive.Manifest{}}
	for _, p := range paths {
		if hide != nil && hidden(p, hide) {
			continue
		}
		b := base[p]
		after, inRes := archive.EntryAt(upper, p)
		if b == nil && !inRes || b != nil && inRes && *b == after {
			continue // touched, and left as it was
		}
		if b != nil {
			r.Base[p] = *b
		}
		if inRes {
			r.Res[p] = after
		}
		r.Paths = append(r.Paths, p)
	}
	return r, nil
}

// FromArchive reads an archive result (resultZip) with what was sent
// (baseZip, whose manifest is base), unpacking both under tmp; folder is
// the archives' folder standing for the directory (the head dialect's),
// or "". What hide says is hidden is left out of the result, whatever
// the executor put in it.
func FromArchive(baseZip, resultZip string, base archive.Manifest, folder, tmp string, lim archive.Limits, hide func(rel string) bool) (*Result, error) {
	dir, err := os.MkdirTemp(tmp, "review-")
	if err != nil {
		return nil, err
	}
	r := &Result{release: func() { os.RemoveAll(dir) }}
	r.BaseDir, r.ResultDir = filepath.Join(dir, "base"), filepath.Join(dir, "result")
	for _, x := range [][2]string{{baseZip, r.BaseDir}, {resultZip, r.ResultDir}} {
		if err := extract(x[0], x[1], lim); err != nil {
			r.Close()
			return nil, err
		}
	}
	if folder != "" {
		r.BaseDir, r.ResultDir = filepath.Join(r.BaseDir, folder), filepath.Join(r.ResultDir, folder)
	}
	res, err := archive.ScanHiding(r.ResultDir, hide)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("the result: %w", err)
	}
	r.Base, r.Res = archive.Manifest{}, archive.Manifest{}
	for p, b := range base {
		if a, ok := res[p]; !ok || a != b {
			r.Base[p] = b
			r.Paths = append(r.Paths, p)
			if ok {
				r.Res[p] = a
			}
		}
	}
	for p, a := range res {
		if _, ok := base[p]; !ok {
			r.Res[p] = a
			r.Paths = append(r.Paths, p)
		}
	}
	stage.SortPaths(r.Paths)
	return r, nil
}

func extract(zipFile, dir string, lim archive.Limits) error {
	f, err := os.Open(zipFile)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := archive.ExtractFrom(f, fi.Size(), dir, lim); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(zipFile), err)
	}
	return nil
}

// hidden reports whether p, or a directory above it, is hidden.
func hidden(p string, hide func(rel string) bool) bool {
	for q := p; q != "." && q != "/" && q != ""; q = path.Dir(q) {
		if hide(q) {
			return true
		}
	}
	return false
}

// Apply makes dir end as the executor left each changed path, where the
// owner did not change it meanwhile; a path both changed keeps the owner's
// version, the executor's is written beside it with suffix, and the
// report names it. What git executes or obeys (untrusted.GitControlled)
// is left out, and reported as ignored, unless allowGitControl.
func (r *Result) Apply(dir, suffix string, allowGitControl bool) (*archive.Report, error) {
	paths, kept := r.Paths, []string(nil)
	if !allowGitControl {
		paths = nil
		for _, p := range r.Paths {
			if untrusted.GitControlled(p) {
				kept = append(kept, p+" (git control: applied only with --allow-git-control)")
				continue
			}
			paths = append(paths, p)
		}
	}
	rep, err := archive.ApplyChanges(dir, r.ResultDir, r.BaseDir, r.Base, r.Res, paths, suffix)
	if rep != nil {
		rep.Ignored = append(rep.Ignored, kept...)
	}
	return rep, err
}

// Status is how a path changed: A added, M modified, D deleted, T its
// kind changed (a file became a link, say).
type Status string

const (
	Added    Status = "A"
	Modified Status = "M"
	Deleted  Status = "D"
	Retyped  Status = "T"
)

// File is one changed path that is not a directory.
type File struct {
	Path    string `json:"path"`
	Status  Status `json:"status"`
	Kind    string `json:"kind"`               // of the executor's (of the base's, deleted)
	Binary  bool   `json:"binary,omitempty"`   // not compared as lines
	OldSize int64  `json:"old_size,omitempty"` // bytes in the base
	NewSize int64  `json:"new_size,omitempty"` // bytes in the executor's
	Added   int    `json:"added,omitempty"`    // lines
	Removed int    `json:"removed,omitempty"`
}

// Line is f in a line: its status, path, and line counts or sizes.
func (f File) Line() string {
	if f.Binary {
		return fmt.Sprintf("%s %s (binary, %d -> %d bytes)", f.Status, untrusted.Name(f.Path), f.OldSize, f.NewSize)
	}
	return fmt.Sprintf("%s %s +%d -%d", f.Status, untrusted.Name(f.Path), f.Added, f.Removed)
}

// Files is the changed paths that are not directories, with their line
// counts.
func (r *Result) Files() ([]File, error) {
	out := []File{}
	err := r.eachFile(func(f File, _ []edit) error {
		out = append(out, f)
		return nil
	})
	return out, err
}

// eachFile calls fn with each changed path that is not a directory, in
// order, and its line edits (nil for a binary or large file): each file
// is read and compared once.
func (r *Result) eachFile(fn func(File, []edit) error) error {
	for _, p := range r.Paths {
		b, inBase := r.Base[p]
		a, inRes := r.Res[p]
		if (!inBase || b.Kind == archive.KindDir) && (!inRes || a.Kind == archive.KindDir) {
			continue
		}
		f := File{Path: p}
		switch {
		case !inBase || b.Kind == archive.KindDir:
			f.Status, f.Kind = Added, string(a.Kind)
		case !inRes || a.Kind == archive.KindDir:
			f.Status, f.Kind = Deleted, string(b.Kind)
		case a.Kind != b.Kind:
			f.Status, f.Kind = Retyped, string(a.Kind)
		default:
			f.Status, f.Kind = Modified, string(a.Kind)
		}
		if inBase && b.Kind == archive.KindFile {
			f.OldSize = b.Size
		}
		if inRes && a.Kind == archive.KindFile {
			f.NewSize = a.Size
		}
		old, new, err := r.texts(p)
		if err != nil {
			return err
		}
		var edits []edit
		if old == nil || new == nil {
			f.Binary = true
		} else {
			edits = diffLines(old, new)
			for _, e := range edits {
				switch e.Op {
				case '+':
					f.Added++
				case '-':
					f.Removed++
				}
			}
		}
		if err := fn(f, edits); err != nil {
			return err
		}
	}
	return nil
}

// maxTextBytes bounds a file compared as lines: past it, it is named with
// its sizes, as a binary file is.
const maxTextBytes = 4 << 20

// texts is p's lines in the base and in the result (none where absent or
// not a file); nil lines mean binary or too large.
func (r *Result) texts(p string) (old, new []string, err error) {
	read := func(dir string, m archive.Manifest) ([]string, error) {
		e, ok := m[p]
		switch {
		case !ok || e.Kind == archive.KindDir:
			return []string{}, nil
		case e.Kind == archive.KindSymlink:
			return []string{e.Hash}, nil
		case e.Size > maxTextBytes:
			return nil, nil
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if errors.Is(err, fs.ErrNotExist) && dir == r.BaseDir {
			return nil, nil // a base not kept: named, not shown
		}
		if err != nil {
			return nil, err
		}
		if slices.Contains(b[:min(len(b), 8000)], 0) {
			return nil, nil
		}
		return splitLines(string(b)), nil
	}
	if old, err = read(r.BaseDir, r.Base); err != nil {
		return nil, nil, err
	}
	new, err = read(r.ResultDir, r.Res)
	return old, new, err
}

// splitLines splits s after each newline; a last line without one is
// kept as it is.
func splitLines(s string) []string {
	if s == "" {
		return []string{}
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}
