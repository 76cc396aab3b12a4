package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSandboxedAgentSaysWhatItNeeds: an ACP agent whose modules live
// outside the system's paths and outside its own package (a workspace of
// a monorepo, its dependencies hoisted to the node_modules above it)
// cannot start in the sandbox until they are granted: the sandbox grants
// what the command runs (the agent's package), not the trees above it. doctor
// starts it in the sandbox and says so, with what it wrote to stderr and
// the grant to make; once granted, doctor sees it answer initialize. An
// editor's session/new on the ungranted executor fails with the agent's
// own words and the same hint — not "the channel closed".
func TestSandboxedAgentSaysWhatItNeeds(t *testing.T) {
	slow(t)
	parallel(t)
	modules, hoisted := sessionAgentScript(t)
	script := filepath.Join(modules, "agent", filepath.Base(hoisted))
	os.MkdirAll(filepath.Dir(script), 0o755)
	// A copy: the hoisted script is the other tests' too.
	src, err := os.ReadFile(hoisted)
	if err != nil {
		t.Fatal(err)
	}
	writeShared(t, script, src, 0o644)
	writeShared(t, filepath.Join(modules, "agent", "package.json"), []byte(`{"name":"agent","private":true}`), 0o644)
	agentCmd := "exec node '" + script + "'"
	doctor := func(extra ...string) (int, string) {
		return runFSDoctor(t, append([]string{"--agent-acp", agentCmd}, extra...)...)
	}
	code, out := doctor()
	line := doctorLine(out, "agent in sandbox")
	if code != 1 || !strings.HasPrefix(line, "FAIL") || !strings.Contains(out, "@agentclientprotocol/sdk") || !strings.Contains(out, "--sandbox-allow") {
		t.Errorf("doctor with the agent's modules not granted: exit %d\n%s", code, out)
	}
	code, out = doctor("--sandbox-allow", modules)
	if line := doctorLine(out, "agent in sandbox"); code != 0 || !strings.HasPrefix(line, "OK") || !strings.Contains(line, "answered initialize") {
		t.Errorf("doctor with the modules granted: exit %d\n%s", code, out)
	}

	x := startExecutor(t, "", "--agent-acp", agentCmd)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	cmd := c.command("acp", "--peer", x.url, "--transport", "archive")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	answer := func(id string) map[string]any {
		t.Helper()
		deadline := time.After(90 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the gateway closed")
				}
				var m map[string]any
				json.Unmarshal([]byte(l), &m)
				if id == string(mustJSON(m["id"])) {
					return m
				}
			case <-deadline:
				t.Fatalf("no answer to %s", id)
			}
		}
	}
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`+"\n")
	answer("1")
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"`+ws+`","mcpServers":[]}}`+"\n")
	m := answer("2")
	e, _ := json.Marshal(m["error"])
	if m["error"] == nil || !strings.Contains(string(e), "@agentclientprotocol/sdk") || !strings.Contains(string(e), "--sandbox-allow") {
		t.Errorf("session/new with the agent's modules not granted: %s", e)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestBrokenAgentIsSaidAtInitialize: an executor whose ACP agent dies at
// start (no credentials, say) knows it at once; an editor's initialize
// through `awcp-ctl acp` is answered with the agent's own words within
// a couple of seconds, not after a wait for capabilities that will never
// come.
func TestBrokenAgentIsSaidAtInitialize(t *testing.T) {
	alone(t, "bounds, in wall-clock seconds, how soon a broken agent is said")
	x := startExecutor(t, "", "--agent-acp", `sh -c 'echo "Error: no API key: set GEMINI_API_KEY" >&2; exit 1'`)
	ed := startEditor(t, newCtl(t), x, "archive")
	started := time.Now()
	m := ed.call(t, "1", "initialize", `{"protocolVersion":1,"clientCapabilities":{}}`)
	took := time.Since(started)
	e, _ := json.Marshal(m["error"])
	if m["error"] == nil || !strings.Contains(string(e), "no API key: set GEMINI_API_KEY") {
		t.Fatalf("initialize with a broken agent: %v", m)
	}
	if took > 3*time.Second {
		t.Errorf("initialize took %s to say the agent is broken", took)
	}
}

// TestAgentFindsItsCredentialsAsServeStartsIt: an agent that keeps its
// login in its HOME (~/.fakeagent, as Claude Code keeps ~/.claude) finds
// it under serve once the operator grants it — each delegation's agent
// has a fresh HOME, where the grant shows at the same place — and doctor
// starts it the same way, so that what passes doctor works under serve.
// The editor's initialize through `awcp-ctl acp` gets the agent's own
// name and auth methods.
func TestAgentFindsItsCredentialsAsServeStartsIt(t *testing.T) {
	slow(t)
	alone(t, "sets HOME (t.Setenv) for the daemon it starts")
	daemonHome, agentCmd := homeAgent(t, "tok-123")
	grant := filepath.Join(daemonHome, ".fakeagent") + ":rw"
	doctor := func(extra ...string) (int, string) {
		return runFSDoctor(t, append([]string{"--agent-acp", agentCmd}, extra...)...)
	}
	if code, out := doctor(); code != 1 || !strings.Contains(out, "not logged in") {
		t.Errorf("doctor without the login granted: exit %d\n%s", code, out)
	}
	if code, out := doctor("--sandbox-allow", grant); code != 0 || !strings.Contains(doctorLine(out, "agent in sandbox"), "(home-agent tok-123)") {
		t.Errorf("doctor with the login granted: exit %d\n%s", code, out)
	}

	x := startExecutor(t, "", "--agent-acp", agentCmd, "--sandbox-allow", grant)
	c := newCtl(t)
	init, _ := json.Marshal(startEditor(t, c, x, "archive").call(t, "1", "initialize", `{"protocolVersion":1,"clientCapabilities":{}}`))
	var m struct {
		Result struct {
			AgentInfo   struct{ Name, Version string } `json:"agentInfo"`
			AuthMethods []struct{ ID string }          `json:"authMethods"`
		} `json:"result"`
	}
	json.Unmarshal(init, &m)
	line := string(init)
	if m.Result.AgentInfo.Name != "home-agent" || m.Result.AgentInfo.Version != "tok-123" || len(m.Result.AuthMethods) != 1 || m.Result.AuthMethods[0].ID != "fake-login" {
		t.Errorf("the editor's initialize under serve: %s", line)
	}

	// A delegation's session: the agent, in a HOME of its own, finds its
	// login there.
	ws := sampleWorkspace(t)
	r := c.run("export", ws, "--peer", x.url, "--prompt", "who are you", "--session", "new", "--transport", "archive")
	if r.code != 3 || !strings.Contains(r.stdout, "logged in as tok-123") || strings.Contains(r.stdout, "HOME "+daemonHome+"\n") {
		t.Errorf("a session's agent under serve: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	c.run("close", strings.Fields(r.stderr[strings.Index(r.stderr, "session ")+len("session "):])[0])
}

// TestAuthenticateRunsOnTheExecutor: the editor's authenticate, through
// `awcp-ctl acp`, reaches the executor's agent — the method runs there,
// with the executor's credentials, before the session opens — and one
// the agent cannot run headless fails session/new in the agent's words,
// saying where it ran.
func TestAuthenticateRunsOnTheExecutor(t *testing.T) {
	slow(t)
	alone(t, "sets HOME (t.Setenv) for the daemon it starts")
	daemonHome, agentCmd := homeAgent(t, "tok-9")
	x := startExecutor(t, "", "--agent-acp", agentCmd, "--sandbox-allow", filepath.Join(daemonHome, ".fakeagent"))
	c := newCtl(t)
	ws := sampleWorkspace(t)
	ed := startEditor(t, c, x, "archive")
	ed.call(t, "1", "initialize", `{"protocolVersion":1,"clientCapabilities":{}}`)
	if a := ed.call(t, "2", "authenticate", `{"methodId":"fake-login"}`); a["error"] != nil {
		t.Fatalf("authenticate: %v", a)
	}
	opened := ed.call(t, "3", "session/new", `{"cwd":"`+ws+`","mcpServers":[]}`)
	res, _ := opened["result"].(map[string]any)
	sid, _ := res["sessionId"].(string)
	if sid == "" {
		t.Fatalf("session/new: %v", opened)
	}
	ed.call(t, "4", "session/prompt", `{"sessionId":"`+sid+`","prompt":[{"type":"text","text":"hi"}]}`)
	if said := ed.said(); !strings.Contains(said, "logged in as tok-9") || !strings.Contains(said, "authenticated fake-login") {
		t.Errorf("the agent did not run the editor's authenticate: %q", said)
	}

	if a := ed.call(t, "5", "authenticate", `{"methodId":"oauth-personal"}`); a["error"] != nil {
		t.Fatalf("authenticate: %v", a)
	}
	refused := ed.call(t, "6", "session/new", `{"cwd":"`+sampleWorkspace(t)+`","mcpServers":[]}`)
	e, _ := json.Marshal(refused["error"])
	if refused["error"] == nil || !strings.Contains(string(e), "oauth-personal needs a browser") || !strings.Contains(string(e), "ran on the executor") {
		t.Errorf("a method the executor's agent cannot run: %s", e)
	}

	// One that never answers (a login waiting for a browser) is cut off
	// at --auth-timeout, and session/new says so.
	slow := startEditorWith(t, c, x, "archive", "--auth-timeout", "2s")
	slow.call(t, "1", "initialize", `{"protocolVersion":1,"clientCapabilities":{}}`)
	slow.call(t, "2", "authenticate", `{"methodId":"hang-login"}`)
	started := time.Now()
	cut := slow.call(t, "3", "session/new", `{"cwd":"`+sampleWorkspace(t)+`","mcpServers":[]}`)
	e, _ = json.Marshal(cut["error"])
	if cut["error"] == nil || !strings.Contains(string(e), "did not end within 2s on the executor") {
		t.Errorf("an authenticate that never ends: %s", e)
	}
	if took := time.Since(started); took > 15*time.Second {
		t.Errorf("the cut-off took %s", took)
	}
}

// homeAgent is testdata/home_agent.py, the agent command that starts it
// (/usr/bin/python3: a version manager's shim would need its own grants),
// and a daemon's HOME holding its login, token, set for the test.
func homeAgent(t *testing.T, token string) (daemonHome, agentCmd string) {
	t.Helper()
	daemonHome = t.TempDir()
	t.Setenv("HOME", daemonHome)
	writeFiles(t, daemonHome, map[string]string{".fakeagent/token": token + "\n"})
	src, err := os.ReadFile(filepath.Join("testdata", "home_agent.py"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "home_agent.py")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return daemonHome, "/usr/bin/python3 " + script
}

// runFSDoctor runs awcp-fs doctor with a state dir of its own and args,
// and returns its exit code and output.
func runFSDoctor(t *testing.T, args ...string) (int, string) {
	t.Helper()
	args = append([]string{"doctor", "--state-dir", filepath.Join(t.TempDir(), "s")}, args...)
	out, err := exec.Command(filepath.Join(binDir, "awcp-fs"), args...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return code, string(out)
}

// editor is an ACP editor speaking to `awcp-ctl acp` line by line.
type editor struct {
	stdin io.WriteCloser
	lines chan string
	mu    sync.Mutex
	text  strings.Builder // the agent's message chunks
	// permitted are the options it chose for the agent's permission
	// requests, in order.
	permitted []string
	wrote     []string // the paths the agent wrote through the editor
}

func startEditor(t *testing.T, c *ctl, x *executor, transport string) *editor {
	t.Helper()
	return startEditorWith(t, c, x, transport)
}

// startEditorWith is startEditor with more flags of awcp-ctl acp.
func startEditorWith(t *testing.T, c *ctl, x *executor, transport string, flags ...string) *editor {
	t.Helper()
	cmd := c.command(append([]string{"acp", "--peer", x.url, "--transport", transport}, flags...)...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ed := &editor{stdin: stdin, lines: make(chan string, 64)}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			ed.lines <- sc.Text()
		}
		close(ed.lines)
	}()
	return ed
}

// call sends a request and returns its answer, gathering what the agent
// says meanwhile.
func (ed *editor) call(t *testing.T, id, method, params string) map[string]any {
	t.Helper()
	io.WriteString(ed.stdin, `{"jsonrpc":"2.0","id":`+id+`,"method":"`+method+`","params":`+params+"}\n")
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-ed.lines:
			if !ok {
				t.Fatalf("awcp-ctl acp closed before answering %s", method)
			}
			var m map[string]any
			json.Unmarshal([]byte(l), &m)
			if string(mustJSON(m["id"])) == id {
				return m
			}
			switch m["method"] {
			case "session/request_permission":
				ed.permit(t, m)
				continue
			case "fs/read_text_file", "fs/write_text_file":
				ed.serveFile(m)
				continue
			}
			if m["method"] == "session/update" {
				ed.mu.Lock()
				ed.text.WriteString(l)
				ed.mu.Unlock()
			}
		case <-deadline:
			t.Fatalf("no answer to %s", method)
		}
	}
}

// permit answers an agent's permission request as a person at the
// editor would: allow, once where offered.
func (ed *editor) permit(t *testing.T, req map[string]any) {
	t.Helper()
	var p struct {
		Options []struct {
			OptionID string `json:"optionId"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	json.Unmarshal(mustJSON(req["params"]), &p)
	chosen := ""
	for _, o := range p.Options {
		if o.Kind == "allow_once" || (chosen == "" && strings.HasPrefix(o.Kind, "allow")) {
			chosen = o.OptionID
		}
	}
	ed.mu.Lock()
	ed.permitted = append(ed.permitted, chosen)
	ed.mu.Unlock()
	io.WriteString(ed.stdin, `{"jsonrpc":"2.0","id":`+string(mustJSON(req["id"]))+`,"result":{"outcome":{"outcome":"selected","optionId":`+string(mustJSON(chosen))+`}}}`+"\n")
}

// serveFile answers the agent's fs/read_text_file and fs/write_text_file
// as an editor does, from and to its files (the editor's initialize
// offers both).
func (ed *editor) serveFile(req map[string]any) {
	var p struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	json.Unmarshal(mustJSON(req["params"]), &p)
	var result any = map[string]any{}
	var err error
	if req["method"] == "fs/write_text_file" {
		err = os.WriteFile(p.Path, []byte(p.Content), 0o644)
		ed.mu.Lock()
		ed.wrote = append(ed.wrote, p.Path)
		ed.mu.Unlock()
	} else {
		var b []byte
		b, err = os.ReadFile(p.Path)
		result = map[string]any{"content": string(b)}
	}
	reply := map[string]any{"jsonrpc": "2.0", "id": req["id"], "result": result}
	if err != nil {
		reply = map[string]any{"jsonrpc": "2.0", "id": req["id"], "error": map[string]any{"code": -32603, "message": err.Error()}}
	}
	ed.stdin.Write(append(mustJSON(reply), '\n'))
}

func (ed *editor) said() string {
	ed.mu.Lock()
	defer ed.mu.Unlock()
	return ed.text.String()
}
