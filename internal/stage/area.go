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
//	journal       what upper cannot say, a JSON line per change, replayed
//	              when the area is opened: the owner's paths the executor
//	              deleted, the directories that hide the owner's entries of
//	              the same name, and the owner's entry (or none) of every
//	              path the executor touched, at its first touch
//
// The owner's entries recorded at the first touch are the base of the
// three-way apply: a path the owner changed since is a conflict.
package stage

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/awcp/awcp/archive"
)

// MaxTouched bounds the paths an area records, touched and deleted (each
// about 315 bytes in memory, and a line of the journal: 79 MiB at the
// bound, BenchmarkAreaHeld): past it a change is refused, as the write
// limit refuses bytes. A variable for the tests.
var MaxTouched = 1 << 18

// ErrTooMany is a change refused past MaxTouched.
var ErrTooMany = errors.New("the staging area records too many changed paths")

// Area is one delegation's staging area. Its methods are safe for
// concurrent use; a server serializes the changes it makes with Lock.
type Area struct {
	dir string

	sync.RWMutex // held by the server across a change and its record

	mu  sync.Mutex // guards j and log
	j   journal
	log *os.File // the journal, appended to; nil for an area only read
}

// journal is what the journal's lines add up to.
type journal struct {
	// Deleted are paths of the owner's the executor removed or moved
	// away (whiteouts): hidden with what is beneath them.
	Deleted map[string]bool
	// Opaque are directories of upper that hide the owner's entries
	// beneath the same path (made where the owner's was deleted).
	Opaque map[string]bool
	// Base is the owner's entry of each path touched, at the first
	// touch; nil where the owner had none.
	Base map[string]*archive.Entry
}

// line is one line of the journal: one change.
type line struct {
	Op   string         `json:"op"` // touch, delete, made, shadow
	Path string         `json:"path"`
	Base *archive.Entry `json:"base,omitempty"` // touch
	Dir  bool           `json:"dir,omitempty"`  // made
}

func (j *journal) apply(l line) {
	switch l.Op {
	case "touch":
		if _, ok := j.Base[l.Path]; !ok {
			j.Base[l.Path] = l.Base
		}
	case "delete":
		j.Deleted[l.Path] = true
	case "made":
		if j.Deleted[l.Path] {
			delete(j.Deleted, l.Path)
			if l.Dir {
				j.Opaque[l.Path] = true
			}
		}
	case "shadow":
		j.Opaque[l.Path] = true
	}
}

// Open opens (or makes) the area in dir, to record changes in it.
func Open(dir string) (*Area, error) {
	a, err := Read(dir)
	if err != nil {
		return nil, err
	}
	a.log, err = os.OpenFile(a.journalFile(), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("staging area: %w", err)
	}
	// A line cut by a crash is ended, so that the next starts clean.
	if fi, err := a.log.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := a.log.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			a.log.Write([]byte{'\n'})
		}
	}
	return a, nil
}

// Read opens the area in dir to read it; it makes what is missing.
func Read(dir string) (*Area, error) {
	for _, d := range []string{dir, filepath.Join(dir, "upper"), filepath.Join(dir, "base")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("staging area: %w", err)
		}
	}
	a := &Area{dir: dir, j: journal{Deleted: map[string]bool{}, Opaque: map[string]bool{}, Base: map[string]*archive.Entry{}}}
	f, err := os.Open(a.journalFile())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return a, nil
	case err != nil:
		return nil, fmt.Errorf("staging area: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue // a line cut by a crash
		}
		a.j.apply(l)
	}
	return a, nil
}

// Close closes the journal.
func (a *Area) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.log == nil {
		return nil
	}
	err := a.log.Close()
	a.log = nil
	return err
}

// Dir is the area's directory.
func (a *Area) Dir() string { return a.dir }

// Upper is the directory of the executor's entries.
func (a *Area) Upper() string { return filepath.Join(a.dir, "upper") }

// BaseDir is the directory of the owner's versions of touched files.
func (a *Area) BaseDir() string { return filepath.Join(a.dir, "base") }

func (a *Area) journalFile() string { return filepath.Join(a.dir, "journal") }

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
	return a.recordLocked(line{Op: "touch", Path: p, Base: owner})
}

// Delete records that the owner's entry at p is deleted from the view.
func (a *Area) Delete(p string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.j.Deleted) >= MaxTouched {
		return ErrTooMany
	}
	if a.j.Deleted[p] {
		return nil
	}
	return a.recordLocked(line{Op: "delete", Path: p})
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
	return a.recordLocked(line{Op: "made", Path: p, Dir: dir})
}

// Shadow marks directory p of upper as hiding the owner's entries beneath
// it: its whole content is in upper (a directory moved in, say).
func (a *Area) Shadow(p string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.j.Opaque[p] {
		return nil
	}
	return a.recordLocked(line{Op: "shadow", Path: p})
}

// recordLocked appends l to the journal, then applies it: a change is
// on disk before it counts.
func (a *Area) recordLocked(l line) error {
	if a.log == nil {
		return errors.New("staging area: opened to be read only")
	}
	raw, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := a.log.Write(append(raw, '\n')); err != nil {
		return fmt.Errorf("staging area: %w", err)
	}
	a.j.apply(l)
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
