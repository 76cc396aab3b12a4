package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
)

// TestJSONLogs: with --log-format json every line of the executor's log is
// one JSON object, and those of a delegation's work carry its id under
// "delegation", so that an operator can follow one delegation through.
func TestJSONLogs(t *testing.T) {
	x := startExecutor(t, `echo working; echo done > out.txt`, "--log-format", "json")
	c := newCtl(t)
	r := c.run("--log-format", "json", "--log-level", "info", "export", t.TempDir(), "--peer", x.url,
		"--transport", "archive", "--prompt", "p", "--json")
	if r.code != 0 {
		t.Fatalf("export: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.ID == "" {
		t.Fatalf("export --json: %v\n%s", err, r.stdout)
	}
	x.stop(t)
	withID := 0
	for _, log := range []string{x.log.String(), r.stderr} {
		for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
			if line == "" || strings.HasPrefix(line, "awcp:") || strings.HasPrefix(line, "  |") {
				continue // the export's own progress lines, not its log
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
				t.Fatalf("a log line that is not a JSON record: %q (%v)", line, err)
			}
			if rec["delegation"] == out.ID {
				withID++
			}
		}
	}
	if withID < 2 {
		t.Fatalf("%d log lines carry the delegation's id:\nexecutor:\n%s\nctl:\n%s", withID, x.log, r.stderr)
	}
}

// stop ends awcp-fs (SIGTERM) and waits, so that its log is complete.
func (x *executor) stop(t *testing.T) {
	t.Helper()
	x.cmd.Process.Signal(syscall.SIGTERM)
	x.cmd.Wait()
}
