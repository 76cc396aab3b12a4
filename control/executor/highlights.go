package executor

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/treewalk"
	"github.com/awcp/awcp/lease"
)

// maxHighlights and maxHighlightBytes bound the files a done event
// names: a list is for a person (or a model) to read, and a task that made
// a hundred thousand files (a dependency install), or ten thousand of long
// names, would otherwise fill the event past its bound
// (control.MaxEventBytes). The rest are left out.
const (
	maxHighlights     = 10000
	maxHighlightBytes = 4 << 20
)

// capped is paths cut to maxHighlights names and maxHighlightBytes.
func capped(paths []string) []string {
	size := 0
	for i, p := range paths {
		if size += len(p); i == maxHighlights || size > maxHighlightBytes {
			return paths[:i]
		}
	}
	return paths
}

// changeLogger is a transport whose mounts log what was changed through
// them (SSHFSExecutor): a task's highlights are then read from the log
// instead of from a walk of the whole tree before and after the task.
type changeLogger interface {
	// Changed is delegation id's log (awcpfs.Mount.Changed); ok is false
	// where no mount of it runs in this process.
	Changed(id string) (paths []string, complete, ok bool)
}

// changeLog is a's transport as a changeLogger; nil if it logs nothing.
func (e *Executor) changeLog(a *lease.Assignment) changeLogger {
	l, _ := e.transport(a.Transport).(changeLogger)
	return l
}

// highlightScan is how a task's work dir is scanned for its highlights,
// before and after the task. On a live mount, by size, mode and mtime:
// hashing would read every file twice more over the network, and a task's
// writes always move the mtime. An archive's copy is on this machine's
// disk: there by content, so that a file rewritten the same (sed -i that
// matched nothing, a formatter with nothing to do) is not reported as
// changed — as the delegator's apply does not report it either.
func highlightScan(transport string) func(dir string) (archive.Manifest, error) {
	if transport == control.TransportArchive {
		return archive.Scan
	}
	return archive.ScanMeta
}

// highlightsBefore is what a's highlights are told against: a scan of its
// work dir, or nothing where its mount logs what was changed through it.
func (e *Executor) highlightsBefore(a *lease.Assignment) (archive.Manifest, error) {
	if e.changeLog(a) != nil {
		return nil, nil
	}
	return highlightScan(a.Transport)(agentDir(a))
}

// highlights is what a's task created or changed (capped), and the scan
// after the task it was told from (nil where it was the mount's log).
func (e *Executor) highlights(a *lease.Assignment, before archive.Manifest) ([]string, archive.Manifest, error) {
	l := e.changeLog(a)
	if l == nil {
		after, err := highlightScan(a.Transport)(agentDir(a))
		if err != nil {
			return nil, nil, err
		}
		return capped(archive.Changed(before, after)), after, nil
	}
	logged, complete, ok := l.Changed(a.ID)
	if !ok {
		// No mount of a's here (it was a previous run's): nothing to
		// tell the agent's work by, nor a work dir to read, and a scan
		// with nothing to compare would name every file.
		e.log.Warn("no change log of the task's mount; its result names no highlights", "delegation", a.ID)
		return nil, nil, nil
	}
	if !complete {
		e.log.Info("the task changed more files than its mount logs; its highlights name some of them", "delegation", a.ID)
	}
	paths, err := loggedHighlights(agentDir(a), logged)
	return capped(paths), nil, err
}

// loggedHighlights turns a mount's change log into a task's highlights:
// the logged paths that are still there and not directories, and every
// file beneath a logged directory (one renamed into place: its files are
// all new at their paths, as a scan before and after would have found).
// dir is the mount's root. Each path is resolved by the kernel beneath it
// following no symlink: the agent may have put one where a logged
// directory was, pointing out of the workspace.
func loggedHighlights(dir string, logged []string) ([]string, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(root)
	slices.SortFunc(logged, archive.ComparePaths)
	var (
		mu   sync.Mutex // guards out, size and seen: a directory's walk reads side by side
		out  []string
		size int
	)
	seen := map[string]bool{}
	add := func(p string) bool {
		mu.Lock()
		defer mu.Unlock()
		if len(out) >= maxHighlights || size+len(p) > maxHighlightBytes {
			return false
		}
		if !seen[p] {
			seen[p] = true
			out, size = append(out, p), size+len(p)
		}
		return true
	}
	kinds := parentListings{root: root, dir: dir}
	for _, p := range logged {
		isDir, ok := kinds.kind(p)
		switch {
		case !ok:
			continue // gone, or no longer reachable without a symlink
		case !isDir:
			if !add(p) {
				return sorted(out), nil
			}
			continue
		}
		err := treewalk.WalkAt(root, dir, p, func(rel string, _ int, ents []os.DirEntry) ([]string, error) {
			var descend []string
			for _, e := range ents {
				name := path.Join(rel, e.Name())
				if e.IsDir() {
					descend = append(descend, name)
				} else if !add(name) {
					return nil, treewalk.SkipAll
				}
			}
			return descend, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return sorted(out), nil
}

func sorted(paths []string) []string {
	slices.SortFunc(paths, archive.ComparePaths)
	return paths
}

// parentListings tells what kind each logged path is from its parent
// directory's listing, read once for all the paths logged in it: on a live
// mount across a link, a stat of each file the mount made (whose
// attributes the kernel no longer keeps) was a round trip each — 23 s at
// 20 ms for a benchmark's thousand files — where a listing the mount keeps
// costs none.
type parentListings struct {
	root int                        // the mount's root, O_PATH
	dir  string                     // its path
	dirs map[string]map[string]bool // by parent: each entry, and whether it is a directory; nil: not reachable
}

// maxListingsKept bounds the listings kept at once: the logged paths come
// sorted, a directory's names mostly together.
const maxListingsKept = 256

// kind reports whether p (relative to root) is a directory; ok is false
// where it is not there, or is reached only through a symlink.
func (l *parentListings) kind(p string) (isDir, ok bool) {
	parent, base := filepath.Split(p)
	ents, listed := l.dirs[parent]
	if !listed {
		ents = l.list(parent)
	}
	isDir, ok = ents[base]
	return isDir, ok
}

// list reads parent's entries, beneath root without a symlink (a walk of
// that one directory), and keeps them.
func (l *parentListings) list(parent string) map[string]bool {
	if l.dirs == nil || len(l.dirs) >= maxListingsKept {
		l.dirs = map[string]map[string]bool{} // read again if wanted again
	}
	kinds := map[string]bool{}
	err := treewalk.WalkAt(l.root, l.dir, path.Join(".", parent), func(_ string, _ int, ents []os.DirEntry) ([]string, error) {
		for _, e := range ents {
			kinds[e.Name()] = e.IsDir()
		}
		return nil, nil
	})
	if err != nil {
		kinds = nil
	}
	l.dirs[parent] = kinds
	return kinds
}
