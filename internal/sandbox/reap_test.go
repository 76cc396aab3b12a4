//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// What a confined command leaves running ends with it, without a root of
// its own too (no PID namespace: Landlock alone, as a non-root executor
// confines): a child that left the process group with setsid, a
// double-forked daemon, as codex-acp's native binary outlives its node
// wrapper. Unconfined, the same processes outlive the command: the end is
// the sandbox's.
func TestNothingOutlivesTheCommand(t *testing.T) {
	slow(t)
	if ABI() == 0 {
		t.Fatal("this kernel has no Landlock: the sandbox cannot be tested here")
	}
	// A sleep of its own name, to be told apart from every other.
	mark := fmt.Sprintf("awcp-reap-%d", os.Getpid())
	bin := t.TempDir()
	sleeper := filepath.Join(bin, mark)
	if b, err := os.ReadFile("/bin/sleep"); err != nil || os.WriteFile(sleeper, b, 0o755) != nil {
		t.Fatalf("a sleep of its own: %v", err)
	}
	script := `setsid ` + sleeper + ` 300 >/dev/null 2>&1 &
(setsid sh -c '` + sleeper + ` 301' >/dev/null 2>&1 &) &
sleep 0.3; exit 0`
	run := func(p *Policy) []string {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = os.Environ()
		if p != nil {
			if err := p.Wrap(cmd); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
		return marked(mark)
	}
	if left := run(&Policy{RO: append(slices.Clone(System), bin), Devices: Devices}); len(left) > 0 {
		t.Errorf("confined, these outlived the command: %v", left)
	}
	left := run(nil)
	defer func() {
		for _, pid := range left {
			exec.Command("kill", "-9", pid).Run()
		}
	}()
	if len(left) != 2 {
		t.Errorf("unconfined, the command should leave its two sleepers: %v", left)
	}
}

// marked are the pids of processes whose program is named mark.
func marked(mark string) []string {
	procs, _ := os.ReadDir("/proc")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if argv0, _, _ := strings.Cut(string(b), "\x00"); err == nil && strings.HasSuffix(argv0, "/"+mark) {
			out = append(out, p.Name())
		}
	}
	return out
}
