package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestExecutorAwayIsShownNotFailed: while the executor is down, the
// delegation stays running, and `status` (the table, one delegation, and
// --json) and export's own lines say the executor is unreachable and
// since when. The executor, started again, fails the task it lost, and
// the delegation ends with that.
func TestExecutorAwayIsShownNotFailed(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `while :; do sleep 0.1; done`)
	c := newCtl(t)
	exp := c.start("export", sampleWorkspace(t), "--peer", x.url, "--prompt", "p", "--transport", "archive", "--reconnect-bound", "60s")
	d := c.waitState("", "running")
	x.cmd.Process.Kill()
	x.cmd.Wait()
	var view struct {
		State   string `json:"state"`
		Channel *struct {
			State  string    `json:"state"`
			Since  time.Time `json:"since"`
			Detail string    `json:"detail"`
		} `json:"channel"`
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r := c.run("status", d.ID, "--json")
		if err := json.Unmarshal([]byte(r.stdout), &view); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r.stdout)
		}
		if view.Channel != nil && view.Channel.State == "unreachable" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the executor is down and status says %+v", view)
		}
	}
	if view.State != "running" || time.Since(view.Channel.Since) > 10*time.Second || !strings.Contains(view.Channel.Detail, "connection refused") {
		t.Fatalf("status --json while the executor is down: %+v %+v", view, view.Channel)
	}
	if r := c.run("status", d.ID); !strings.Contains(r.stdout, "channel:   unreachable since ") {
		t.Errorf("status %s does not say the executor is unreachable:\n%s", d.ID, r.stdout)
	}
	if r := c.run("status"); !strings.Contains(r.stdout, "running (executor unreachable)") {
		t.Errorf("the status table does not say the executor is unreachable:\n%s", r.stdout)
	}

	x.start(t, x.addr)
	exp.Wait()
	if !strings.Contains(exp.stderr.String(), "awcp: executor unreachable since ") || !strings.Contains(exp.stderr.String(), "error TASK_FAILED") {
		t.Fatalf("export while the executor was away and back: exit %d\n%s", exp.ProcessState.ExitCode(), exp.stderr.String())
	}
}
