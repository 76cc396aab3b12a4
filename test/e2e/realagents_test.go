package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The real agents people use, pinned, from the npm registry, with the
// Node.js they need (claude-agent-acp wants Node 22; Debian's is 20: the
// tests take node@22 from the npm registry, and put its bin first on
// PATH, as nvm or volta would).
var realAgents = []struct {
	name    string // agentInfo.name
	command string // --agent-acp, as docs/agents.md gives it, the package's bin on PATH
	// authMethods: the agent offers auth methods at initialize (Claude's
	// adapter offers none: its login is Claude Code's own, on disk).
	authMethods bool
	// checksLoginAtSession: without credentials, its session/new fails.
	checksLoginAtSession bool
}{
	{"@agentclientprotocol/claude-agent-acp", "claude-agent-acp", false, false},
	{"gemini-cli", "gemini --acp", true, true},
	{"codex-acp", "codex-acp", true, true},
}

var realAgentPackages = []string{"@agentclientprotocol/claude-agent-acp@0.101.0", "@google/gemini-cli@0.61.0", "@zed-industries/codex-acp@0.16.0", "node@22.23.3"}

// TestRealAgents: Claude Code (its ACP adapter), Gemini CLI and Codex
// (its ACP adapter), installed from the npm registry and started as
// installed (their node_modules/.bin launchers, symlinks to scripts whose
// #! names node) in the executor's default sandbox, with no API key. For
// each: awcp-fs doctor passes; an editor's initialize through `awcp-ctl
// acp` returns the agent's own name and auth methods; an editor's
// session/new over the live mount reaches the agent and, with its
// authenticate run on the executor, fails or opens in the agent's own
// words; and `export --session new` fails (exit 1, state error) with the
// agent's own auth error as text, within seconds.
func TestRealAgents(t *testing.T) {
	slow(t)
	alone(t, "sets HOME and PATH (t.Setenv) for the real agents' CLIs it starts")
	modules := nodeModules(t, realAgentPackages...)
	bin := filepath.Join(modules, "node_modules", ".bin")
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	if out, err := exec.Command("node", "--version").Output(); err != nil || !strings.HasPrefix(string(out), "v22.") {
		t.Fatalf("node from %s: %s %v", bin, out, err)
	}
	for _, a := range realAgents {
		t.Run(strings.Fields(a.command)[0], func(t *testing.T) {
			code, out := runFSDoctor(t, "--agent-acp", a.command)
			if line := doctorLine(out, "agent in sandbox"); !strings.HasPrefix(line, "OK") || !strings.Contains(line, a.name) {
				t.Fatalf("awcp-fs doctor --agent-acp %q: exit %d\n%s", a.command, code, out)
			}
			// Doctor opens a session: an agent that checks its login
			// there is found without one, in its words, with the way to
			// give it one; Claude's adapter checks only at a turn.
			session := doctorLine(out, "agent session")
			if a.checksLoginAtSession {
				if code != 1 || !strings.HasPrefix(session, "FAIL") || !strings.Contains(out, "--agent-env NAME") {
					t.Errorf("doctor of %s without credentials: exit %d\n%s", a.command, code, out)
				}
			} else if code != 0 || !strings.HasPrefix(session, "OK") {
				t.Errorf("doctor of %s: exit %d\n%s", a.command, code, out)
			}
			t.Logf("doctor: agent session: %s", session)

			x := startExecutor(t, "", "--agent-acp", a.command)
			// The executor asks its agent what it can do once, as it
			// starts (a node CLI, in its sandbox: seconds, more under the
			// suite's load); the editor's gateway waits 10 s for that and
			// then answers with the least. What is tested here is that
			// the agent's answer passes through, so it is awaited first.
			waitUntil(t, 60*time.Second, "the executor's ACP agent to answer initialize", func() bool {
				var m struct {
					AWCP struct {
						ACPAgent json.RawMessage `json:"acp_agent"`
						Error    string          `json:"acp_agent_error"`
					} `json:"awcp"`
				}
				resp, err := http.Get(x.url + "/manifest")
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				json.NewDecoder(resp.Body).Decode(&m)
				return len(m.AWCP.ACPAgent) > 0 || m.AWCP.Error != ""
			})
			c := newCtl(t)
			ed := startEditor(t, c, x, "live")
			init := ed.call(t, "1", "initialize", `{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}`)
			var res struct {
				Result struct {
					AgentInfo   struct{ Name string } `json:"agentInfo"`
					AuthMethods []struct {
						ID string `json:"id"`
					} `json:"authMethods"`
				} `json:"result"`
			}
			raw, _ := json.Marshal(init)
			json.Unmarshal(raw, &res)
			if res.Result.AgentInfo.Name != a.name || (len(res.Result.AuthMethods) > 0) != a.authMethods {
				t.Fatalf("initialize through awcp-ctl acp: %s", raw)
			}
			t.Logf("%s offers auth methods %v", a.name, res.Result.AuthMethods)
			method := "" // the one that can run headless, an API key's
			for _, m := range res.Result.AuthMethods {
				if method == "" || strings.Contains(m.ID, "api-key") || strings.Contains(m.ID, "apikey") {
					method = m.ID
				}
			}
			if method != "" {
				if auth := ed.call(t, "2", "authenticate", `{"methodId":"`+method+`"}`); auth["error"] != nil {
					t.Fatalf("authenticate: %v", auth)
				}
			}
			ws := sampleWorkspace(t)
			opened := ed.call(t, "3", "session/new", `{"cwd":"`+ws+`","mcpServers":[]}`)
			raw, _ = json.Marshal(opened)
			t.Logf("session/new after authenticate %q: %s", method, raw)
			if e, ok := opened["error"].(map[string]any); ok {
				// The agent's own refusal, from the executor: its login.
				if msg, _ := e["message"].(string); msg == "" || strings.Contains(msg, "session_expired") || strings.Contains(msg, "channel") {
					t.Errorf("session/new failed, not in the agent's words: %s", raw)
				}
			} else if r, _ := opened["result"].(map[string]any); r == nil || r["sessionId"] == nil {
				t.Errorf("session/new: %s", raw)
			} else if d := c.only(); d.State != "running" || !strings.Contains(c.run("status", d.ID).stdout, "(sshfs, rw)") {
				t.Errorf("the session's delegation is no running live mount: %+v", d)
			}

			// A driven session: a failure, in the agent's words.
			ws2 := sampleWorkspace(t)
			started := time.Now()
			r := c.run("export", ws2, "--peer", x.url, "--prompt", "say hello", "--session", "new")
			took := time.Since(started)
			out2 := r.stdout + r.stderr
			if r.code != 1 || !strings.Contains(out2, "error TASK_FAILED") || strings.Contains(out2, `{"code"`) {
				t.Errorf("export --session new with no API key: exit %d, want 1 in the agent's words\n%s", r.code, out2)
			}
			t.Logf("export --session new failed in %s: %s", took.Round(time.Millisecond), firstLineWith(out2, "error TASK_FAILED"))
			if took > 30*time.Second {
				t.Errorf("the failure took %s to be said", took)
			}

			// The editor goes: its sessions close, and every process of
			// every agent started from the install ends with them (codex's
			// native binary outlived its node wrapper once).
			ed.stdin.Close()
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				left := processesRunning(modules)
				if len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("the agent's processes outlived its sessions: %v", left)
					break
				}
			}
		})
	}
}

// processesRunning are the command lines of the processes whose command
// line names a path under dir.
func processesRunning(dir string) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), dir+"/") {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// firstLineWith is the first line of s holding sub.
func firstLineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// The hosts' own CLIs, pinned, from the npm registry.
var hostPackages = []string{"@anthropic-ai/claude-code@2.1.332", "@openai/codex@0.171.0", "@google/gemini-cli@0.61.0", "node@22.23.3"}

// TestHostsAndHeadlessCLIs: Claude Code, Gemini CLI and Codex as the
// delegator's host — each adds `awcp-ctl mcp` as docs/agents.md says, and
// the two whose CLI checks a server offline (Claude Code's `mcp list`,
// Gemini CLI's in a trusted folder) report it connected; Codex's `mcp
// list` only lists it, enabled — and the headless CLIs as an executor's
// --agent-cmd: with no credentials, the delegation fails in the CLI's own
// words (Claude Code's "Not logged in" is on its stdout).
func TestHostsAndHeadlessCLIs(t *testing.T) {
	slow(t)
	alone(t, "sets HOME and PATH (t.Setenv) for the real agents' CLIs it starts")
	modules := nodeModules(t, hostPackages...)
	home := t.TempDir()
	project := filepath.Join(home, "project")
	os.MkdirAll(project, 0o755)
	t.Setenv("HOME", home)
	t.Setenv("PATH", binDir+":"+filepath.Join(modules, "node_modules", ".bin")+":"+os.Getenv("PATH"))
	x := startExecutor(t, "echo hi")
	c := newCtl(t)
	t.Setenv("AWCP_STATE_DIR", c.state) // what the hosts start inherits it
	t.Setenv("AWCP_PLAIN_HTTP", "1")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = project
		cmd.Stdin = nil
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	run("claude", "mcp", "add", "awcp", "--", "awcp-ctl", "mcp", "--peer", x.url)
	if out := run("claude", "mcp", "list"); !strings.Contains(out, "awcp: awcp-ctl mcp --peer "+x.url+" - ✔ Connected") {
		t.Errorf("claude mcp list:\n%s", out)
	}
	run("gemini", "mcp", "add", "--scope", "user", "awcp", "awcp-ctl", "mcp", "--peer", x.url)
	// Gemini CLI runs no MCP server of a folder it does not trust: the
	// user trusts the project (its own prompt writes this file).
	writeFiles(t, home, map[string]string{".gemini/trustedFolders.json": `{"` + project + `": "TRUST_FOLDER"}`})
	if out := run("gemini", "mcp", "list"); !strings.Contains(out, "awcp: awcp-ctl mcp --peer "+x.url+" (stdio) - Connected") {
		t.Errorf("gemini mcp list:\n%s", out)
	}
	run("codex", "mcp", "add", "awcp", "--", "awcp-ctl", "mcp", "--peer", x.url)
	if out := run("codex", "mcp", "list"); !strings.Contains(out, "awcp") || !strings.Contains(out, "enabled") {
		t.Errorf("codex mcp list:\n%s", out)
	}

	for cli, words := range map[string]string{
		headlessCLIs("")["claude"]: "Not logged in",
		headlessCLIs("")["gemini"]: "GEMINI_API_KEY",
	} {
		x := startExecutor(t, cli)
		ws := sampleWorkspace(t)
		r := c.run("export", ws, "--peer", x.url, "--prompt", "say hello", "--transport", "archive")
		if out := r.stdout + r.stderr; r.code != 1 || !strings.Contains(firstLineWith(out, "error TASK_FAILED"), words) {
			t.Errorf("--agent-cmd %s with no credentials: exit %d, want 1 saying %q\n%s", cli, r.code, words, out)
		}
	}
}
