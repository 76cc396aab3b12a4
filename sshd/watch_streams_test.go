package sshd

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// scriptedSource gives the watcher event streams as each kind of source
// delivers them, written out here (macOS's and FreeBSD's kernels are not
// on this machine to record from): the watcher's own logic — coalescing,
// a directory's rename, an overflow, the session's own changes — is
// tested on each shape, whichever kernel made it.
type scriptedSource struct {
	batches chan []event
	stop    chan struct{}
	once    sync.Once
}

func newScriptedSource() *scriptedSource {
	return &scriptedSource{batches: make(chan []event), stop: make(chan struct{})}
}

// add names a directory by its device and inode, as the poll source does.
func (s *scriptedSource) add(fd int, _ *unix.Statfs_t) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	return strconv.FormatUint(uint64(st.Dev), 16) + ":" + strconv.FormatUint(uint64(st.Ino), 16), nil
}

func (s *scriptedSource) remove(string) {}
func (s *scriptedSource) attests() bool { return false }
func (s *scriptedSource) close() error  { s.once.Do(func() { close(s.stop) }); return nil }

func (s *scriptedSource) read() ([]event, error) {
	select {
	case b := <-s.batches:
		return b, nil
	case <-s.stop:
		return nil, io.EOF
	}
}

// keyOf is the key the source gives directory p.
func keyOf(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(uint64(st.Dev), 16) + ":" + strconv.FormatUint(uint64(st.Ino), 16)
}

// TestWatchLogicOnEachStreamShape: on the streams of each shape, the
// watcher names a path changed twice once, follows a renamed directory
// (what is made in it after is named under its new name), leaves out the
// session's own change and not another's beside it, and answers a lost
// stream with "drop everything".
func TestWatchLogicOnEachStreamShape(t *testing.T) {
	// Each shape: the same changes — a.txt written twice, directory sub
	// renamed to moved and a file made in it after, an overflow — as the
	// kind of source delivers them.
	shapes := map[string]func(root, sub string) [][]event{
		// inotify and fanotify: names, a rename as a pair in one read.
		"inotify": func(root, sub string) [][]event {
			return [][]event{
				{{dir: root, name: "a.txt", created: true}, {dir: root, name: "a.txt"}},
				{{dir: root, name: "a.txt"}},
				{{dir: root, name: "sub", isDir: true, movedFrom: true}, {dir: root, name: "moved", isDir: true, movedTo: true}},
				{{dir: sub, name: "after.txt", created: true}},
				{{overflow: true}},
			}
		},
		// The portable source, macOS's and FreeBSD's (kqueue's trigger,
		// then a look): a rename is a name gone and one come, each
		// directory looked at on its own.
		"kqueue": func(root, sub string) [][]event {
			return [][]event{
				{{dir: root, name: "a.txt", created: true}},
				{{dir: root, name: "a.txt"}},
				{{dir: root, name: "moved", isDir: true, movedTo: true}, {dir: root, name: "sub", isDir: true, movedFrom: true}},
				{{dir: sub, name: "after.txt", created: true}},
				{{overflow: true}},
			}
		},
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			src := newScriptedSource()
			w := watchWith(src, maxWatchDirs, root, dir, func(string) bool { return false })
			if w == nil {
				t.Fatal("not watched")
			}
			defer w.close()
			stop := make(chan struct{})
			defer close(stop)
			next := func() []string {
				t.Helper()
				paths, overflow, _, err := w.next(stop)
				if err != nil {
					t.Fatal(err)
				}
				if overflow {
					return []string{"<overflow>"}
				}
				slices.Sort(paths)
				return paths
			}
			if got := next(); !slices.Equal(got, []string{"<overflow>"}) {
				t.Fatalf("first answer %q, want an overflow", got)
			}
			rootKey, subKey := keyOf(t, dir), keyOf(t, filepath.Join(dir, "sub"))
			batches := shape(rootKey, subKey)

			// Coalescing: a path changed twice, before the client asked,
			// is named once.
			src.batches <- batches[0]
			src.batches <- batches[1]
			time.Sleep(20 * time.Millisecond)
			if got := next(); !slices.Equal(got, []string{"a.txt"}) {
				t.Fatalf("a.txt changed twice: %q", got)
			}

			// A directory renamed keeps its watch under its new name.
			os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "moved"))
			src.batches <- batches[2]
			if got := next(); !slices.Equal(got, []string{"moved", "sub"}) {
				t.Fatalf("sub renamed to moved: %q", got)
			}
			src.batches <- batches[3]
			if got := next(); !slices.Equal(got, []string{"moved/after.txt"}) {
				t.Fatalf("a file made in the renamed directory: %q, want it under its new name", got)
			}

			// The session's own change, within its grace, is not named;
			// another's beside it is.
			w.begin([]string{"mine.txt"})
			w.end([]string{"mine.txt"})
			src.batches <- []event{{dir: rootKey, name: "mine.txt", created: true}, {dir: rootKey, name: "theirs.txt", created: true}}
			if got := next(); !slices.Equal(got, []string{"theirs.txt"}) {
				t.Fatalf("the session's own change and another's: %q", got)
			}

			// An overflow: drop everything.
			src.batches <- batches[4]
			if got := next(); !slices.Equal(got, []string{"<overflow>"}) {
				t.Fatalf("after the source lost events: %q", got)
			}
		})
	}
}
