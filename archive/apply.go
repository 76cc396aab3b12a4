package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/awcp/awcp/internal/merge3"
)

// Report says what Apply did.
type Report struct {
	Created   []string `json:"created,omitempty"`
	Modified  []string `json:"modified,omitempty"`
	Deleted   []string `json:"deleted,omitempty"`
	Conflicts []string `json:"conflicts,omitempty"` // "path: what happened"
	// Merged are the files both sides changed, on different lines, that
	// now hold both changes (ApplyChanges with a base): also in Modified.
	Merged []string `json:"merged,omitempty"`
	// Ignored are the result's top-level entries outside ApplyOptions.Folder,
	// and its hidden paths ("path (hidden)").
	Ignored []string `json:"ignored,omitempty"`
}

// ApplyOptions configures Apply.
type ApplyOptions struct {
	// StagingDir is where the result is extracted first; it should be on
	// the same file system as the target. Required.
	StagingDir string
	// ConflictSuffix names the executor's copy of a file the user changed
	// meanwhile: "<path><ConflictSuffix>". Required.
	ConflictSuffix string
	// Limits bound the extraction of the result.
	Limits Limits
	// Folder, if set, is the result's folder that stands for dir (a
	// resource of AWCP's head dialect): only what it holds is applied,
	// and the result's other entries are reported as Ignored.
	Folder string
	// Hide, if set, says which paths are hidden: not lent, so the result
	// neither writes nor deletes them (they are reported as Ignored).
	Hide func(rel string) bool
	// Protected, if set, says which paths of the owner's the result may
	// not write, and why ("" where it may): git's control paths
	// (untrusted.GitControlled), what lies outside the delegation's write
	// scope. They are left out as hidden ones are, and reported as such.
	Protected func(rel string) (why string)
}

// Apply makes dir end as the executor left it, given base (the manifest of
// what was sent) and result (the ZIP the executor returned): created,
// changed and deleted paths are carried over. A path the user changed in dir
// since base is not overwritten: the executor's version is written beside it
// with the conflict suffix and the conflict is reported. Paths that were
// never sent (see the package rules) are never touched.
func Apply(dir string, base Manifest, result []byte, opts ApplyOptions) (*Report, error) {
	return ApplyFrom(dir, base, bytes.NewReader(result), int64(len(result)), opts)
}

// ApplyFrom is Apply of a result of size bytes read from r.
func ApplyFrom(dir string, base Manifest, r io.ReaderAt, size int64, opts ApplyOptions) (*Report, error) {
	if opts.StagingDir == "" || opts.ConflictSuffix == "" {
		return nil, errors.New("apply: StagingDir and ConflictSuffix are required")
	}
	if err := os.MkdirAll(opts.StagingDir, 0o700); err != nil {
		return nil, err
	}
	staging, err := os.MkdirTemp(opts.StagingDir, "result-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	if err := ExtractFrom(r, size, staging, opts.Limits); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	rep := &Report{}
	if opts.Folder != "" {
		top, err := os.ReadDir(staging)
		if err != nil {
			return nil, err
		}
		found := false
		for _, e := range top {
			if e.Name() == opts.Folder && e.IsDir() {
				found = true
			} else {
				rep.Ignored = append(rep.Ignored, e.Name())
			}
		}
		if !found {
			return nil, fmt.Errorf("result: it has no folder %s/, the one lent", opts.Folder)
		}
		staging = filepath.Join(staging, opts.Folder)
	}
	var hiddenInResult, notOurs func(rel string) bool
	if opts.Hide != nil || opts.Protected != nil {
		hiddenInResult = func(rel string) bool {
			switch {
			case opts.Hide != nil && opts.Hide(rel):
				rep.Ignored = append(rep.Ignored, rel+" (hidden)")
				return true
			case opts.Protected != nil && opts.Protected(rel) != "":
				rep.Ignored = append(rep.Ignored, rel+" ("+opts.Protected(rel)+")")
				return true
			}
			return false
		}
		notOurs = func(rel string) bool {
			return opts.Hide != nil && opts.Hide(rel) || opts.Protected != nil && opts.Protected(rel) != ""
		}
	}
	res, err := ScanHiding(staging, hiddenInResult)
	if err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	cur, err := ScanHiding(dir, notOurs)
	if err != nil {
		return nil, err
	}
	return apply(dir, staging, base, res, union(base, res), func(p string) (Entry, bool) {
		c, ok := cur[p]
		return c, ok
	}, opts.ConflictSuffix, rep, "")
}

// ApplyChanges is Apply of a result held in the directory src, of which
// only paths changed: base and res are their entries before and after
// (absent: none). What dir holds at each path now is read there, so the
// cost is that of the paths, not of the tree. A path under a symlink in
// dir is left alone, as a conflict.
//
// With baseDir, the files as they were lent, a text file both sides
// changed is merged by lines as git merge-file does (internal/merge3):
// changes to different lines are both kept in dir's file; where both
// changed the same lines the local version is kept and the executor's and
// the base's are written beside it (suffix and suffix+".base"), for git
// merge-file or by hand.
func ApplyChanges(dir, src, baseDir string, base, res Manifest, paths []string, suffix string) (*Report, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	paths = slices.Clone(paths)
	sortPaths(paths)
	return apply(dir, src, base, res, paths, func(p string) (Entry, bool) { return EntryAt(root, p) }, suffix, &Report{}, baseDir)
}

// apply makes each of paths in dir as res has it, from the files in src,
// where dir holds at the path (cur) what base does; else, unless dir holds
// res's already, it is a conflict.
func apply(dir, src string, base, res Manifest, paths []string, cur func(p string) (Entry, bool), suffix string, rep *Report, baseDir string) (*Report, error) {
	a := &applier{staging: src, suffix: suffix, rep: rep}
	type held struct {
		e  Entry
		ok bool
	}
	seen := map[string]held{}
	read := cur
	cur = func(p string) (Entry, bool) { // as dir was before apply, read once
		h, ok := seen[p]
		if !ok {
			h.e, h.ok = read(p)
			seen[p] = h
		}
		return h.e, h.ok
	}
	var err error
	if a.root, err = os.OpenRoot(dir); err != nil {
		return nil, err
	}
	defer a.root.Close()
	if a.links, err = newLinker(a.root); err != nil {
		return nil, err
	}
	if a.src, err = os.OpenRoot(src); err != nil {
		return nil, err
	}
	defer a.src.Close()
	if baseDir != "" {
		if a.base, err = os.OpenRoot(baseDir); err != nil {
			return nil, err
		}
		defer a.base.Close()
	}

	var todo []string
	for _, p := range paths {
		b, inBase := base[p]
		r, inRes := res[p]
		c, inCur := cur(p)
		switch {
		case inBase == inRes && b == r: // the executor left it alone
		case inCur == inRes && c == r: // already as the executor left it
		case inCur == inBase && c == b: // only the executor changed it
			todo = append(todo, p)
		case a.base != nil && inBase && inRes && inCur && b.Kind == KindFile && r.Kind == KindFile && c.Kind == KindFile:
			a.merge(p, r, c)
		default:
			a.conflict(p, inRes, r, inCur)
		}
	}
	// Removals deepest first, then creations parents first.
	for i := len(todo) - 1; i >= 0; i-- {
		p := todo[i]
		r, inRes := res[p]
		c, inCur := cur(p)
		if inCur && (!inRes || r.Kind != c.Kind || r.Kind == KindSymlink) {
			if err := a.root.Remove(p); err != nil {
				a.conflictf(p, "kept: could not remove it (%v)", rootErr(err))
				continue
			}
			if !inRes {
				a.rep.Deleted = append(a.rep.Deleted, listed(p, c.Kind))
			}
		}
	}
	for _, p := range todo {
		r, inRes := res[p]
		if !inRes {
			continue
		}
		c, inCur := cur(p)
		if err := a.put(p, r, inCur && c.Kind == r.Kind && r.Kind != KindSymlink); err != nil {
			a.conflictf(p, "not applied: %v", rootErr(err))
			continue
		}
		if inCur {
			a.rep.Modified = append(a.rep.Modified, listed(p, r.Kind))
		} else {
			a.rep.Created = append(a.rep.Created, listed(p, r.Kind))
		}
	}
	return a.rep, nil
}

// listed is p as a report lists it: a directory with a trailing slash, as
// the live mount's change list writes it, so that no count takes it for a
// file.
func listed(p string, k Kind) string {
	if k == KindDir {
		return p + "/"
	}
	return p
}

type applier struct {
	root, src *os.Root
	base      *os.Root // the files as lent, for merges; nil: none
	links     linker   // makes symlinks in root
	staging   string
	suffix    string
	rep       *Report
}

func (a *applier) conflictf(p, format string, args ...any) {
	a.rep.Conflicts = append(a.rep.Conflicts, p+": "+fmt.Sprintf(format, args...))
}

// conflict keeps the user's version of p and, if the executor left a file
// there, writes the executor's version beside it.
func (a *applier) conflict(p string, inRes bool, r Entry, inCur bool) {
	switch {
	case !inRes:
		a.conflictf(p, "changed locally and deleted by the executor; kept the local version")
	case r.Kind == KindFile:
		side := p + a.suffix
		if err := a.copyFile(p, side, r.Perm); err != nil {
			a.conflictf(p, "changed on both sides; kept the local version, could not save the executor's (%v)", rootErr(err))
			return
		}
		if inCur {
			a.conflictf(p, "changed on both sides; kept the local version, the executor's is in %s", side)
		} else {
			a.conflictf(p, "deleted locally and changed by the executor; the executor's version is in %s", side)
		}
	default:
		a.conflictf(p, "changed on both sides; kept the local version")
	}
}

// merge makes p, a file both sides changed, hold both changes where they
// touch different lines; else it keeps the local version and writes the
// executor's and the base's beside it. Binary or large files conflict
// whole, as before.
func (a *applier) merge(p string, r, c Entry) {
	read := func(root *os.Root) []byte {
		f, err := root.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, merge3.MaxBytes+1))
		if err != nil || !merge3.Text(b) {
			return nil
		}
		return b
	}
	base, local, theirs := read(a.base), read(a.root), read(a.src)
	if base == nil || local == nil || theirs == nil {
		a.conflict(p, true, r, true)
		return
	}
	merged, conflicts := merge3.Merge(base, local, theirs)
	if conflicts == nil {
		if err := a.writeFile(p, merged, c.Perm); err != nil {
			a.conflictf(p, "changed on both sides; could not write the merge (%v)", rootErr(err))
			return
		}
		a.rep.Modified = append(a.rep.Modified, p)
		a.rep.Merged = append(a.rep.Merged, p)
		return
	}
	where := make([]string, len(conflicts))
	for i, c := range conflicts {
		where[i] = c.String()
	}
	side, baseSide := p+a.suffix, p+a.suffix+".base"
	if err := a.copyFile(p, side, r.Perm); err != nil {
		a.conflictf(p, "changed on both sides (%s); kept the local version, could not save the executor's (%v)", strings.Join(where, ", "), rootErr(err))
		return
	}
	if err := a.writeFile(baseSide, base, c.Perm); err != nil {
		a.conflictf(p, "changed on both sides (%s); kept the local version, the executor's is in %s", strings.Join(where, ", "), side)
		return
	}
	a.conflictf(p, "changed on both sides (%s); kept the local version, the executor's is in %s and the lent one in %s (git merge-file %s %s %s)",
		strings.Join(where, ", "), side, baseSide, p, baseSide, side)
}

// writeFile writes b at p in the target through a temporary name and a
// rename.
func (a *applier) writeFile(p string, b []byte, perm fs.FileMode) error {
	tmp := path.Join(path.Dir(p), ".awcp-tmp-"+path.Base(p))
	err := a.root.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = a.root.Chmod(tmp, perm)
	}
	if err == nil {
		err = a.root.Rename(tmp, p)
	}
	if err != nil {
		a.root.Remove(tmp)
	}
	return err
}

// put writes the executor's entry r at p. inPlace means p already holds an
// entry of the same kind (a file is replaced atomically, a dir re-moded).
func (a *applier) put(p string, r Entry, inPlace bool) error {
	switch r.Kind {
	case KindDir:
		if !inPlace {
			if err := a.root.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
		return a.root.Chmod(p, r.Perm)
	case KindSymlink:
		return a.links.symlink(r.Hash, p)
	default:
		return a.copyFile(p, p, r.Perm)
	}
}

// copyFile copies the staged file src to dst in the target through a
// temporary name and a rename, so a reader never sees half a file.
func (a *applier) copyFile(src, dst string, perm fs.FileMode) error {
	in, err := a.src.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := path.Join(path.Dir(dst), ".awcp-tmp-"+path.Base(dst))
	out, err := a.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = a.root.Chmod(tmp, perm)
	}
	if err == nil {
		if info, serr := in.Stat(); serr == nil {
			err = a.root.Chtimes(tmp, info.ModTime(), info.ModTime())
		}
	}
	if err == nil {
		err = a.root.Rename(tmp, dst)
	}
	if err != nil {
		a.root.Remove(tmp)
	}
	return err
}

// rootErr drops the path from an *fs.PathError: messages name relative paths.
func rootErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func union(a, b Manifest) []string {
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, m := range []Manifest{a, b} {
		for p := range m {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sortPaths(out)
	return out
}

// sortPaths orders paths so that a directory comes right before its
// contents ("a", "a/b", "a.txt"), which plain string order does not do.
func sortPaths(ps []string) { slices.SortFunc(ps, ComparePaths) }

// ComparePaths orders slash-separated paths as a walk in name order meets
// them: by their names one by one ("a/b" before "a-c", which a plain
// string order puts first: '-' < '/').
func ComparePaths(a, b string) int {
	for {
		an, arest, amore := strings.Cut(a, "/")
		bn, brest, bmore := strings.Cut(b, "/")
		if c := strings.Compare(an, bn); c != 0 {
			return c
		}
		switch {
		case !amore && !bmore:
			return 0
		case !amore:
			return -1
		case !bmore:
			return 1
		}
		a, b = arest, brest
	}
}

// EntryAt is the entry at p in root as a manifest has it, read now (a
// file's content hashed); false if there is none, it is a special file,
// or p lies under a symlink.
func EntryAt(root *os.Root, p string) (Entry, bool) {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if fi, err := root.Lstat(d); err != nil || !fi.IsDir() {
			return Entry{}, false
		}
	}
	info, err := root.Lstat(p)
	if err != nil {
		return Entry{}, false
	}
	var target string
	switch mode := info.Mode(); {
	case mode.IsRegular(), mode.IsDir():
	case mode&fs.ModeSymlink != 0:
		if target, err = root.Readlink(p); err != nil {
			return Entry{}, false
		}
	default:
		return Entry{}, false
	}
	e := entryOf(info, target)
	if e.Kind == KindFile {
		f, err := root.Open(p)
		if err != nil {
			return Entry{}, false
		}
		defer f.Close()
		h := sha256.New()
		if e.Size, err = io.Copy(h, f); err != nil {
			return Entry{}, false
		}
		e.Hash = hex.EncodeToString(h.Sum(nil))
	}
	return e, true
}
