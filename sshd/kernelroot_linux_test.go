package sshd

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestBeneathConfines(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	os.MkdirAll(filepath.Join(dir, "a/b"), 0o755)
	os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("f"), 0o644)
	os.Symlink("b/f", filepath.Join(dir, "a/in"))
	os.Symlink("../../"+filepath.Base(outside)+"/secret", filepath.Join(dir, "a/out"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs"))
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	b := newKernelRoot(root)
	defer b.Close()
	if !b.ok {
		t.Fatal("openat2(RESOLVE_BENEATH) does not work on this kernel; the server fell back to os.Root")
	}
	tests := []struct {
		name   string
		escape bool
	}{
		{"a/b/f", false},
		{"a/in", false},
		{"a/b/../b/f", false},
		{"a/out", true},
		{"abs", true},
		{"../" + filepath.Base(outside) + "/secret", true},
		{"a/b/../../../x", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := b.OpenFile(tt.name, os.O_RDONLY, 0)
			if f != nil {
				f.Close()
			}
			if got := errors.Is(err, errEscape); got != tt.escape {
				t.Fatalf("open %s: %v, escape %v", tt.name, err, tt.escape)
			}
			_, err = b.Stat(tt.name)
			if got := errors.Is(err, errEscape); got != tt.escape {
				t.Fatalf("stat %s: %v", tt.name, err)
			}
		})
	}
	// Lstat sees the link itself, even one leading out.
	if fi, err := b.Lstat("a/out"); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("lstat of a link: %v %v", fi, err)
	}
}
