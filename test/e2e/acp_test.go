package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// acpSDK is the official TypeScript ACP SDK the test agent is built on.
const acpSDK = "@agentclientprotocol/sdk@2.4.0"

// acpExecutor runs awcp-fs serve with the TypeScript test agent as its ACP
// worker, and extra flags.
func acpExecutor(t *testing.T, extra ...string) *executor {
	t.Helper()
	modules := nodeModules(t, acpSDK)
	src, err := os.ReadFile(filepath.Join("testdata", "acp_agent.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(modules, "acp_agent.mjs")
	writeShared(t, script, src, 0o644)
	// The agent loads the SDK beside it: granted, read-only.
	x := startExecutor(t, "", append([]string{"--agent-acp", "exec node '" + script + "'", "--sandbox-allow", modules}, extra...)...)
	return x
}

// only is the one delegation of c, as `status --json` shows it.
func (c *ctl) only() delegation {
	c.t.Helper()
	ds := c.status()
	if len(ds) != 1 {
		c.t.Fatalf("want one delegation, have %+v", ds)
	}
	return ds[0]
}

// The whole "work" turn of the test agent under the auto policy, on a live
// mount: updates, confined file callbacks, terminals, the permission.
func TestACPAgentAutoPolicy(t *testing.T) {
	slow(t)
	parallel(t)
	x := acpExecutor(t, "--permission", "auto")
	c := newCtl(t)
	dir := sampleWorkspace(t)

	r := c.run("export", dir, "--peer", x.url, "--prompt", "work on it")
	if r.code != 0 {
		t.Fatalf("export exit %d\n%s%s\nexecutor:\n%s", r.code, r.stdout, r.stderr, x.log)
	}
	for _, want := range []string{
		"All done.", "first line: # sample", "permission: allow",
		"outside: -32602", "relative: -32602", "dotdot: -32602", "cwd outside: -32602",
		"terminal: exit 0 output $(not-expanded)", "limited: βγ truncated true",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, want := range []string{
		"| plan: 1 of 3 done; now: write notes", "| thinking: thinking about the task",
		"| tool: Write notes.md (edit, pending)", "| tool: Write notes.md: completed",
		"awcp: permission perm-1: selected allow (executor policy auto)",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress lacks %q:\n%s", want, r.stderr)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "docs/notes.md")); err != nil || string(b) != "notes from # sample\n" {
		t.Errorf("docs/notes.md through fs/write_text_file: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "term.txt")); err != nil || string(b) != "from-terminal\n" {
		t.Errorf("term.txt through terminal/create: %q %v", b, err)
	}
	d := c.only()
	if !slices.Contains(d.Highlights, "docs/notes.md") || !slices.Contains(d.Highlights, "term.txt") {
		t.Errorf("highlights %v", d.Highlights)
	}
	if len(d.Permissions) != 1 || d.Permissions[0].Outcome != "selected" || d.Permissions[0].OptionID != "allow" ||
		d.Permissions[0].DecidedBy != "executor policy auto" || d.Permissions[0].Title != "Write notes.md" {
		t.Errorf("permission record %+v", d.Permissions)
	}
	if st := c.run("status", d.ID); !strings.Contains(st.stdout, "permission perm-1: Write notes.md: allow, decided by executor policy auto") {
		t.Errorf("status does not show the decision:\n%s", st.stdout)
	}
	if !strings.Contains(x.log.String(), "this line is not ACP") {
		t.Errorf("the broken stdout line was not logged:\n%s", x.log)
	}
	nothingLeft(t, c, x, 0)
}

// deny picks the first reject option; without --allow-exec the agent is
// offered no terminal.
func TestACPAgentDenyPolicy(t *testing.T) {
	slow(t)
	parallel(t)
	x := acpExecutor(t, "--permission", "deny", "--allow-exec=false")
	c := newCtl(t)
	dir := sampleWorkspace(t)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "work on it")
	if r.code != 0 {
		t.Fatalf("export exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"permission: reject", "terminal: not offered"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "docs/notes.md")); !os.IsNotExist(err) {
		t.Error("docs/notes.md written although the permission was denied")
	}
	d := c.only()
	if len(d.Permissions) != 1 || d.Permissions[0].OptionID != "reject" || d.Permissions[0].DecidedBy != "executor policy deny" {
		t.Errorf("permission record %+v", d.Permissions)
	}
	nothingLeft(t, c, x, 0)
}

// forward: the request waits for the delegator's user, who answers with
// `awcp-ctl permit`.
func TestACPAgentForwardPolicy(t *testing.T) {
	slow(t)
	parallel(t)
	x := acpExecutor(t, "--permission", "forward")
	c := newCtl(t)
	dir := sampleWorkspace(t)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "work on it", "--background")
	if r.code != 0 {
		t.Fatalf("export --background exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	var out result
	for deadline := time.Now().Add(20 * time.Second); ; {
		out = c.run("output", id)
		if strings.Contains(out.stdout, "PENDING") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pending permission request shown:\n%s%s\nexecutor:\n%s", out.stdout, out.stderr, x.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out.code != 5 || !strings.Contains(out.stdout, "options: reject (reject_once), allow (allow_once)") ||
		!strings.Contains(out.stdout, "awcp-ctl permit "+id+" perm-1 OPTION") {
		t.Fatalf("output of a waiting delegation (exit %d):\n%s", out.code, out.stdout)
	}
	if bad := c.run("permit", id, "perm-1", "maybe"); bad.code != 1 || !strings.Contains(bad.stderr, `option "maybe" is not one of reject, allow`) {
		t.Fatalf("permit with a bad option: exit %d\n%s%s", bad.code, bad.stdout, bad.stderr)
	}
	if ok := c.run("permit", id[:8], "perm-1", "allow"); ok.code != 0 {
		t.Fatalf("permit: exit %d\n%s%s", ok.code, ok.stdout, ok.stderr)
	}
	// Refused either way: the agent, allowed, may have finished already.
	if again := c.run("permit", id, "perm-1", "allow"); again.code != 1 ||
		!strings.Contains(again.stderr, "no pending permission request") && !strings.Contains(again.stderr, "already ended (completed)") {
		t.Fatalf("a second answer: exit %d\n%s%s", again.code, again.stdout, again.stderr)
	}
	done := c.run("output", id, "--block", "--timeout", "60s")
	if done.code != 0 || !strings.Contains(done.stdout, "permission: allow") {
		t.Fatalf("output --block: exit %d\n%s%s", done.code, done.stdout, done.stderr)
	}
	if !strings.Contains(done.stdout, "permission perm-1: Write notes.md: allow, decided by delegator (user: awcp-ctl permit by root; asked by the agent on "+x.url+"; holds for this request)") {
		t.Errorf("the decision, how and by whom it was made and who asked are not shown:\n%s", done.stdout)
	}
	var rec struct {
		Permissions []struct {
			AskedBy   string          `json:"askedBy"`
			ToolCall  json.RawMessage `json:"toolCall"`
			AskedAt   time.Time       `json:"askedAt"`
			How       string          `json:"how"`
			Answerer  string          `json:"answerer"`
			DecidedAt time.Time       `json:"decidedAt"`
		} `json:"permissions"`
	}
	if err := json.Unmarshal([]byte(c.run("status", id, "--json").stdout), &rec); err != nil || len(rec.Permissions) != 1 {
		t.Fatalf("status --json: %+v %v", rec, err)
	}
	if p := rec.Permissions[0]; p.How != "user" || p.Answerer != "awcp-ctl permit by root" || p.AskedBy != "the agent on "+x.url ||
		!strings.Contains(string(p.ToolCall), "notes.md") || p.AskedAt.IsZero() || p.DecidedAt.Before(p.AskedAt) {
		t.Errorf("the permission's record: %+v (tool call %s)", p, p.ToolCall)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "docs/notes.md")); err != nil || !strings.HasPrefix(string(b), "notes from") {
		t.Errorf("docs/notes.md: %q %v", b, err)
	}
	nothingLeft(t, c, x, 0)
}

// A forwarded request nobody answers is cancelled at the timeout, and the
// record says so.
func TestACPPermissionTimeout(t *testing.T) {
	slow(t)
	parallel(t)
	x := acpExecutor(t, "--permission", "forward", "--permission-timeout", "1s")
	c := newCtl(t)
	r := c.run("export", sampleWorkspace(t), "--peer", x.url, "--prompt", "work on it")
	if r.code != 0 || !strings.Contains(r.stdout, "permission: cancelled") {
		t.Fatalf("export exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	d := c.only()
	if len(d.Permissions) != 1 || d.Permissions[0].Outcome != "cancelled" || d.Permissions[0].DecidedBy != "timeout" {
		t.Errorf("permission record %+v", d.Permissions)
	}
}

// Cancel mid-turn: the agent hears session/cancel and ends its turn
// cancelled; nothing is left on the executor.
func TestACPCancelMidTurn(t *testing.T) {
	alone(t, "sets the test process's environment (t.Setenv) for what it starts")
	markers := t.TempDir()
	t.Setenv("ACP_MARKER_DIR", markers) // awcp-fs's, named for its agent
	x := acpExecutor(t, "--agent-env", "ACP_MARKER_DIR")
	c := newCtl(t)
	dir := sampleWorkspace(t)
	before := tree(t, dir)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "slow please", "--background")
	if r.code != 0 {
		t.Fatalf("export exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	waitFile(t, filepath.Join(markers, "prompted")) // the turn has begun
	if cr := c.run("cancel", id); cr.code != 0 {
		t.Fatalf("cancel: %d %s%s", cr.code, cr.stdout, cr.stderr)
	}
	c.waitState(id, "cancelled")
	waitFile(t, filepath.Join(markers, "cancelled")) // the agent heard session/cancel
	nothingLeft(t, c, x, 0)
	sameTree(t, dir, before)
}

// An agent that dies mid-turn fails the task with its stderr; one that
// refuses fails it with the reason.
func TestACPAgentCrashAndRefusal(t *testing.T) {
	slow(t)
	parallel(t)
	x := acpExecutor(t)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	before := tree(t, dir)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "crash now")
	if r.code != 1 || !strings.Contains(r.stderr, "error TASK_FAILED:") || !strings.Contains(r.stderr, "boom: the test agent crashed on purpose") {
		t.Fatalf("crash: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = c.run("export", dir, "--peer", x.url, "--prompt", "refuse this")
	if r.code != 1 || !strings.Contains(r.stderr, "error TASK_FAILED: the agent stopped: refusal: I will not do that.") {
		t.Fatalf("refusal: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	nothingLeft(t, c, x, 0)
	sameTree(t, dir, before)
}
