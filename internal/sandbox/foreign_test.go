//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ForeignCode's bounds, tried as code that wants out of them would: a
// process allocating past --check-memory is refused the memory (one
// under it is not); a loopback port and an abstract unix socket of the
// host's, both listening, are not reached (its network is its own); and
// when its time is up, killing the helper ends what it left in the
// background too (its PID namespace). Run as root here (a user of its
// own); the unprivileged path is e2e.TestCheckRunsAsTheExecutorsAgent's.
func TestForeignCodeBounds(t *testing.T) {
	slow(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	p, err := ForeignCode(dir, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	abstract := fmt.Sprintf("@awcp-foreign-%d", os.Getpid())
	unix, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	for _, ln := range []net.Listener{tcp, unix} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	run := func(ctx context.Context, p *Policy, script string) string {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "PORT=" + strconv.Itoa(tcp.Addr().(*net.TCPAddr).Port), "ABSTRACT=" + abstract[1:]}
		cmd.WaitDelay = time.Second
		if p != nil {
			if err := p.Wrap(cmd); err != nil {
				t.Fatal(err)
			}
		}
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	script := `
try() { if "$@" >/dev/null 2>&1; then echo "ok $1"; else echo "refused $1"; fi; }
try python3 -c 'x = bytearray(16 << 20)'
try python3 -c 'x = bytearray(256 << 20)'
try nc -z -w 1 127.0.0.1 "$PORT"
try python3 -c 'import os, socket; s = socket.socket(socket.AF_UNIX); s.connect("\0" + os.environ["ABSTRACT"])'
`
	// Unconfined, each gets through: the refusals below are the sandbox's.
	if free := run(context.Background(), nil, script); strings.Count(free, "ok ") != 4 {
		t.Fatalf("unconfined, the probes should all succeed:\n%s", free)
	}
	got := run(context.Background(), p, script)
	for _, want := range []string{"ok python3\nrefused python3\n", "refused nc", "\nrefused python3\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("foreign code (16 MiB, 256 MiB under a 64 MiB bound; the host's port; the host's abstract socket): no %q in\n%s", want, got)
		}
	}
	if strings.Count(got, "refused") != 3 {
		t.Errorf("foreign code's bounds: %s", got)
	}

	// Its time is up: what it left in the background goes with it.
	mark := filepath.Join(dir, "sleeper-"+strconv.Itoa(os.Getpid()))
	if b, err := os.ReadFile("/bin/sleep"); err != nil || os.WriteFile(mark, b, 0o755) != nil {
		t.Fatalf("a sleep of its own: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	run(ctx, p, "setsid "+mark+" 300 >/dev/null 2>&1 & sleep 300")
	time.Sleep(200 * time.Millisecond)
	if left := marked(filepath.Base(mark)); len(left) > 0 {
		t.Errorf("foreign code outlived its time: %v", left)
	}
}
