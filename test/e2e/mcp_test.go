package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// mcpSDK is the official TypeScript MCP SDK the client test installs.
const mcpSDK = "@modelcontextprotocol/sdk@1.32.2"

// nodeModules returns a directory whose node_modules holds pkgs, installed
// from the npm registry once and kept in the user's cache dir (or
// $AWCP_NPM_CACHE) for later runs.
func nodeModules(t *testing.T, pkgs ...string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (.ci/run installs Debian's nodejs and npm): %v", tool, err)
		}
	}
	cache := os.Getenv("AWCP_NPM_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(base, "awcp-e2e", "npm")
	}
	sum := sha256.Sum256([]byte(strings.Join(pkgs, "\n")))
	dir := filepath.Join(cache, hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err == nil {
		return dir
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(cache, "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("npm", append([]string{"install", "--no-audit", "--no-fund", "--loglevel=error"}, pkgs...)...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %v: %v\n%s", pkgs, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(filepath.Join(dir, "node_modules")); serr != nil {
			t.Fatal(err) // not a concurrent install that won the race
		}
	}
	return dir
}

// placeScript copies testdata/script into modules, so that its imports
// resolve there, and returns its path.
func placeScript(t *testing.T, modules, script string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(modules, script)
	writeShared(t, path, src, 0o644)
	return path
}

// runNode runs testdata/script inside modules (so that its imports resolve
// there) with env, and decodes the one JSON object it prints.
func runNode(t *testing.T, modules, script string, env []string, out any) {
	t.Helper()
	cmd := exec.Command("node", placeScript(t, modules, script))
	// The suite's executors are named by http:// URL (startExecutor).
	cmd.Env = append(append(os.Environ(), "AWCP_PLAIN_HTTP=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\n%s\n%s", script, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("node %s printed %q: %v\nstderr:\n%s", script, stdout.String(), err, stderr.String())
	}
}

// The agent of the MCP tests: a greeting after a second (so that a
// blocking delegate_output has something to wait for), or a long wait for
// prompts that say "slow".
const greetingAgent = `case "$AWCP_PROMPT" in *slow*) echo waiting; sleep 60;; esac
echo "writing greeting.txt"
sleep 1
echo "hello from the executor" > greeting.txt
echo "Added greeting.txt." > "$AWCP_SUMMARY_FILE"`

// mcpResult is a tools/call result as the TypeScript client returned it.
type mcpResult struct {
	IsError bool `json:"isError"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Structured struct {
		DelegationID string   `json:"delegation_id"`
		State        string   `json:"state"`
		Summary      string   `json:"summary"`
		Highlights   []string `json:"highlights"`
		AgentOutput  []string `json:"agent_output"`
		Error        *struct {
			Code, Message, Hint string
		} `json:"error"`
		Cancelled []struct {
			DelegationID string `json:"delegation_id"`
			State        string `json:"state"`
		} `json:"cancelled"`
		Delegations []struct {
			DelegationID string `json:"delegation_id"`
			State        string `json:"state"`
		} `json:"delegations"`
	} `json:"structuredContent"`
}

func (r mcpResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

type mcpTranscript struct {
	Exception       string   `json:"exception"`
	TransportErrors []string `json:"transportErrors"`
	Stderr          string   `json:"stderr"`
	Server          struct {
		Name string `json:"name"`
	} `json:"server"`
	Tools []struct {
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema"`
	} `json:"tools"`
	Progress        []any     `json:"progress"`
	Delegate        mcpResult `json:"delegate"`
	Output          mcpResult `json:"output"`
	Slow            mcpResult `json:"slow"`
	Cancel          mcpResult `json:"cancel"`
	CancelledOutput mcpResult `json:"cancelledOutput"`
	Missing         mcpResult `json:"missing"`
	Status          mcpResult `json:"status"`
	Abandoned       mcpResult `json:"abandoned"`
}

func (tr *mcpTranscript) check(t *testing.T) {
	t.Helper()
	if tr.Exception != "" || len(tr.TransportErrors) > 0 {
		t.Fatalf("client failed: %s\ntransport errors (non-MCP output on stdout?): %v\nawcp-ctl stderr:\n%s",
			tr.Exception, tr.TransportErrors, tr.Stderr)
	}
}

// TestMCPWithTypeScriptClient drives `awcp-ctl mcp` with the official
// TypeScript SDK's client, without a daemon: the delegations run in the MCP
// server's process, live-mounted through its own SSH server.
func TestMCPWithTypeScriptClient(t *testing.T) {
	slow(t)
	parallel(t)
	modules := nodeModules(t, mcpSDK)
	x := startExecutor(t, greetingAgent, "--name", "greeter", "--skill", "greetings: writes greeting files")
	c := newCtl(t)
	ws, slow := sampleWorkspace(t), filepath.Join(t.TempDir(), "slow")
	writeFiles(t, slow, map[string]string{"notes.txt": "slow\n"})
	slowBefore := tree(t, slow)

	var tr mcpTranscript
	runNode(t, modules, "mcp_client.mjs", []string{
		"AWCP_CTL=" + filepath.Join(binDir, "awcp-ctl"), "STATE=" + c.state, "PEER=" + x.url,
		"WS=" + ws, "WS_SLOW=" + slow, "MISSING=" + filepath.Join(ws, "no-such-dir"), "MODE=full",
	}, &tr)
	tr.check(t)

	// initialize and tools/list, with the schemas an LLM relies on.
	if tr.Server.Name != "awcp" {
		t.Errorf("server name %q", tr.Server.Name)
	}
	tools := map[string]int{}
	for i, tool := range tr.Tools {
		tools[tool.Name] = i
		if len(tool.OutputSchema) == 0 {
			t.Errorf("%s has no output schema", tool.Name)
		}
	}
	for _, name := range []string{"delegate", "delegate_output", "delegate_cancel", "delegate_status"} {
		if _, ok := tools[name]; !ok {
			t.Fatalf("tool %s missing: %v", name, tools)
		}
	}
	var in struct {
		Type       string   `json:"type"`
		Required   []string `json:"required"`
		Properties map[string]struct {
			Type    string `json:"type"`
			Default any    `json:"default"`
			Enum    []any  `json:"enum"`
		} `json:"properties"`
	}
	delegate := tr.Tools[tools["delegate"]]
	if err := json.Unmarshal(delegate.InputSchema, &in); err != nil {
		t.Fatal(err)
	}
	slices.Sort(in.Required)
	if in.Type != "object" || !slices.Equal(in.Required, []string{"description", "prompt"}) {
		t.Errorf("delegate input schema: type %q, required %v", in.Type, in.Required)
	}
	want := map[string]string{"description": "string", "prompt": "string", "workspace_dir": "string", "peer_url": "string",
		"cwd": "string", "ttl_seconds": "integer", "access_mode": "string", "background": "boolean"}
	for name, typ := range want {
		if in.Properties[name].Type != typ {
			t.Errorf("delegate.%s: type %q, want %s", name, in.Properties[name].Type, typ)
		}
	}
	if in.Properties["ttl_seconds"].Default != float64(3600) || in.Properties["access_mode"].Default != "rw" ||
		len(in.Properties["access_mode"].Enum) != 2 || in.Properties["background"].Default != false {
		t.Errorf("delegate defaults: %s", delegate.InputSchema)
	}
	for _, s := range []string{x.url + " — greeter", "skill greetings: writes greeting files", "AWCP: yes"} {
		if !strings.Contains(delegate.Description, s) {
			t.Errorf("delegate's description lacks %q:\n%s", s, delegate.Description)
		}
	}

	// delegate in the background, then delegate_output with block.
	id := tr.Delegate.Structured.DelegationID
	if tr.Delegate.IsError || id == "" {
		t.Fatalf("delegate: %+v", tr.Delegate)
	}
	out := tr.Output
	if out.IsError || out.Structured.State != "completed" || out.Structured.Summary != "Added greeting.txt." ||
		!slices.Contains(out.Structured.Highlights, "greeting.txt") {
		t.Fatalf("delegate_output: %+v\n%s", out.Structured, out.text())
	}
	if b, err := os.ReadFile(filepath.Join(ws, "greeting.txt")); err != nil || string(b) != "hello from the executor\n" {
		t.Errorf("greeting.txt in the workspace: %q %v", b, err)
	}
	if len(tr.Progress) == 0 {
		t.Error("no progress notifications while delegate_output blocked")
	}
	// The agent's own lines, as notifications while it ran and in the
	// outcome.
	if b, _ := json.Marshal(tr.Progress); !strings.Contains(string(b), `"message":"agent: writing greeting.txt"`) {
		t.Errorf("no progress notification carried the agent's line: %s", b)
	}
	if !slices.Contains(out.Structured.AgentOutput, "writing greeting.txt") {
		t.Errorf("delegate_output's agent_output: %q", out.Structured.AgentOutput)
	}

	// delegate_cancel, and the cancelled delegation's output is a tool error.
	if tr.Cancel.IsError || len(tr.Cancel.Structured.Cancelled) != 1 || tr.Cancel.Structured.Cancelled[0].State != "cancelled" {
		t.Errorf("delegate_cancel: %+v\n%s", tr.Cancel.Structured, tr.Cancel.text())
	}
	if co := tr.CancelledOutput; !co.IsError || co.Structured.Error == nil || co.Structured.Error.Code != "CANCELLED" {
		t.Errorf("output of a cancelled delegation: %+v", co)
	}

	// A missing workspace: a tool error with the spec's code, not a crash.
	m := tr.Missing
	if !m.IsError || m.Structured.Error == nil || m.Structured.Error.Code != "WORKSPACE_NOT_FOUND" ||
		!strings.Contains(m.text(), "WORKSPACE_NOT_FOUND") {
		t.Errorf("missing workspace: %+v\n%s", m, m.text())
	}
	if n := len(tr.Status.Structured.Delegations); n != 2 {
		t.Errorf("delegate_status lists %d delegations, want 2: %+v", n, tr.Status.Structured)
	}

	// The client went away with a delegation running in the server's
	// process: it was cancelled and nothing is left on either side.
	abandoned := tr.Abandoned.Structured.DelegationID
	if abandoned == "" {
		t.Fatalf("abandoned delegation: %+v", tr.Abandoned)
	}
	c.waitState(abandoned, "cancelled")
	sameTree(t, slow, slowBefore)
	nothingLeft(t, c, x, 0)
	for _, d := range c.status() {
		if d.ID == id && (d.OwnerPID == 0 || d.OwnerPID == os.Getpid()) {
			t.Errorf("owner of %s: %d", id, d.OwnerPID)
		}
	}
	if strings.Contains(tr.Stderr, "panic") {
		t.Errorf("awcp-ctl mcp stderr:\n%s", tr.Stderr)
	}
}

// With an `awcp-ctl serve` daemon running, the MCP server hands it the
// delegations: they survive the MCP client.
func TestMCPUsesTheDaemon(t *testing.T) {
	slow(t)
	parallel(t)
	modules := nodeModules(t, mcpSDK)
	x := startExecutor(t, greetingAgent)
	c := newCtl(t)
	daemon := c.start("serve", "--state-dir", c.state)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(filepath.Join(c.state, "ctl.sock")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start:\n%s", daemon.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ws := sampleWorkspace(t)

	var tr mcpTranscript
	runNode(t, modules, "mcp_client.mjs", []string{
		"AWCP_CTL=" + filepath.Join(binDir, "awcp-ctl"), "STATE=" + c.state, "PEER=" + x.url, "WS=" + ws, "MODE=daemon",
	}, &tr)
	tr.check(t)
	if tr.Output.Structured.State != "completed" {
		t.Fatalf("delegate_output: %+v\n%s", tr.Output.Structured, tr.Output.text())
	}
	ds := c.status()
	if len(ds) != 1 || ds[0].OwnerPID != daemon.Process.Pid {
		t.Fatalf("delegation not run by the daemon (pid %d): %+v", daemon.Process.Pid, ds)
	}
}
