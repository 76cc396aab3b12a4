package fs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/sshd"
)

// TestAccessAsksNothing: access(2) on files the mount has reported is
// answered from their mode, with no request to the delegator — git asks
// it of its config and excludes at every command — and answers as the
// mode says.
func TestAccessAsksNothing(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o755)
	f := newMountOf(t, sshd.Export{Dir: dir}, nil)
	waitExact(t, f)
	for _, name := range []string{"config", "tool"} {
		if _, err := os.Stat(filepath.Join(f.mnt, name)); err != nil {
			t.Fatal(err)
		}
	}
	asked := func() float64 { return f.asked(t, "") }
	before := asked()
	for range 10 {
		if err := unix.Access(filepath.Join(f.mnt, "config"), unix.R_OK|unix.W_OK); err != nil {
			t.Fatalf("access(config, R_OK|W_OK): %v", err)
		}
		if err := unix.Access(filepath.Join(f.mnt, "tool"), unix.X_OK); err != nil {
			t.Fatalf("access(tool, X_OK): %v", err)
		}
	}
	if err := unix.Access(filepath.Join(f.mnt, "config"), unix.X_OK); err == nil {
		t.Error("access(config, X_OK) allowed a file of mode 0644")
	}
	if n := asked() - before; n != 0 {
		t.Errorf("21 access calls asked the delegator %v times", n)
	}
}

func TestAllowedAsTheModeSays(t *testing.T) {
	const r, w, x = 4, 2, 1
	for _, c := range []struct {
		uid, gid, fuid, fgid, mode, mask uint32
		want                             bool
	}{
		{1000, 1000, 1000, 1000, 0o600, r | w, true},
		{1000, 1000, 1000, 1000, 0o400, w, false},
		{1001, 1000, 1000, 1000, 0o640, r, true},
		{1001, 1000, 1000, 1000, 0o640, w, false},
		{1001, 1001, 1000, 1000, 0o644, r, true},
		{1001, 1001, 1000, 1000, 0o600, r, false},
		{1001, 1001, 1000, 1000, 0o640, r, true}, // a supplementary group may allow it
		{0, 0, 1000, 1000, 0o600, r | w, true},
		{0, 0, 1000, 1000, 0o644, x, false},
		{0, 0, 1000, 1000, 0o744, x, true},
	} {
		if got := allowed(c.uid, c.gid, c.fuid, c.fgid, 0o100000|c.mode, c.mask); got != c.want {
			t.Errorf("uid %d gid %d on %d:%d mode %o, mask %o: %v, want %v", c.uid, c.gid, c.fuid, c.fgid, c.mode, c.mask, got, c.want)
		}
	}
}
