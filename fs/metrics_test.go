package fs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/internal/metrics"
)

// The mount counts the requests the kernel sends it, the errors it answers
// with, and its outages: a lookup of a missing name is an ENOENT lookup, a
// restart of the delegator's server one outage and one reconnection.
func TestMountMetrics(t *testing.T) {
	reg := metrics.New()
	f := newMountWith(t, false, func(o *Options) { o.Metrics = reg })

	if err := os.WriteFile(filepath.Join(f.mnt, "a"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(filepath.Join(f.mnt, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.mnt, "missing")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of a missing name: %v", err)
	}
	for _, op := range []string{"create", "write", "flush", "lookup"} {
		if n := reg.Sum("awcp_fuse_operations_total", map[string]string{"op": op}); n < 1 {
			t.Errorf("no %s counted", op)
		}
	}
	if n := reg.Sum("awcp_fuse_errors_total", map[string]string{"op": "lookup", "errno": "ENOENT"}); n < 1 {
		t.Errorf("the missing name's lookup was not counted as ENOENT")
	}
	if n := reg.Sum("awcp_fuse_errors_total", map[string]string{"op": "write"}); n != 0 {
		t.Errorf("%v write errors counted", n)
	}

	f.restartServer(t, 300*time.Millisecond)
	if err := os.WriteFile(filepath.Join(f.mnt, "after"), []byte("x"), 0o644); err != nil {
		t.Fatalf("write after the outage: %v", err)
	}
	if n := reg.Sum("awcp_mount_outages_total", nil); n != 1 {
		t.Errorf("outages = %v, want 1", n)
	}
	if n := reg.Sum("awcp_mount_reconnects_total", nil); n != 1 {
		t.Errorf("reconnects = %v, want 1", n)
	}
	if n := reg.Sum("awcp_mount_outage_seconds", nil); n != 1 {
		t.Errorf("outage durations observed = %v, want 1", n)
	}
}
