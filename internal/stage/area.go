// Package stage is the on-disk form of a live mount's staging area: where a
// delegation in staged mode puts the executor's changes instead of the
// owner's directory. The SSH server (sshd) writes it while the agent works;
// the review (control/delegator/review) reads it to diff, apply or discard.
//
// An area is a directory holding:
//
//	upper/        the entries the executor created or changed, at their
//	              paths, with every directory above them
//	base/         the owner's version of each file the executor changed or
//	              deleted, as it was when first touched (for the diff)
//	journal.json  what upper cannot say: the owner's paths the executor
//	              deleted, the directories that hide the owner's entries of
//	              the same name, and the owner's entry (or none) of every
//	              path the executor touched, at its first touch
//
// The owner's entries recorded at the first touch are the base of the
// three-way apply: a path the owner changed since is a conflict.
package stage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/awcp/awcp/archive"
)

// MaxTouched bounds the paths an area records (each a few hundred bytes in
// memory and in the journal): past it a change is refused, as the write
// limit refuses bytes.
const MaxTouched = 1 << 18

// ErrTooMany is a change refused past MaxTouched.
var ErrTooMany = errors.New("the staging area records too many changed paths")

// Area is one delegation's staging area. Its methods are safe for
// concurrent use; a server serializes the changes it makes with Lock.
type Area struct {
	dir string

	sync.RWMutex // held by the server across a change and its record

	mu sync.Mutex // guards j
	j  journal
}

// journal is journal.json.
type journal struct {
	// Deleted are paths of the owner's the executor removed or moved
	// away (whiteouts): hidden with what is beneath them.
	Deleted map[string]bool `json:"deleted,omitempty"`
	// Opaque are directories of upper that hide the owner's entries
	// beneath the same path (made where the owner's was deleted).
	Opaque map[string]bool `json:"opaque,omitempty"`
	// Base is the owner's entry of each path touched, at the first
	// touch; nil where the owner had none.
	Base map[string]*archive.Entry `json:"base,omitempty"`
}

// Open opens (or makes) the area in dir.
func Open(dir string) (*Area, error) {
	for _, d := range []string{dir, filepath.Join(dir, "upper"), filepath.Join(dir, "base")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("staging area: %w", err)
		}
	}
	a := &Area{dir: dir, j: journal{Deleted: map[string]bool{}, Opaque: map[string]bool{}, Base: map[string]*archive.Entry{}}}
	raw, err := os.ReadFile(a.journalFile())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return a, nil
	case err != nil:
		return nil, fmt.Errorf("staging area: %w", err)
	}
	if err := json.Unmarshal(raw, &a.j); err != nil {
		return nil, fmt.Errorf("staging area %s: its journal is unreadable: %w", dir, err)
	}
	for _, m := range []*map[string]bool{&a.j.Deleted, &a.j.Opaque} {
		if *m == nil {
			*m = map[string]bool{}
		}
	}
	if a.j.Base == nil {
		a.j.Base = map[string]*archive.Entry{}
	}
	return a, nil
}

// Dir is the area's directory.
func (a *Area) Dir() string { return a.dir }

// Upper is the directory of the executor's entries.
func (a *Area) Upper() string { return filepath.Join(a.dir, "upper") }

// BaseDir is the directory of the owner's versions of touched files.
func (a *Area) BaseDir() string { return filepath.Join(a.dir, "base") }

func (a *Area) journalFile() string { return filepath.Join(a.dir, "journal.json") }

// OwnerHidden reports whether the owner's entry at p is out of the
// executor's view: p or a directory above it was deleted, or a directory
// above it was made anew over the owner's.
func (a *Area) OwnerHidden(p string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.j.Deleted) == 0 && len(a.j.Opaque) == 0 {
		return false
	}
	for q := p; ; {
		if a.j.Deleted[q] || (q != p && a.j.Opaque[q]) {
			return true
		}
		i := strings.LastIndexByte(q, '/')
		if i < 0 {
			return false
		}
		q = q[:i]
	}
}

// Opaque reports whether upper's directory p hides the owner's entries
// beneath it.
func (a *Area) Opaque(p string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.j.Opaque[p]
}

// Touched reports whether p's base is recorded.
func (a *Area) Touched(p string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.j.Base[p]
	return ok
}

// Touch records the owner's entry at p (nil: none) as p's base, unless p
// was touched before.
func (a *Area) Touch(p string, owner *archive.Entry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.j.Base[p]; ok {
		return nil
	}
	if len(a.j.Base) >= MaxTouched {
		return ErrTooMany
	}
	a.j.Base[p] = owner
	return a.saveLocked()
}

// Delete records that the owner's entry at p is deleted from the view.
func (a *Area) Delete(p string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.j.Deleted) >= MaxTouched {
		return ErrTooMany
	}
	a.j.Deleted[p] = true
	return a.saveLocked()
}

// Made records that the executor made an entry at p: a deletion of the
// owner's entry there ends, and a directory made there hides the owner's
// entries beneath (opaque) if the owner's was deleted.
func (a *Area) Made(p string, dir bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.j.Deleted[p] {
		return nil
	}
	delete(a.j.Deleted, p)
	if dir {
		a.j.Opaque[p] = true
	}
	return a.saveLocked()
}

// Shadow marks directory p of upper as hiding the owner's entries beneath
// it: its whole content is in upper (a directory moved in, say).
func (a *Area) Shadow(p string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.j.Opaque[p] {
		return nil
	}
	a.j.Opaque[p] = true
	return a.saveLocked()
}

// saveLocked writes the journal through a temporary file and a rename.
func (a *Area) saveLocked() error {
	raw, err := json.Marshal(a.j)
	if err != nil {
		return err
	}
	tmp := a.journalFile() + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("staging area: %w", err)
	}
	if err := os.Rename(tmp, a.journalFile()); err != nil {
		return fmt.Errorf("staging area: %w", err)
	}
	return nil
}

// Changes is every path the executor touched with its base (the owner's
// entry at the first touch; nil: none), parents before children.
func (a *Area) Changes() ([]string, map[string]*archive.Entry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	base := make(map[string]*archive.Entry, len(a.j.Base))
	paths := make([]string, 0, len(a.j.Base))
	for p, e := range a.j.Base {
		base[p] = e
		paths = append(paths, p)
	}
	SortPaths(paths)
	return paths, base
}

// SortPaths orders paths so that a directory comes right before what it
// holds ("a", "a/b", "a.txt").
func SortPaths(ps []string) {
	sort.Slice(ps, func(i, j int) bool {
		return strings.ReplaceAll(ps[i], "/", "\x00") < strings.ReplaceAll(ps[j], "/", "\x00")
	})
}

// Beneath reports whether p is dir or beneath it.
func Beneath(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "."
}

// Clean is p as the area records it: slash-separated, relative, cleaned.
func Clean(p string) string {
	p = path.Clean("/" + p)[1:]
	if p == "" {
		return "."
	}
	return p
}
