package treewalk

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/openflag"
)

// openByComponents, OpenBeneath's way where openat2 is refused, resolves
// as openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS does: a directory
// beneath opens; a symlink on the way or at the end, or ".." leading out,
// does not (the components refuse any "..", which the walk never makes).
func TestOpenByComponentsResolvesAsOpenat2(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a/b"), 0o755)
	os.Symlink("a", filepath.Join(root, "link"))
	os.Symlink("b", filepath.Join(root, "a/blink"))
	os.Symlink("/etc", filepath.Join(root, "a/out"))
	dir, err := unix.Open(root, openflag.Search|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dir)
	for name, ok := range map[string]bool{
		"a": true, "a/b": true, "a/b/": true, ".": true, "a/./b": true,
		"link": false, "link/b": false, "a/blink": false, "a/out": false, "a/out/..": false,
		"..": false, "a/../..": false, "missing": false,
	} {
		for how, open := range map[string]func(int, string, int) (int, error){"openat2": OpenBeneath, "components": openByComponents} {
			fd, err := open(dir, name, openflag.Search|unix.O_DIRECTORY)
			if err == nil {
				unix.Close(fd)
			}
			if (err == nil) != ok {
				t.Errorf("%s %q: %v, want opened %v", how, name, err, ok)
			}
		}
	}
}
