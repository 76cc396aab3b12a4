package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAttemptsComparedAndOneApplied: one task lent to three executors at
// once (three --peer), each agent changing one line of one file its own
// way. The owner's tree stays byte-identical while they run and after;
// compare lists the three with their line counts and a --check verdict
// each (one attempt breaks the check, run confined on a copy); apply of
// a passing one leaves the tree as the base plus exactly its change, and
// the other attempts' staging areas are gone.
func TestAttemptsComparedAndOneApplied(t *testing.T) {
	slow(t)
	parallel(t)
	agents := []string{
		`sed -i 's/^x = 1$/x = 2/' calc.txt; echo "x is two"`,
		`sed -i 's/^x = 1$/x = 3/' calc.txt; echo "x is three"`,
		`sed -i 's/^x = 1$/x = broken/' calc.txt; echo "x is broken"`,
	}
	var args []string
	for _, a := range agents {
		x := startExecutor(t, a, "--transports", "archive")
		args = append(args, "--peer", x.url)
	}
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"calc.txt": "a\nx = 1\nz\n", "other.txt": "untouched\n"})
	before := tree(t, ws)

	r := c.run(append([]string{"export", ws, "--prompt", "set x", "--transport", "archive"}, args...)...)
	if r.code != 0 {
		t.Fatalf("export to three peers: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameTree(t, ws, before)
	m := regexp.MustCompile(`group (grp-[0-9a-f]+)`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("export did not name the group:\n%s", r.stderr)
	}
	group := m[1]
	if strings.Count(r.stdout, "+1 -1") != 3 {
		t.Errorf("export's comparison does not show three one-line changes:\n%s", r.stdout)
	}

	// status shows the group: its state and members, and the list a
	// group column.
	if r := c.run("status", group); r.code != 0 || !strings.Contains(r.stdout, "group "+group+" ended: 3 completed, 3 members") || strings.Count(r.stdout, group) != 4 {
		t.Errorf("status %s: exit %d\n%s%s", group, r.code, r.stdout, r.stderr)
	}
	var g struct {
		State   string       `json:"state"`
		Members []delegation `json:"members"`
	}
	if r := c.run("status", group, "--json"); json.Unmarshal([]byte(r.stdout), &g) != nil || len(g.Members) != 3 || g.State != "ended: 3 completed" {
		t.Errorf("status %s --json: %s", group, r.stdout)
	}
	if r := c.run("status"); !strings.Contains(r.stdout, "GROUP") || strings.Count(r.stdout, group) != 3 {
		t.Errorf("status lists no group column:\n%s", r.stdout)
	}

	r = c.run("compare", group, "--check", `grep -q '^x = [0-9]$' calc.txt`)
	t.Logf("compare:\n%s", r.stdout)
	if r.code != 0 {
		t.Fatalf("compare --check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	rows := map[string]string{} // summary → row
	var chosen string
	for _, line := range strings.Split(r.stdout, "\n") {
		for _, s := range []string{"x is two", "x is three", "x is broken"} {
			if strings.Contains(line, s) {
				rows[s] = line
			}
		}
		if strings.Contains(line, "x is two") {
			chosen = strings.Fields(line)[0]
		}
	}
	for s, verdict := range map[string]string{"x is two": " pass ", "x is three": " pass ", "x is broken": " FAIL (exit 1) "} {
		if !strings.Contains(rows[s], verdict) || !strings.Contains(rows[s], "completed") || !strings.Contains(rows[s], "+1 -1") {
			t.Errorf("the attempt saying %q: %q, want %q\n%s", s, rows[s], verdict, r.stdout)
		}
	}
	sameTree(t, ws, before)
	// The verdicts are kept: compare without --check shows them again.
	if r := c.run("compare", group); strings.Count(r.stdout, " pass ") != 2 || strings.Count(r.stdout, " FAIL (exit 1) ") != 1 {
		t.Errorf("compare after compare --check does not show the verdicts:\n%s", r.stdout)
	}

	r = c.run("apply", chosen)
	if r.code != 0 || !strings.Contains(r.stderr, "discarded the other attempts of "+group) {
		t.Fatalf("apply %s: exit %d\n%s%s", chosen, r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "calc.txt")); string(b) != "a\nx = 2\nz\n" {
		t.Errorf("calc.txt after apply: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "other.txt")); string(b) != "untouched\n" {
		t.Errorf("other.txt after apply: %q", b)
	}
	leftovers, _ := filepath.Glob(filepath.Join(ws, "*.awcp-*"))
	if len(leftovers) != 0 {
		t.Errorf("apply left %v", leftovers)
	}
	for _, d := range c.status() {
		r := c.run("status", d.ID, "--json")
		if d.ID != chosen && !strings.Contains(r.stdout, `"state": "discarded"`) {
			t.Errorf("attempt %s was not discarded:\n%s", d.ID, r.stdout)
		}
	}
	staged, _ := filepath.Glob(filepath.Join(c.state, "staged", "*"))
	if len(staged) != 0 {
		t.Errorf("staging areas left: %v", staged)
	}
}

// TestAttemptsOutliveAKilledExecutor: of two attempts, one executor is
// killed (SIGKILL) while its agent works; that attempt ends alone (its
// lease runs out), the other completes, and is applied.
func TestAttemptsOutliveAKilledExecutor(t *testing.T) {
	slow(t)
	parallel(t)
	ok := startExecutor(t, `sleep 1; sed -i 's/^x = 1$/x = 2/' calc.txt; echo done`, "--transports", "archive")
	doomed := startExecutor(t, `sleep 60`, "--transports", "archive")
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"calc.txt": "a\nx = 1\nz\n"})
	before := tree(t, ws)
	r := c.run("export", ws, "--prompt", "set x", "--transport", "archive", "--ttl", "6s", "--background",
		"--peer", ok.url, "--peer", doomed.url)
	group := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(group, "grp-") {
		t.Fatalf("export --background to two peers: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if bothRunning(c) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the doomed attempt never ran: %+v", c.status())
		}
	}
	doomed.cmd.Process.Kill()
	states := map[string]string{}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		ended := 0
		for _, d := range c.status() {
			states[d.Peer] = d.State
			if d.State == "completed" || d.State == "expired" || d.State == "error" || d.State == "cancelled" {
				ended++
			}
		}
		if ended == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the attempts did not both end: %v", states)
		}
	}
	if states[ok.url] != "completed" || states[doomed.url] == "completed" {
		t.Fatalf("attempts ended %v", states)
	}
	sameTree(t, ws, before)
	var chosen string
	for _, d := range c.status() {
		if d.Peer == ok.url {
			chosen = d.ID
		}
	}
	if r := c.run("apply", chosen); r.code != 0 {
		t.Fatalf("apply the attempt that completed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "calc.txt")); string(b) != "a\nx = 2\nz\n" {
		t.Errorf("calc.txt after apply: %q", b)
	}
}

// bothRunning reports whether both of c's attempts run.
func bothRunning(c *ctl) bool {
	ds := c.status()
	n := 0
	for _, d := range ds {
		if d.State == "running" {
			n++
		}
	}
	return n == 2
}
