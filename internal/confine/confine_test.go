package confine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/openflag"
)

func TestLinkTarget(t *testing.T) {
	tests := []struct {
		name   string
		target string
		depth  int
		ok     bool
	}{
		{name: "sibling", target: "b", depth: 0, ok: true},
		{name: "itself", target: ".", depth: 0, ok: true},
		{name: "dot-slash", target: "./lib/x", depth: 0, ok: true},
		{name: "up to the root", target: "..", depth: 1, ok: true},
		{name: "up two", target: "../../lib/x", depth: 2, ok: true},
		{name: "dot then up", target: "./..", depth: 1, ok: true},
		{name: "above the root", target: "..", depth: 0},
		{name: "up three from two", target: "../../../x", depth: 2},
		{name: "climb after a name", target: "dot/..", depth: 3},
		{name: "climb after a name, deeper", target: "../a/../..", depth: 5},
		{name: "absolute", target: "/etc", depth: 3},
		{name: "empty", target: "", depth: 3},
		{name: "NUL", target: "a\x00b", depth: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := LinkTarget(tt.target, tt.depth)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrEscape)) {
				t.Fatalf("LinkTarget(%q, %d) = %v, want ok %v", tt.target, tt.depth, err, tt.ok)
			}
		})
	}
}

func openDir(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, openflag.Search|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// Depth counts real levels, and a directory outside the root is refused;
// CheckTree finds a link that a move up would make climb out.
func TestDepthAndCheckTree(t *testing.T) {
	top := t.TempDir()
	root := filepath.Join(top, "root")
	if err := os.MkdirAll(filepath.Join(root, "a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := RootOf(openDir(t, root))
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]int{".": 0, "a": 1, "a/b/c": 3} {
		if d, err := id.Depth(openDir(t, filepath.Join(root, rel))); err != nil || d != want {
			t.Errorf("Depth(%s) = %d, %v; want %d", rel, d, err, want)
		}
	}
	if _, err := id.Depth(openDir(t, top)); !errors.Is(err, ErrEscape) {
		t.Errorf("Depth of the root's parent: %v, want ErrEscape", err)
	}
	if err := os.Symlink("../../..", filepath.Join(root, "a/b/c/top")); err != nil {
		t.Fatal(err)
	}
	b := openDir(t, filepath.Join(root, "a/b"))
	if err := CheckTree(b, 2); err != nil {
		t.Errorf("a/b where it is: %v", err)
	}
	if err := CheckTree(b, 1); !errors.Is(err, ErrEscape) {
		t.Errorf("a/b moved up a level: %v, want ErrEscape", err)
	}
}
