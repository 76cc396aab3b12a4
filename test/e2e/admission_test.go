package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A tree past the spec's 10,000 files: the archive refuses it by default,
// naming the flags that raise the limit; the live mount, which copies
// nothing, lends it by default; --max-files lets the archive take it; and
// auto, facing an executor that cannot mount, does not fall back to an
// archive of it.
func TestAdmissionFitsTheTransport(t *testing.T) {
	slow(t)
	parallel(t)
	ws := filepath.Join(t.TempDir(), "big")
	for d := range 120 {
		dir := filepath.Join(ws, fmt.Sprintf("pkg%03d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.go", f)), []byte("package p\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	x := startExecutor(t, `find . -name '*.go' | wc -l | tr -d ' ' > count.txt`)
	archiveOnly := startExecutor(t, `true`, "--transports", "archive")
	c := newCtl(t)

	r := c.run("export", ws, "--peer", x.url, "--prompt", "count", "--transport", "archive")
	if r.code != 1 || !strings.Contains(r.stderr, "WORKSPACE_TOO_LARGE") || !strings.Contains(r.stderr, "--max-files") {
		t.Fatalf("an archive of 12,000 files: exit %d\n%s", r.code, r.stderr)
	}
	r = c.run("export", ws, "--peer", x.url, "--prompt", "count", "--ssh-listen", "127.0.0.1:0")
	if b, _ := os.ReadFile(filepath.Join(ws, "count.txt")); r.code != 0 || string(b) != "12000\n" {
		t.Fatalf("a live mount of 12,000 files: exit %d, count %q\n%s", r.code, b, r.stderr)
	}
	os.Remove(filepath.Join(ws, "count.txt"))
	r = c.run("export", ws, "--peer", x.url, "--prompt", "count", "--transport", "archive", "--max-files", "20000")
	if b, _ := os.ReadFile(filepath.Join(ws, "count.txt")); r.code != 0 || string(b) != "12000\n" {
		t.Fatalf("an archive of 12,000 files with --max-files 20000: exit %d, count %q\n%s", r.code, b, r.stderr)
	}
	os.Remove(filepath.Join(ws, "count.txt"))
	r = c.run("export", ws, "--peer", archiveOnly.url, "--prompt", "count", "--ssh-listen", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "the executor cannot mount") || !strings.Contains(r.stderr, "WORKSPACE_TOO_LARGE") {
		t.Fatalf("auto falling back to an archive of 12,000 files: exit %d\n%s", r.code, r.stderr)
	}

	// The daemon's own limits are the defaults of what it is handed: a
	// background export of 12,000 files to a daemon that takes 1,000
	// files at most is refused, one that says its own limit is taken.
	d := newCtl(t)
	d.serve("--max-files", "1000", "--ssh-listen", "127.0.0.1:0")
	r = d.run("export", ws, "--peer", x.url, "--prompt", "count", "--background")
	if r.code != 1 || !strings.Contains(r.stderr, "WORKSPACE_TOO_LARGE") || !strings.Contains(r.stderr, "1000") {
		t.Fatalf("a live mount of 12,000 files to a daemon with --max-files 1000: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = d.run("export", ws, "--peer", x.url, "--prompt", "count", "--background", "--max-files", "20000")
	if r.code != 0 {
		t.Fatalf("the same, with the export's own --max-files 20000: exit %d\n%s", r.code, r.stderr)
	}
	d.waitState(strings.TrimSpace(r.stdout), "completed")
}
