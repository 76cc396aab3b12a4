package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A read-only run whose agent tried to write does not look clean: the
// writes its mount refused are counted in the result, and what the agent
// said on stderr is kept although it exited 0.
func TestReadOnlyRunShowsWhatWasRefused(t *testing.T) {
	x := startExecutor(t, `echo hi > new.txt; rm -f README.md; echo "warning: could not save new.txt" >&2; true`)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	before := tree(t, ws)
	r := c.run("export", ws, "--peer", x.url, "--prompt", "try to write", "--access", "ro", "--transport", "sshfs", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("export --access ro: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameTree(t, ws, before)
	for _, want := range []string{
		"refused at the mount: 2 writes of the agent (a read-only delegation): create new.txt; unlink README.md",
		"agent stderr (its end):\n",
		"  warning: could not save new.txt\n",
		"0 refused here and 2 at the executor's read-only mount",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("export's result lacks %q:\n%s", want, r.stdout)
		}
	}
}

// Ctrl-C ends a live-mount delegation, but what the agent already changed
// in the directory stays — and export says so.
func TestInterruptedLiveRunSaysItsChangesStay(t *testing.T) {
	x := startExecutor(t, `echo new > added.txt; rm src/old.go; echo "changed two files"; sleep 60`)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	b := c.start("export", ws, "--peer", x.url, "--prompt", "change and wait", "--transport", "sshfs", "--ssh-listen", "127.0.0.1:0")
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(ws, "src", "old.go")); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never removed src/old.go:\n%s", b.stderr.String())
		}
	}
	b.Process.Signal(syscall.SIGINT)
	b.Wait()
	out := b.stdout.String()
	if !strings.Contains(out, "D src/old.go") || !strings.Contains(out, "A added.txt") ||
		!strings.Contains(out, "note: the cancelled delegation's changes above stay in "+ws) {
		t.Fatalf("export after Ctrl-C:\n%s%s", out, b.stderr.String())
	}
}
