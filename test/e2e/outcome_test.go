package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A read-only run whose agent tried to write does not look clean: the
// writes its mount refused are counted in the result, and what the agent
// said on stderr is kept although it exited 0.
func TestReadOnlyRunShowsWhatWasRefused(t *testing.T) {
	parallel(t)
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
	parallel(t)
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

// What a newcomer meets first when something is off: an executor that is
// not there is not said to have refused; the failed attempt can be
// filtered out and pruned; a mistyped command is bad usage.
func TestNewcomerErrors(t *testing.T) {
	parallel(t)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	r := c.run("export", ws, "--peer", "http://127.0.0.1:1", "--prompt", "x")
	if r.code != 1 || !strings.Contains(r.stderr, "error SETUP_FAILED: cannot reach the executor at http://127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused") ||
		!strings.Contains(r.stderr, "awcp-ctl doctor --peer http://127.0.0.1:1") || strings.Contains(r.stderr, "DECLINED") {
		t.Fatalf("export to nobody: exit %d\n%s", r.code, r.stderr)
	}
	if r := c.run("status"); !strings.Contains(r.stdout, "ID  ") || !strings.Contains(r.stdout, "EXECUTOR") ||
		!strings.Contains(r.stdout, "http://127.0.0.1:1") || !strings.Contains(r.stdout, "read-write") {
		t.Errorf("status:\n%s", r.stdout)
	}
	if r := c.run("status", "--active"); !strings.HasPrefix(r.stdout, "no delegations") {
		t.Errorf("status --active lists an ended delegation:\n%s", r.stdout)
	}
	if r := c.run("status", "--state", "error"); strings.Count(r.stdout, "\n") != 2 {
		t.Errorf("status --state error:\n%s", r.stdout)
	}
	// By default prune keeps what ended within a day; --dry-run removes
	// nothing; --older-than 0 takes every ended one.
	if r := c.run("prune"); r.code != 0 || r.stdout != "removed 0 ended delegations\n" {
		t.Errorf("prune: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := c.run("prune", "--older-than", "0", "--dry-run"); r.code != 0 || !strings.HasSuffix(r.stdout, "would remove 1 ended delegations (--dry-run: none removed)\n") || len(c.status()) != 1 {
		t.Errorf("prune --dry-run: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := c.run("prune", "--older-than", "0"); r.code != 0 || r.stdout != "removed 1 ended delegations\n" {
		t.Errorf("prune --older-than 0: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if len(c.status()) != 0 {
		t.Errorf("prune left %+v", c.status())
	}
	if r := c.run("stat"); r.code != 2 || !strings.Contains(r.stderr, "did you mean status?") {
		t.Errorf("awcp-ctl stat: exit %d %s", r.code, r.stderr)
	}
	if r := c.run("cancel", "0000dead"); r.code != 1 || !strings.Contains(r.stderr, "NOT_FOUND: no delegation 0000dead") {
		t.Errorf("cancel of an unknown id: exit %d %s", r.code, r.stderr)
	}
}

// TestLocalMistakesAreTheUsersOwn: what the user got wrong — plain HTTP
// not asked for, a peer that is no agent's URL, an access mode, a
// session asked of an A2A agent — is said as the user's (USAGE, exit 2,
// as a bad flag), never as the executor's refusal (DECLINED), and no
// delegation is listed for it: nothing was sent.
func TestLocalMistakesAreTheUsersOwn(t *testing.T) {
	parallel(t)
	c := newCtl(t)
	c.tls = true // no AWCP_PLAIN_HTTP
	ws := sampleWorkspace(t)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--peer", "http://127.0.0.1:1", "--prompt", "x"}, "plain HTTP to http://127.0.0.1:1"},
		{[]string{"--peer", "a2a:127.0.0.1:10201", "--prompt", "x"}, "not an agent's URL"},
		{[]string{"--peer", "https://127.0.0.1:1", "--prompt", "x", "--access", "rwx"}, "access must be rw or ro"},
		{[]string{"--peer", "a2a:https://127.0.0.1:1", "--session", "new", "--prompt", "x"}, "an A2A agent takes tasks, not ACP sessions"},
	} {
		r := c.run(append([]string{"export", ws}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "error USAGE: ") || !strings.Contains(r.stderr, tc.says) || strings.Contains(r.stderr, "DECLINED") {
			t.Errorf("export %v: exit %d, want 2 and USAGE: %s\n%s", tc.args, r.code, tc.says, r.stderr)
		}
	}
	if ds := c.status(); len(ds) != 0 {
		t.Errorf("refused exports are listed: %+v", ds)
	}
	if r := c.run("status"); !strings.HasPrefix(r.stdout, "no delegations") {
		t.Errorf("status after refused exports:\n%s", r.stdout)
	}
	// A session continued with a directory: what to drop, by name.
	if r := c.run("export", ws, "--session", "0123abcd", "--prompt", "next"); r.code != 2 || !strings.Contains(r.stderr, "drop "+ws) {
		t.Errorf("export DIR --session ID: exit %d\n%s", r.code, r.stderr)
	}
	// peers trust of an executor that is not there: the spec's words and
	// what to check, not a Go error's.
	r := c.run("peers", "trust", "https://127.0.0.1:1")
	if r.code != 1 || !strings.Contains(r.stderr, "error SETUP_FAILED: cannot reach the executor at https://127.0.0.1:1") ||
		!strings.Contains(r.stderr, "hint: ") || strings.Contains(r.stderr, `Get "`) {
		t.Errorf("peers trust of a dead URL: exit %d\n%s", r.code, r.stderr)
	}
	if r := c.run("peers", "trust", "http://127.0.0.1:1"); r.code != 2 || !strings.Contains(r.stderr, "error USAGE: ") {
		t.Errorf("peers trust of an http:// URL: exit %d\n%s", r.code, r.stderr)
	}
}

// `peers` on a host where no interface takes multicast says what to do,
// in a network namespace with nothing but loopback.
func TestPeersWithoutMulticastSaysWhy(t *testing.T) {
	parallel(t)
	ns := fmt.Sprintf("awcp-nomc-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	cmd := exec.Command("ip", "netns", "exec", ns, filepath.Join(binDir, "awcp-ctl"), "--state-dir", t.TempDir(), "peers", "--browse-window", "300ms")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no network interface here takes IPv4 multicast") || !strings.Contains(string(out), "--peer https://HOST:10200") {
		t.Fatalf("peers without multicast: %v\n%s", err, out)
	}
}

// "completed" is the agent's word that its turn ended: a read-write run
// that wrote nothing says so beside it, on the live mount as on archive.
func TestCompletedRunThatWroteNothingSaysSo(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `echo "I have updated the README as asked."`)
	c := newCtl(t)
	for _, tr := range []string{"sshfs", "archive"} {
		ws := sampleWorkspace(t)
		r := c.run("export", ws, "--peer", x.url, "--prompt", "update the README", "--transport", tr, "--ssh-listen", "127.0.0.1:0")
		if r.code != 0 || !strings.Contains(r.stdout, "completed") || !strings.Contains(r.stdout, "changes: none (the agent wrote nothing in "+ws+")") {
			t.Errorf("%s: a run that wrote nothing: exit %d\n%s%s", tr, r.code, r.stdout, r.stderr)
		}
	}
}

// An agent writing past --max-write-bytes over the live mount is told so by
// the write that passes it (EDQUOT), as a quota says it on a local disk,
// and what it was told it wrote is what landed in the owner's directory:
// dd counts the bytes its writes were told were written.
func TestWriteLimitReachesTheAgent(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `dd if=/dev/zero of=big.bin bs=64k count=48; true`)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	r := c.run("export", ws, "--peer", x.url, "--prompt", "write a lot", "--transport", "sshfs", "--ssh-listen", "127.0.0.1:0", "--max-write-bytes", "1M")
	out := r.stdout + r.stderr
	if !strings.Contains(out, "Disk quota exceeded") || !strings.Contains(out, "1 refused") {
		t.Errorf("the agent was not told its write past the bound failed (exit %d):\n%s", r.code, out)
	}
	m := regexp.MustCompile(`(\d+) bytes .* copied`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no count of dd's bytes in the agent's stderr:\n%s", out)
	}
	told, _ := strconv.ParseInt(m[1], 10, 64)
	if fi, err := os.Stat(filepath.Join(ws, "big.bin")); err != nil || fi.Size() > 1<<20 || fi.Size() != told {
		t.Errorf("big.bin in the owner's directory: %v, %v; dd was told %d bytes were written", fi, err, told)
	}
}
