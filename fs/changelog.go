package fs

import (
	"strings"
	"sync"
	"syscall"
)

// changeLog is what was changed through the mount: the paths of the files
// its users created, wrote, truncated, chmodded or touched, and the paths
// they renamed, linked or symlinked to, each once. A delegation's executor
// reports its agent's work from it (the highlights of its done event)
// instead of walking the whole tree through the mount before the task and
// again after it, which on a large tree kept the agent from starting for
// seconds. Paths renamed or removed since stay in it: its reader keeps
// those that still exist, and reads what a renamed directory holds.
// What the owner changed on the delegator's side is not in it: that is not
// the agent's work.
type changeLog struct {
	mu    sync.Mutex
	paths map[string]struct{}
	bytes int  // the names' length, all told
	full  bool // a path was left out for want of room
}

// maxLogged and maxLoggedBytes bound the log's memory: a path may be
// 4 KiB long, and ten thousand of those would be 40 MiB a mount. A task
// that changes more files than that (an npm install in the workspace) is
// reported by the first ones.
const (
	maxLogged      = 10000
	maxLoggedBytes = 4 << 20
)

// add logs remote path p (rooted at the mount's root).
func (l *changeLog) add(p string) {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.paths[p]; ok {
		return
	}
	if len(l.paths) >= maxLogged || l.bytes+len(p) > maxLoggedBytes {
		l.full = true
		return
	}
	if l.paths == nil {
		l.paths = map[string]struct{}{}
	}
	l.paths[p] = struct{}{}
	l.bytes += len(p)
}

// Changed returns the paths created or changed through the mount, relative
// to its root and slash-separated, in no order; complete is false where
// some were left out for want of room. Some may be gone by now, or be
// directories renamed into place (whose files are then all new at their
// paths).
func (m *Mount) Changed() (paths []string, complete bool) {
	l := &m.fsys.changed
	l.mu.Lock()
	defer l.mu.Unlock()
	paths = make([]string, 0, len(l.paths))
	for p := range l.paths {
		paths = append(paths, p)
	}
	return paths, !l.full
}

// logChange logs n's path, unless n was logged under its present name
// already (the check a write makes is one atomic load), or n is a
// directory: a directory touched or chmodded is no change of the files in
// it, which its reader would take it for.
func (n *node) logChange() {
	if n.logged.Load() || n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return
	}
	n.logged.Store(true)
	n.fsys.changed.add(n.rpath())
}

// loggedAs logs p as n's new name (n may be nil: a name the kernel was
// not given a node for).
func (n *node) loggedAs(fsys *filesystem, p string) {
	fsys.changed.add(p)
	if n != nil {
		n.logged.Store(true)
	}
}
