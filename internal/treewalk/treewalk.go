// Package treewalk reads a directory tree with several goroutines at once.
//
// A walk one directory at a time waits for each directory's read in turn:
// on a cold disk, or through a network file system, that wait is the walk.
// Several directories read side by side keep the disk's queue (or the
// connection) full. On a cold tree of 24,000 directories here, eight
// readers took half the time of one (1.36 s against 2.57 s).
//
// Every directory is opened by the kernel beneath the root
// (openat2 RESOLVE_BENEATH) following no symlink on the way: a directory
// swapped for a symlink after it was listed is never entered. Linux only.
package treewalk

import (
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/openflag"
)

// Visit is called for each page of a directory's entries (up to PageSize,
// in no particular order), the pages of one directory in turn, and once
// for a directory with none: rel is its path relative to the root ("."
// for the root), dirfd its descriptor (valid during the call, for *at
// system calls on its entries). It returns the subdirectories to read
// next (paths relative to the root). It is called from several goroutines
// at once. Returning SkipAll ends the walk without an error.
type Visit func(rel string, dirfd int, ents []os.DirEntry) (descend []string, err error)

// SkipAll, returned by a Visit, ends the walk; Walk then returns nil.
var SkipAll = errors.New("treewalk: skip everything")

// Workers is how many directories Walk reads at once.
const Workers = 8

// PageSize is the most entries of one directory held at once: a directory
// of millions of names costs a page's memory, not theirs.
const PageSize = 1024

// Walk reads the tree at root, calling visit for each directory from
// Workers goroutines, and returns the first error (from visit, or
// reading a directory). A directory gone since it was listed is left out.
// Walk returns once every goroutine has.
func Walk(root string, visit Visit) error {
	rootfd, err := unix.Open(root, openflag.Search|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootfd)
	return WalkAt(rootfd, root, ".", visit)
}

// WalkAt is Walk of the tree beneath the directory open at rootfd (named
// root in errors), from its directory start (relative to it) down.
func WalkAt(rootfd int, root, start string, visit Visit) error {
	w := &walker{root: root, rootfd: rootfd, visit: visit, queue: []string{path.Clean(start)}}
	w.wake = sync.NewCond(&w.mu)
	var wg sync.WaitGroup
	for range Workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.work() }()
	}
	wg.Wait()
	if errors.Is(w.err, SkipAll) {
		return nil
	}
	return w.err
}

type walker struct {
	root   string
	rootfd int
	visit  Visit

	mu      sync.Mutex
	wake    *sync.Cond // a directory queued, or the walk over
	queue   []string   // directories to read, relative to root
	reading int        // directories being read
	err     error      // the first error; the walk is over once set
	over    bool
}

func (w *walker) work() {
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && w.reading > 0 && !w.over {
			w.wake.Wait()
		}
		if w.over || len(w.queue) == 0 {
			w.over = true
			w.wake.Broadcast()
			w.mu.Unlock()
			return
		}
		dir := w.queue[len(w.queue)-1]
		w.queue = w.queue[:len(w.queue)-1]
		w.reading++
		w.mu.Unlock()

		descend, err := w.read(dir) // no lock held across the directory's reads

		w.mu.Lock()
		w.reading--
		w.queue = append(w.queue, descend...)
		if err != nil && w.err == nil {
			w.err, w.over = err, true
		}
		w.wake.Broadcast()
		w.mu.Unlock()
	}
}

// read opens dir beneath the root and hands its entries to visit.
func (w *walker) read(dir string) ([]string, error) {
	fd, err := OpenBeneath(w.rootfd, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	full := filepath.Join(w.root, dir)
	switch {
	case err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP:
		return nil, nil // gone, or swapped for something else, since it was listed
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	f := os.NewFile(uintptr(fd), full)
	defer f.Close()
	rel := path.Clean(dir)
	var descend []string
	for first := true; ; first = false {
		ents, err := f.ReadDir(PageSize)
		if err != nil && !errors.Is(err, io.EOF) {
			return descend, &os.PathError{Op: "readdir", Path: full, Err: err}
		}
		if len(ents) > 0 || first {
			more, verr := w.visit(rel, fd, ents)
			descend = append(descend, more...)
			if verr != nil {
				return descend, verr
			}
		}
		if len(ents) == 0 {
			return descend, nil
		}
	}
}
