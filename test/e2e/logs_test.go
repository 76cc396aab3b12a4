package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A delegation handed to the daemon can be followed: `awcp-ctl logs -f`
// prints the agent's progress lines as they come, each once, and ends
// with the delegation (exit 0 for completed); `output` and `status
// --json` carry the lines too.
func TestFollowABackgroundDelegation(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `for i in 1 2 3 4; do echo "step $i of 4"; sleep 0.7; done; echo "all done"`)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	r := c.run("export", ws, "--peer", x.url, "--prompt", "count", "--background", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("export --background: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	c.waitState(id, "running")

	r = c.run("logs", "-f", id[:8])
	if r.code != 0 {
		t.Fatalf("logs -f: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if want := "step 1 of 4\nstep 2 of 4\nstep 3 of 4\nstep 4 of 4\nall done\n"; r.stdout != want {
		t.Fatalf("logs -f printed %q, want %q (stderr %s)", r.stdout, want, r.stderr)
	}
	if !strings.Contains(r.stderr, "delegation "+id+" completed") {
		t.Errorf("logs -f did not say how the delegation ended: %s", r.stderr)
	}

	r = c.run("output", id)
	if !strings.Contains(r.stdout, "agent output (last 5 lines; all kept: awcp-ctl logs "+id+"):\n  | step 1 of 4\n") ||
		!strings.Contains(r.stdout, "  | all done\n") {
		t.Errorf("output lacks the agent's lines:\n%s", r.stdout)
	}
	r = c.run("status", id, "--json")
	var d struct {
		Progress []struct {
			Text string `json:"text"`
		} `json:"progress"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || len(d.Progress) != 5 || d.Progress[4].Text != "all done" {
		t.Errorf("status --json progress: %+v %v\n%s", d.Progress, err, r.stdout)
	}
	if r := c.run("logs", id, "--tail", "2"); r.stdout != "step 4 of 4\nall done\n" {
		t.Errorf("logs --tail 2: %q", r.stdout)
	}
	// The executor's operator sees it too, on the daemon's own socket.
	out, err := exec.Command(filepath.Join(binDir, "awcp-fs"), "status", "--state-dir", x.state).CombinedOutput()
	if err != nil || !strings.Contains(string(out), id) || !strings.Contains(string(out), "completed") || !strings.Contains(string(out), "(plain HTTP)") {
		t.Errorf("awcp-fs status: %v\n%s", err, out)
	}
	if r := c.run("logs", "no-such-id"); r.code != 1 || !strings.Contains(r.stderr, "NOT_FOUND: no delegation no-such-id") {
		t.Errorf("logs of an unknown id: exit %d %s", r.code, r.stderr)
	}
}

// The daemon `export --background` started can be stopped by a command;
// its delegation runs on at the executor, and the daemon started again
// takes it over to its end.
func TestStopTheDaemon(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `sleep 3; echo done > stopped.txt`)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	r := c.run("export", ws, "--peer", x.url, "--prompt", "p", "--background", "--transport", "archive")
	if r.code != 0 {
		t.Fatalf("export --background: %d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	c.waitState(id, "running")
	if r := c.run("stop"); r.code != 0 || !strings.HasPrefix(r.stdout, "stopped the daemon of ") {
		t.Fatalf("stop: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if c.signalDaemon(0) != 0 {
		t.Fatal("the daemon still runs after stop")
	}
	if r := c.run("stop"); r.code != 0 || !strings.HasPrefix(r.stdout, "no daemon runs") {
		t.Errorf("stop with none running: exit %d %q", r.code, r.stdout)
	}
	if d := c.status(); len(d) != 1 || d[0].State != "running" {
		t.Fatalf("the delegation after the daemon stopped: %+v", d)
	}
	c.serve()
	c.waitStateWithin(id, "completed", 30*time.Second)
}

// A waiting export shows the agent's lines once, as they come, and does
// not print them again with the result; `output` still has them.
func TestExportShowsTheAgentsLinesOnce(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `echo "first line"; echo "second line"; echo done`)
	c := newCtl(t)
	r := c.run("export", sampleWorkspace(t), "--peer", x.url, "--prompt", "talk", "--transport", "archive")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stdout+r.stderr, "| first line"); n != 1 || strings.Contains(r.stdout, "agent output") {
		t.Errorf("the agent's output line is shown %d times:\n%s%s", n, r.stdout, r.stderr)
	}
	if o := c.run("output", c.only().ID); !strings.Contains(o.stdout, "  | first line\n") {
		t.Errorf("output lacks the agent's lines:\n%s", o.stdout)
	}
}
