package fs

import (
	"errors"
	"os"
	"path/filepath"
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
