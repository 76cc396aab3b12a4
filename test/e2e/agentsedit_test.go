package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The scripted model's edit: one line of the owner's notes changes.
var agentEdit = modelEdit{
	file:  "notes.txt",
	old:   "status: draft",
	new:   "status: reviewed by the agent",
	final: "I changed the status line of notes.txt to reviewed.",
}

const notesBefore = "# Notes\n\nstatus: draft\n\nkeep this line\n"

func notesAfter() string { return strings.Replace(notesBefore, agentEdit.old, agentEdit.new, 1) }

// agentsAtWork is what an executor's operator sets up for the three real
// agents against a model API at url: the credentials and gateway, by name,
// in an --agent-env-file (no key exists here: the scripted model takes
// any), Gemini CLI's settings (its auth type: it reads only a settings
// file for it), and each agent's command as docs/agents.md gives it.
type agentsAtWork struct {
	envFile   string
	geminiDir string // the operator's ~/.gemini, with Gemini CLI's settings
	modules   []string
}

func setUpAgentsAtWork(t *testing.T, modelURL string) *agentsAtWork {
	t.Helper()
	a := &agentsAtWork{}
	for _, pkgs := range [][]string{realAgentPackages, hostPackages} {
		m := nodeModules(t, pkgs...)
		a.modules = append(a.modules, m)
	}
	path := os.Getenv("PATH")
	for i := len(a.modules) - 1; i >= 0; i-- {
		path = filepath.Join(a.modules[i], "node_modules", ".bin") + ":" + path
	}
	t.Setenv("PATH", path)
	// Gemini CLI headless takes its auth type from its settings alone
	// (its environment's GOOGLE_GEMINI_BASE_URL says "gateway", which its
	// print mode refuses): the operator's ~/.gemini, granted to the
	// agents. A system settings file would not do: Gemini CLI skips one
	// whose directory is not root's, and in the agent's user namespace
	// none is.
	home := t.TempDir()
	t.Setenv("HOME", home)
	a.geminiDir = filepath.Join(home, ".gemini")
	writeFiles(t, a.geminiDir, map[string]string{"settings.json": `{"security":{"auth":{"selectedType":"gemini-api-key"}}}`})
	a.envFile = filepath.Join(t.TempDir(), "agents.env")
	env := strings.Join([]string{
		"ANTHROPIC_BASE_URL=" + modelURL,
		"ANTHROPIC_API_KEY=sk-ant-scripted",
		"GOOGLE_GEMINI_BASE_URL=" + modelURL,
		"GEMINI_API_KEY=scripted",
		"OPENAI_API_KEY=sk-scripted",
	}, "\n") + "\n"
	if err := os.WriteFile(a.envFile, []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

// serveFlags are awcp-fs serve's flags for the agents' credentials.
func (a *agentsAtWork) serveFlags() []string {
	return []string{"--agent-env-file", a.envFile, "--sandbox-allow", a.geminiDir + ":rw"}
}

// codexProvider is Codex's model provider for a gateway, as -c flags of
// codex-acp and codex (docs/agents.md).
func codexProvider(modelURL string) string {
	return `-c sandbox_mode=danger-full-access -c model_provider=gateway -c model=gpt-scripted -c 'model_providers.gateway={name="gateway",base_url="` + modelURL +
		`/v1",env_key="OPENAI_API_KEY",wire_api="responses",supports_websockets=false}'`
}

// realAgentsAtWork are the three ACP agents, each as --agent-acp, and
// whether it asks before it edits (Gemini CLI does; Claude's adapter lets
// its edits of the session's own directory through, and Codex in full
// access asks nothing).
func realAgentsAtWork(modelURL string) []struct {
	name, acp string
	asks      bool
} {
	return []struct {
		name, acp string
		asks      bool
	}{
		{"claude", "claude-agent-acp", false},
		{"gemini", "gemini --acp", true},
		{"codex", "codex-acp " + codexProvider(modelURL), false},
	}
}

// notesWorkspace is a project whose notes the agents edit.
func notesWorkspace(t *testing.T) string {
	ws := filepath.Join(t.TempDir(), "project")
	writeFiles(t, ws, map[string]string{"notes.txt": notesBefore, "src/main.go": "package main\n"})
	return ws
}

// edited fails unless the owner's notes are exactly as the agent's edit
// leaves them.
func edited(t *testing.T, ws, how string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ws, "notes.txt"))
	if err != nil || string(b) != notesAfter() {
		t.Errorf("%s: the owner's notes.txt is %q (%v), want the agent's edit", how, b, err)
	}
}

// nothingLeft fails unless no process of the installed agents runs, within
// 20 s.
func (a *agentsAtWork) nothingLeft(t *testing.T, how string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var left []string
		for _, m := range a.modules {
			left = append(left, processesRunning(m)...)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: the agent's processes outlived it: %v", how, left)
			return
		}
	}
}

// auditWrote fails unless the delegation's audit says one file written.
func auditWrote(t *testing.T, c *ctl, id, how string) {
	t.Helper()
	r := c.run("audit", id)
	if out := r.stdout + r.stderr; !strings.Contains(out, ", 1 written (") {
		t.Errorf("%s: audit:\n%s%s", how, r.stdout, r.stderr)
	}
}

// TestRealAgentsEdit: Claude Code's ACP adapter, Gemini CLI and Codex's ACP
// adapter, installed from the npm registry and started as installed in the
// executor's default sandbox, with their model API answered by a scripted
// server on loopback, each make the model's edit of the owner's file with
// their own tools, through each path a user takes: a one-shot export; a
// session whose permission is answered from another process (`awcp-ctl
// answer`), then closed; an editor through `awcp-ctl acp`. The owner's
// file holds the edit, the delegation is completed with the agent's own
// final words, the audit counts the write, and nothing of the agent is
// left running.
func TestRealAgentsEdit(t *testing.T) {
	slow(t)
	alone(t, "sets HOME and PATH (t.Setenv) for the real agents' CLIs it starts")
	model := startScriptedModel(t, agentEdit)
	a := setUpAgentsAtWork(t, model.url)
	for _, ag := range realAgentsAtWork(model.url) {
		t.Run(ag.name, func(t *testing.T) {
			t.Run("doctor", func(t *testing.T) {
				// With its credentials named, doctor opens a session.
				code, out := runFSDoctor(t, append(a.serveFlags(), "--agent-acp", ag.acp)...)
				if line := doctorLine(out, "agent session"); code != 0 || !strings.HasPrefix(line, "OK") {
					t.Errorf("awcp-fs doctor: exit %d\n%s", code, out)
				}
			})
			t.Run("one-shot", func(t *testing.T) {
				x := startExecutor(t, "", append(a.serveFlags(), "--agent-acp", ag.acp)...)
				c := newCtl(t)
				ws := notesWorkspace(t)
				r := c.run("export", ws, "--peer", x.url, "--prompt", "Mark the notes reviewed.")
				if r.code != 0 {
					t.Fatalf("export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
				edited(t, ws, "one-shot")
				d := c.only()
				if d.State != "completed" || !strings.Contains(d.Summary, agentEdit.final) {
					t.Errorf("one-shot: %s, summary %q", d.State, d.Summary)
				}
				auditWrote(t, c, d.ID, "one-shot")
				a.nothingLeft(t, "one-shot")
			})
			t.Run("session", func(t *testing.T) {
				x := startExecutor(t, "", append(a.serveFlags(), "--agent-acp", ag.acp, "--permission", "forward")...)
				c := newCtl(t)
				ws := notesWorkspace(t)
				r := c.run("export", ws, "--peer", x.url, "--prompt", "Mark the notes reviewed.", "--session", "new")
				m := regexp.MustCompile(`session (\S+) awaits`).FindStringSubmatch(r.stderr)
				if m == nil {
					t.Fatalf("export --session new: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
				id := m[1]
				if want := map[bool]int{true: 5, false: 3}[ag.asks]; r.code != want {
					t.Fatalf("export --session new: exit %d, want %d\n%s%s", r.code, want, r.stdout, r.stderr)
				}
				if r.code == 5 {
					// The agent asks before it writes: another process
					// answers, as a person reading the line would: allow,
					// once.
					opt := regexp.MustCompile(`(\S+) \(allow_once\)`).FindStringSubmatch(r.stderr)
					if opt == nil {
						t.Fatalf("the permission line names no allow_once option:\n%s", r.stderr)
					}
					r = c.run("answer", id, "--option", opt[1])
				}
				if r.code != 3 {
					t.Fatalf("the session's turn did not end awaiting the next prompt: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
				edited(t, ws, "session")
				if r := c.run("close", id); r.code != 0 {
					t.Fatalf("close: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
				r = c.run("output", id, "--block", "--timeout", "60")
				d := c.only()
				if r.code != 0 || d.State != "completed" || !strings.Contains(d.Summary, agentEdit.final) {
					t.Errorf("the closed session: output exit %d, %s, summary %q\n%s", r.code, d.State, d.Summary, r.stdout)
				}
				auditWrote(t, c, d.ID, "session")
				a.nothingLeft(t, "session")
			})
			t.Run("editor", func(t *testing.T) {
				x := startExecutor(t, "", append(a.serveFlags(), "--agent-acp", ag.acp)...)
				c := newCtl(t)
				ws := notesWorkspace(t)
				ed := startEditor(t, c, x, "live")
				ed.call(t, "1", "initialize", `{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}`)
				opened := ed.call(t, "2", "session/new", `{"cwd":"`+ws+`","mcpServers":[]}`)
				sid, _ := opened["result"].(map[string]any)["sessionId"].(string)
				if sid == "" {
					t.Fatalf("session/new: %s", mustJSON(opened))
				}
				done := ed.call(t, "3", "session/prompt", `{"sessionId":"`+sid+`","prompt":[{"type":"text","text":"Mark the notes reviewed."}]}`)
				if res, _ := done["result"].(map[string]any); res == nil || res["stopReason"] != "end_turn" {
					t.Fatalf("session/prompt: %s", mustJSON(done))
				}
				edited(t, ws, "editor")
				if said := ed.said(); !strings.Contains(said, "reviewed") {
					t.Errorf("the editor was not shown the agent's words: %s", said)
				}
				ed.stdin.Close()
				a.nothingLeft(t, "editor")
				t.Logf("the editor allowed %v, wrote %v", ed.permitted, ed.wrote)
			})
		})
	}
	if errs := model.errors(); len(errs) > 0 {
		t.Errorf("tool calls failed at the agents: %s", strings.Join(errs, "\n"))
	}
	t.Logf("model API requests: %d", len(model.requests()))
}

// headlessCLIs are the agent commands docs/agents.md gives for
// --agent-cmd: each CLI in its print mode, allowed to edit (in print mode
// nobody is there to ask) and, for Gemini CLI, trusting the work dir it
// is started in (it runs nothing headless in a folder it does not trust).
func headlessCLIs(modelURL string) map[string]string {
	return map[string]string{
		"claude": `claude -p --permission-mode acceptEdits "$AWCP_PROMPT"`,
		"gemini": `gemini --approval-mode auto_edit --skip-trust -p "$AWCP_PROMPT"`,
		"codex":  `codex exec --skip-git-repo-check ` + codexProvider(modelURL) + ` "$AWCP_PROMPT"`,
	}
}

// TestHeadlessCLIsEdit: each documented --agent-cmd, the CLI from the npm
// registry with its model API scripted on loopback, makes the model's edit
// in the owner's directory, over the live mount and as an archive, and the
// delegation is completed with the CLI's final words.
func TestHeadlessCLIsEdit(t *testing.T) {
	slow(t)
	alone(t, "sets HOME and PATH (t.Setenv) for the real agents' CLIs it starts")
	model := startScriptedModel(t, agentEdit)
	a := setUpAgentsAtWork(t, model.url)
	for name, cli := range headlessCLIs(model.url) {
		t.Run(name, func(t *testing.T) {
			x := startExecutor(t, cli, a.serveFlags()...)
			for _, transport := range []string{"sshfs", "archive"} {
				c := newCtl(t)
				ws := notesWorkspace(t)
				r := c.run("export", ws, "--peer", x.url, "--prompt", "Mark the notes reviewed.", "--transport", transport)
				if r.code != 0 {
					t.Fatalf("%s: export: exit %d\n%s%s", transport, r.code, r.stdout, r.stderr)
				}
				edited(t, ws, transport)
				if d := c.only(); d.State != "completed" || !strings.Contains(d.Summary, agentEdit.final) {
					t.Errorf("%s: %s, summary %q", transport, d.State, d.Summary)
				}
			}
			a.nothingLeft(t, name)
		})
	}
	if errs := model.errors(); len(errs) > 0 {
		t.Errorf("tool calls failed at the CLIs: %s", strings.Join(errs, "\n"))
	}
}

// TestAgentDelegatesToAgent: the loop people run, offline. Claude Code
// (the claude CLI, print mode) is the user's agent, with awcp's MCP server
// added as docs/agents.md says; its model (scripted) calls awcp's delegate
// tool on the project; awcp lends the project to an executor whose agent
// is Codex's ACP adapter, whose model (scripted too) edits the notes.
// The owner's file holds Codex's edit, the delegation is completed, and
// Claude Code's answer carries Codex's own final words back.
func TestAgentDelegatesToAgent(t *testing.T) {
	slow(t)
	alone(t, "sets HOME and PATH (t.Setenv) for the real agents' CLIs it starts")
	model := startScriptedModel(t, agentEdit)
	a := setUpAgentsAtWork(t, model.url)
	t.Setenv("PATH", binDir+":"+os.Getenv("PATH"))
	x := startExecutor(t, "", append(a.serveFlags(), "--agent-acp", "codex-acp "+codexProvider(model.url))...)
	c := newCtl(t)
	t.Setenv("AWCP_STATE_DIR", c.state) // what Claude Code starts inherits it
	t.Setenv("AWCP_PLAIN_HTTP", "1")
	ws := notesWorkspace(t)
	run := func(args ...string) (string, error) {
		cmd := exec.Command("claude", args...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "ANTHROPIC_BASE_URL="+model.url, "ANTHROPIC_API_KEY=sk-ant-scripted")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("mcp", "add", "awcp", "--", "awcp-ctl", "mcp", "--peer", x.url); err != nil {
		t.Fatalf("claude mcp add: %v\n%s", err, out)
	}
	started := time.Now()
	out, err := run("-p", "--allowedTools", "mcp__awcp__delegate", "--", "Have the executor mark the notes reviewed.")
	if err != nil {
		t.Fatalf("claude -p: %v\n%s", err, out)
	}
	t.Logf("claude -p answered in %s: %s", time.Since(started).Round(time.Millisecond), strings.TrimSpace(out))
	if !strings.Contains(out, "The executor's agent answered:") || !strings.Contains(out, agentEdit.final) {
		t.Errorf("Claude Code's answer does not carry Codex's words:\n%s", out)
	}
	edited(t, ws, "claude → awcp → codex")
	d := c.only()
	if d.State != "completed" || !strings.Contains(d.Summary, agentEdit.final) {
		t.Errorf("the delegation: %s, summary %q", d.State, d.Summary)
	}
	auditWrote(t, c, d.ID, "claude → awcp → codex")
	a.nothingLeft(t, "claude → awcp → codex")
	for _, p := range processesRunning(binDir) {
		if strings.Contains(p, "awcp-ctl mcp") {
			t.Errorf("awcp's MCP server outlived Claude Code: %s", p)
		}
	}
	if errs := model.errors(); len(errs) > 0 {
		t.Errorf("tool calls failed: %s", strings.Join(errs, "\n"))
	}
}
