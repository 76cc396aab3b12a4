package fs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/awcp/awcp/internal/metrics"
)

// TestKernelKeepsListings: while the delegator's watch is exact, the
// kernel keeps a directory's listing across opens: listing it again, past
// the 1 s timeouts, asks the mount for no READDIR and the delegator for
// nothing, nor does a stat of it after (keepAttrs). Every change — each kind the mount can make, and each the
// owner makes on the delegator's side — shows in the next listing.
func TestKernelKeepsListings(t *testing.T) {
	slow(t)
	reg := metrics.New()
	f := newMountWith(t, false, func(o *Options) { o.Metrics = reg })
	waitExact(t, f)
	owner(t, f.dir, "mkdir d && : > d/a && : > d/b && mkdir d/sub")
	d := filepath.Join(f.mnt, "d")
	list := func() []string { t.Helper(); return names(t, d) }
	readdirs := func() float64 {
		return reg.Sum("awcp_fuse_operations_total", map[string]string{"op": "readdir"}) +
			reg.Sum("awcp_fuse_operations_total", map[string]string{"op": "readdirplus"})
	}
	// The watch tells the kernel twice, renotifyAfter apart.
	time.Sleep(2 * renotifyAfter)
	list()
	time.Sleep(1500 * time.Millisecond)
	before, served := readdirs(), f.asked(t, "")
	if got := list(); !slices.Equal(got, []string{"a", "b", "sub"}) {
		t.Fatalf("listed %v", got)
	}
	// Reading a directory moves its access time, which the kernel then
	// asks for: the mount answers from what it read.
	if _, err := os.Lstat(d); err != nil {
		t.Fatal(err)
	}
	if got := readdirs() - before; got != 0 {
		t.Errorf("listing again 1.5 s on took %v READDIRs, want none", got)
	}
	if got := f.asked(t, "") - served; got != 0 {
		t.Errorf("listing and stating again 1.5 s on asked the delegator %v times, want none", got)
	}
	owner(t, f.dir, "chmod 700 d")
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		if fi, err := os.Lstat(d); err == nil && fi.Mode().Perm() == 0o700 {
			break
		}
		if time.Since(start) > 50*time.Millisecond {
			t.Fatal("the owner's chmod of the directory not seen by a stat through the mount within 50 ms")
		}
	}

	in := func(n string) string { return filepath.Join(d, n) }
	ours := []struct {
		what   string
		change func() error
		want   []string
	}{
		{"create", func() error { return os.WriteFile(in("c"), []byte("c"), 0o644) }, []string{"a", "b", "c", "sub"}},
		{"mkdir", func() error { return os.Mkdir(in("e"), 0o755) }, []string{"a", "b", "c", "e", "sub"}},
		{"symlink", func() error { return os.Symlink("a", in("f")) }, []string{"a", "b", "c", "e", "f", "sub"}},
		{"link", func() error { return os.Link(in("a"), in("g")) }, []string{"a", "b", "c", "e", "f", "g", "sub"}},
		{"rename", func() error { return os.Rename(in("b"), in("h")) }, []string{"a", "c", "e", "f", "g", "h", "sub"}},
		{"rename out", func() error { return os.Rename(in("h"), in("sub/h")) }, []string{"a", "c", "e", "f", "g", "sub"}},
		{"rename in", func() error { return os.Rename(in("sub/h"), in("i")) }, []string{"a", "c", "e", "f", "g", "i", "sub"}},
		{"unlink", func() error { return os.Remove(in("a")) }, []string{"c", "e", "f", "g", "i", "sub"}},
		{"rmdir", func() error { return os.Remove(in("e")) }, []string{"c", "f", "g", "i", "sub"}},
	}
	for _, c := range ours {
		list() // kept by the kernel before each change
		if err := c.change(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if got := list(); !slices.Equal(got, c.want) {
			t.Errorf("after the mount's %s: listed %v, want %v", c.what, got, c.want)
		}
	}

	theirs := []struct {
		what, script string
		want         []string
	}{
		{"new file", ": > d/x", []string{"c", "f", "g", "i", "sub", "x"}},
		{"removal", "rm d/c", []string{"f", "g", "i", "sub", "x"}},
		{"rename", "mv d/i d/y", []string{"f", "g", "sub", "x", "y"}},
		{"rename away", "mv d/y y", []string{"f", "g", "sub", "x"}},
		{"new directory", "mkdir d/z", []string{"f", "g", "sub", "x", "z"}},
	}
	for _, c := range theirs {
		list()
		owner(t, f.dir, c.script)
		start := time.Now()
		for got := list(); !slices.Equal(got, c.want); got = list() {
			if time.Since(start) > 50*time.Millisecond {
				t.Fatalf("the owner's %s: listed %v after %s, want %v", c.what, got, time.Since(start), c.want)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
