package fs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Each failure on the mount is the errno the same call gives on the
// delegator's own disk: tools act on which one they get (stress-ng's
// filename stressor took EIO for a 256-byte name as a failing disk).
func TestErrnosAsOnALocalFileSystem(t *testing.T) {
	f := newMount(t, false)
	long := strings.Repeat("n", 256)
	setup := func(root string) {
		os.Mkdir(filepath.Join(root, "full"), 0o755)
		os.WriteFile(filepath.Join(root, "full", "x"), nil, 0o644)
		os.Mkdir(filepath.Join(root, "empty"), 0o755)
		os.WriteFile(filepath.Join(root, "file"), []byte("f"), 0o644)
	}
	setup(f.dir)
	local := t.TempDir()
	setup(local)
	for name, op := range map[string]func(root string) error{
		"create a 256-byte name": func(root string) error { return os.WriteFile(filepath.Join(root, long), nil, 0o644) },
		"mkdir a 256-byte name":  func(root string) error { return os.Mkdir(filepath.Join(root, long), 0o755) },
		"stat a 256-byte name":   func(root string) error { _, err := os.Lstat(filepath.Join(root, long)); return err },
		"mkdir what exists":      func(root string) error { return os.Mkdir(filepath.Join(root, "full"), 0o755) },
		"rmdir a full directory": func(root string) error { return syscall.Rmdir(filepath.Join(root, "full")) },
		"rmdir a file":           func(root string) error { return syscall.Rmdir(filepath.Join(root, "file")) },
		"a file as a directory":  func(root string) error { _, err := os.Lstat(filepath.Join(root, "file", "x")); return err },
		"rename a directory over a full one": func(root string) error {
			return os.Rename(filepath.Join(root, "empty"), filepath.Join(root, "full"))
		},
	} {
		want := errnoOf(op(local))
		got := errnoOf(op(f.mnt))
		if want == 0 {
			t.Fatalf("%s: no error on the local disk", name)
		}
		if got != want {
			t.Errorf("%s: %v on the mount, %v on a local disk", name, got, want)
		}
	}
}

func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return 0
}

// A file made through the mount shows, from its first stat, the times the
// delegator's disk holds, to the nanosecond; they do not change by
// themselves once the kernel asks again (go-fuse's FstatDeleted saw whole
// seconds, then the delegator's nanoseconds: make, git and rsync take
// that for a change).
func TestMadeFileTimesAreTheRealOnes(t *testing.T) {
	f := newMount(t, false)
	// The first file in a directory is made the plain way; those after it
	// go out behind (createBehind), with times the mount chose.
	if err := os.WriteFile(filepath.Join(f.mnt, "first"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{0, 5, 0} {
		name := filepath.Join(f.mnt, "made"+strconv.Itoa(size))
		if err := os.WriteFile(name, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		first, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		// close(2) does not wait: the create, with its times, lands a
		// round trip or so later (the file may show there a moment
		// before its times are set).
		landed(t, filepath.Join(f.dir, filepath.Base(name)), string(make([]byte, size)))
		disk := landedWith(t, filepath.Join(f.dir, filepath.Base(name)), func(fi os.FileInfo) bool { return fi.ModTime().Equal(first.ModTime()) })
		if disk == nil {
			t.Fatalf("%s is not on the delegator's side", name)
		}
		if !first.ModTime().Equal(disk.ModTime()) {
			t.Errorf("a %d-byte file first shows mtime %v, the delegator's disk %v", size, first.ModTime(), disk.ModTime())
		}
		fd, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
		later, err := fd.Stat() // asks the delegator: the file is unlinked
		fd.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !later.ModTime().Equal(first.ModTime()) {
			t.Errorf("a %d-byte file's mtime moved by itself: %v, then %v", size, first.ModTime(), later.ModTime())
		}
	}
}
