package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// sessionAgentExecutor runs an executor whose ACP agent (the official
// TypeScript SDK's) holds sessions over many turns:
// testdata/acp_session_agent.mjs.
func sessionAgentExecutor(t *testing.T, extra ...string) *executor {
	t.Helper()
	modules, script := sessionAgentScript(t)
	return startExecutor(t, "", append([]string{"--agent-acp", "exec node '" + script + "'", "--sandbox-allow", modules}, extra...)...)
}

// sessionAgentScript puts testdata/acp_session_agent.mjs beside the ACP
// SDK's node_modules, outside the system's paths: the agent's modules
// are the sandbox's to grant.
func sessionAgentScript(t *testing.T) (modules, script string) {
	t.Helper()
	modules = nodeModules(t, acpSDK)
	src, err := os.ReadFile(filepath.Join("testdata", "acp_session_agent.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(modules, "acp_session_agent.mjs")
	writeShared(t, script, src, 0o644)
	return modules, script
}

// mcpSessionTranscript is what testdata/mcp_session_client.mjs prints.
type mcpSessionTranscript struct {
	Exception  string   `json:"exception"`
	Tools      []string `json:"tools"`
	DuringTurn struct {
		Direct, Written bool
	} `json:"duringTurn"`
	Steps []struct {
		Name    string `json:"name"`
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
		Result  struct {
			DelegationID string `json:"delegation_id"`
			State        string `json:"state"`
			Session      *struct {
				Turn       int    `json:"turn"`
				TurnState  string `json:"turn_state"`
				StopReason string `json:"stop_reason"`
				Reply      string `json:"reply"`
				Awaiting   *struct {
					Kind, Question, RequestID string
					Options                   []struct {
						OptionID string `json:"option_id"`
						Kind     string `json:"kind"`
					} `json:"options"`
				} `json:"awaiting"`
			} `json:"session"`
			Error *struct{ Code, Message, Hint string } `json:"error"`
		} `json:"result"`
	} `json:"steps"`
	Stderr string `json:"stderr"`
}

// TestSessionOverMCP: an MCP client (the official TypeScript SDK) opens a
// session with a remote ACP agent through `awcp-ctl mcp` — delegate with
// session: true — on a live mount. The call returns when the agent awaits
// a permission (its writes of the turn already in the workspace);
// delegate_answer answers it, and the turn's reply comes back awaiting the
// next prompt; a follow-up delegate with session_id and an answer as text
// are further turns of the same agent process; delegate_close_session
// ends it, and a turn after that is session_expired. The executor is left
// with nothing.
func TestSessionOverMCP(t *testing.T) {
	slow(t)
	parallel(t)
	x := sessionAgentExecutor(t)
	mcpModules := nodeModules(t, mcpSDK)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	writeFiles(t, ws, map[string]string{"notes.txt": "on disk\n"})

	var tr mcpSessionTranscript
	runNode(t, mcpModules, "mcp_session_client.mjs", []string{
		"AWCP_CTL=" + filepath.Join(binDir, "awcp-ctl"), "STATE=" + c.state, "PEER=" + x.url, "WS=" + ws}, &tr)
	if tr.Exception != "" {
		t.Fatalf("the client failed: %s\nserver stderr:\n%s", tr.Exception, tr.Stderr)
	}
	for _, tool := range []string{"delegate_answer", "delegate_close_session"} {
		if !strings.Contains(strings.Join(tr.Tools, " "), tool) {
			t.Errorf("no %s tool: %v", tool, tr.Tools)
		}
	}
	if len(tr.Steps) != 9 {
		t.Fatalf("%d steps, want 9; stderr:\n%s", len(tr.Steps), tr.Stderr)
	}
	step := func(i int) string {
		s := tr.Steps[i]
		return s.Name + ": " + s.Text
	}
	awaitsPermission := func(i, turn int) {
		s := tr.Steps[i]
		ses := s.Result.Session
		if s.IsError || s.Result.State != "awaiting" || ses == nil || ses.Turn != turn || ses.TurnState != "running" ||
			ses.Awaiting == nil || ses.Awaiting.Kind != "permission" || ses.Awaiting.Question != "Edit main.go" ||
			len(ses.Awaiting.Options) == 0 || ses.Awaiting.Options[0].OptionID != "allow" || ses.Awaiting.Options[0].Kind != "allow_once" {
			t.Errorf("step %d should await a permission in turn %d:\n%s", i, turn, step(i))
		}
	}
	pid := ""
	awaitsInput := func(i, turn int, prompt, decision string) {
		s := tr.Steps[i]
		ses := s.Result.Session
		if s.IsError || s.Result.State != "awaiting" || ses == nil || ses.Turn != turn || ses.TurnState != "done" ||
			ses.StopReason != "end_turn" || ses.Awaiting == nil || ses.Awaiting.Kind != "input" {
			t.Errorf("step %d should have ended turn %d, awaiting the next prompt:\n%s", i, turn, step(i))
			return
		}
		m := regexp.MustCompile(`turn (\d) of process (\d+): ([^;]*); read "on disk\\n"; outside -32602; permission (\w+)`).FindStringSubmatch(ses.Reply)
		if m == nil || m[1] != string(rune('0'+turn)) || m[3] != prompt || m[4] != decision || (pid != "" && m[2] != pid) {
			t.Errorf("step %d: the agent's reply to turn %d (%q, %s, one process):\n%s", i, turn, prompt, decision, ses.Reply)
			return
		}
		pid = m[2]
		if ses.Awaiting.Question != ses.Reply {
			t.Errorf("step %d: the question awaiting an answer is not the agent's message: %q", i, ses.Awaiting.Question)
		}
	}
	awaitsPermission(0, 1)
	if !tr.DuringTurn.Direct || !tr.DuringTurn.Written {
		t.Errorf("the agent's writes were not in the workspace while it awaited: %+v", tr.DuringTurn)
	}
	awaitsInput(1, 1, "first", "allow")
	awaitsPermission(2, 2)
	awaitsInput(3, 2, "second", "allow") // answered "Allow": the option's name
	awaitsPermission(4, 3)
	awaitsInput(5, 3, "third", "reject")
	if s := tr.Steps[6]; s.Result.State != "awaiting" || !strings.Contains(s.Text, "AWAITING the next prompt") {
		t.Errorf("delegate_output of an awaiting session:\n%s", step(6))
	}
	if s := tr.Steps[7]; s.IsError || s.Result.State != "completed" {
		t.Errorf("delegate_close_session:\n%s", step(7))
	}
	if s := tr.Steps[8]; !s.IsError || s.Result.Error == nil || !strings.Contains(s.Result.Error.Message, "expired") {
		t.Errorf("a turn for a closed session:\n%s", step(8))
	}
	for _, f := range []string{"direct-1.txt", "turn-1.txt", "direct-3.txt", "turn-3.txt"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
			t.Errorf("the agent's %s is not in the workspace: %v", f, err)
		}
	}
	ds := c.status()
	if len(ds) != 1 || ds[0].State != "completed" {
		t.Fatalf("the session's delegation: %+v", ds)
	}
	r := c.run("status", ds[0].ID, "--json")
	for _, want := range []string{`"sessionDriven": true`, `"event": "channel.connected"`, `"event": "channel.permission_forwarded"`,
		`"answerer": "MCP client awcp-session-e2e"`, `"prompt": "second"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the session's record lacks %s:\n%s", want, r.stdout)
		}
	}
	waitWorkRootEmpty(t, x)
}

// TestSessionFromTheCommandLine: `export --session new` opens a session
// held by the daemon it starts and returns when the agent awaits its
// first permission; `answer --option` answers it and prints the turn's
// reply; `export --session ID` and `answer TEXT` are further turns of
// the same agent process, `permit` answers a session's request too;
// `close` ends it — done, the executor left with nothing — and a turn
// after that is refused as expired.
func TestSessionFromTheCommandLine(t *testing.T) {
	slow(t)
	parallel(t)
	x := sessionAgentExecutor(t)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	writeFiles(t, ws, map[string]string{"notes.txt": "on disk\n"})
	// A session that awaits is not ended: 5 while it awaits a permission
	// decision, 3 its next prompt; 0 once it completed.
	awaits := func(code int) func(r result, what string) result {
		return func(r result, what string) result {
			t.Helper()
			if r.code != code {
				t.Fatalf("%s: exit %d, want %d\n%s%s", what, r.code, code, r.stdout, r.stderr)
			}
			return r
		}
	}
	permission, prompt, must := awaits(5), awaits(3), awaits(0)
	r := permission(c.run("export", ws, "--peer", x.url, "--prompt", "first", "--session", "new"), "export --session new")
	m := regexp.MustCompile(`session (\S+) awaits a permission decision \(perm-1\): Edit main\.go`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("export --session new did not stop at the permission:\n%s", r.stderr)
	}
	id := m[1]
	if _, err := os.Stat(filepath.Join(ws, "direct-1.txt")); err != nil {
		t.Errorf("the agent's write of the running turn is not in the workspace: %v", err)
	}
	turnReply := regexp.MustCompile(`^turn (\d) of process (\d+): ([^;]*); read "on disk\\n"; outside -32602; permission (\w+)\n$`)
	pid := ""
	replied := func(r result, turn, prompt, decision string) {
		t.Helper()
		m := turnReply.FindStringSubmatch(r.stdout)
		if m == nil || m[1] != turn || m[3] != prompt || m[4] != decision || (pid != "" && m[2] != pid) {
			t.Fatalf("turn %s's reply (%s, %s, one process):\n%s%s", turn, prompt, decision, r.stdout, r.stderr)
		}
		pid = m[2]
		if !strings.Contains(r.stderr, "awaits your next prompt: awcp-ctl answer "+id) {
			t.Errorf("turn %s did not end awaiting the next prompt:\n%s", turn, r.stderr)
		}
	}
	replied(prompt(c.run("answer", id[:8], "--option", "allow"), "answer --option"), "1", "first", "allow")

	// A turn while none awaits an answer: refused, nothing queued.
	r = permission(c.run("export", "--session", id, "--prompt", "second"), "export --session ID")
	if !strings.Contains(r.stderr, "awaits a permission decision (perm-2)") {
		t.Fatalf("the second turn did not stop at its permission:\n%s", r.stderr)
	}
	if r := c.run("status"); !strings.Contains(r.stdout, "awaiting (a permission: perm-2)") {
		t.Errorf("status of a session awaiting a permission:\n%s", r.stdout)
	}
	if r := c.run("answer", id, "not now"); r.code != 2 || !strings.Contains(r.stderr, "error USAGE: ") || !strings.Contains(r.stderr, "awaits a permission decision") {
		t.Errorf("text for a pending permission: exit %d\n%s", r.code, r.stderr)
	}
	if r := c.run("export", "--session", id, "--prompt", "too soon"); r.code != 2 || !strings.Contains(r.stderr, "error USAGE: ") || !strings.Contains(r.stderr, "a turn is still running") {
		t.Errorf("a turn while one runs: exit %d\n%s", r.code, r.stderr)
	}
	must(c.run("permit", id, "perm-2", "reject"), "permit")
	// Awaiting is not ended: exit 3, as for any delegation still live.
	r = c.run("output", id, "--block", "--timeout", "60")
	if r.code != 3 || !strings.Contains(r.stdout, "session: turn 2 done end_turn") || !strings.Contains(r.stdout, "AWAITING the next prompt") ||
		!strings.Contains(r.stdout, "second; read") || !strings.Contains(r.stdout, "permission reject") {
		t.Errorf("output of the session after turn 2: exit %d\n%s", r.code, r.stdout)
	}
	r = permission(c.run("answer", id, "third"), "answer TEXT")
	if !strings.Contains(r.stderr, "(perm-3)") {
		t.Fatalf("the third turn did not stop at its permission:\n%s", r.stderr)
	}
	replied(prompt(c.run("answer", id, "--option", "allow"), "answer --option"), "3", "third", "allow")
	// The story in order, stdout and stderr as a terminal shows them: the
	// turn's last tool call, then its reply, then the turn's end.
	r = permission(c.run("answer", id, "fourth"), "answer TEXT, turn 4")
	if !strings.Contains(r.stderr, "(perm-4)") {
		t.Fatalf("the fourth turn did not stop at its permission:\n%s", r.stderr)
	}
	var story bytes.Buffer
	answer := c.command("answer", id, "--option", "allow")
	answer.Stdout, answer.Stderr = &story, &story
	answer.Run()
	order := []string{"tool: Run the tests", "turn 4 of process", "turn 4: done end_turn", "awaits your next prompt"}
	for i, at := 0, -1; i < len(order); i++ {
		j := strings.Index(story.String(), order[i])
		if j <= at {
			t.Fatalf("the turn's story out of order (%q not after %q):\n%s", order[i], order[max(i-1, 0)], story.String())
		}
		at = j
	}

	// A turn that hangs is cancelled alone (cancel --turn): the session
	// stays open for the next.
	hanging := c.start("answer", id, "hang")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if strings.Contains(c.run("logs", id).stdout, "hanging until cancelled") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hanging turn never ran:\n%s", c.run("logs", id).stdout)
		}
	}
	if r := c.run("cancel", id, "--turn"); r.code != 0 || !strings.Contains(r.stdout, "asked to cancel turn 5") {
		t.Fatalf("cancel --turn: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	hanging.Wait()
	if r := c.run("status", id, "--json"); !strings.Contains(r.stdout, `"stopReason": "cancelled"`) || !strings.Contains(r.stdout, `"state": "running"`) {
		t.Errorf("after cancel --turn the turn is not cancelled, or the session not open:\n%s", r.stdout)
	}

	r = must(c.run("close", id), "close")
	if !strings.Contains(r.stdout, "delegation "+id+" completed") {
		t.Errorf("close:\n%s%s", r.stdout, r.stderr)
	}
	if r := c.run("answer", id, "fourth"); r.code != 1 || !strings.Contains(r.stderr, "expired") {
		t.Errorf("a turn after the close: exit %d\n%s", r.code, r.stderr)
	}
	r = c.run("status", id, "--json")
	for _, want := range []string{`"answerer": "awcp-ctl answer by `, `"answerer": "awcp-ctl permit by `, `"by": "awcp-ctl by `, `"sessionDriven": true`,
		`"holds": "this request"`, `"how": "user"`, `"askedBy": "the session's agent, in turn 2"`, `"toolCallId": "edit-2"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the session's record lacks %s:\n%s", want, r.stdout)
		}
	}
	waitWorkRootEmpty(t, x)
}

// TestSessionOutlivesItsLease: a session's lease is renewed while the
// session is held, where a task's ends at its TTL. The executor grants 6 s
// at most and the session asks for 6 s; ten seconds on — its first lease
// and certificate long expired — the mount's connection is cut, and the
// next turn still works in the mount: it connected again with the
// renewed certificate. The record shows each renewal.
func TestSessionOutlivesItsLease(t *testing.T) {
	slow(t)
	parallel(t)
	x := sessionAgentExecutor(t, "--max-ttl", "6s")
	c := newCtl(t)
	ws := sampleWorkspace(t)
	writeFiles(t, ws, map[string]string{"notes.txt": "on disk\n"})
	r := c.run("export", ws, "--peer", x.url, "--prompt", "first", "--session", "new", "--ttl", "6s")
	m := regexp.MustCompile(`session (\S+) awaits a permission`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("export --session new: exit %d\n%s", r.code, r.stderr)
	}
	id := m[1]
	if r := c.run("answer", id, "--option", "allow"); r.code != 3 || !strings.Contains(r.stdout, "turn 1 of process") {
		t.Fatalf("turn 1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	time.Sleep(10 * time.Second)
	log, err := os.ReadFile(filepath.Join(c.state, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	port := regexp.MustCompile(`msg="ssh server listening" addr=\S*:(\d+)`).FindSubmatch(log)
	if port == nil {
		t.Fatalf("the daemon's SSH port is not in its log:\n%s", log)
	}
	if out, err := exec.Command("ss", "-K", "( sport = :"+string(port[1])+" )").CombinedOutput(); err != nil || !strings.Contains(string(out), ":"+string(port[1])) {
		t.Fatalf("cut the mount's connection: %v\n%s", err, out)
	}
	r = c.run("answer", id, "second")
	if r.code != 5 || !strings.Contains(r.stderr, "awaits a permission decision (perm-2)") {
		t.Fatalf("turn 2 after the first lease's end: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "direct-2.txt")); err != nil {
		t.Errorf("the agent's write of turn 2 did not reach the workspace: %v", err)
	}
	if r := c.run("answer", id, "--option", "allow"); r.code != 3 || !strings.Contains(r.stdout, `turn 2 of process`) || !strings.Contains(r.stdout, `read "on disk\n"`) {
		t.Fatalf("turn 2's reply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = c.run("status", id, "--json")
	if n := strings.Count(r.stdout, `"event": "lease.renewed"`); n < 2 || !strings.Contains(r.stdout, `"state": "running"`) {
		t.Errorf("the session's record after 10 s (%d renewals):\n%s", n, r.stdout)
	}
	if r := c.run("close", id); r.code != 0 || !strings.Contains(r.stdout, "completed") {
		t.Errorf("close: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitWorkRootEmpty(t, x)
}

// TestSessionWhoseAgentFailsFails: a session whose agent answers the
// prompt with its error (auth_required, as a real agent without
// credentials does) is a failure everywhere: export --session new exits 1
// with the agent's words as text (not its JSON), the delegation ends
// failed (status), and output says so with exit 1.
func TestSessionWhoseAgentFailsFails(t *testing.T) {
	parallel(t)
	x := sessionAgentExecutor(t)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	r := c.run("export", ws, "--peer", x.url, "--prompt", "fail-auth", "--session", "new")
	out := r.stdout + r.stderr
	if r.code != 1 || !strings.Contains(out, "Authentication required") || strings.Contains(out, `{"code"`) {
		t.Fatalf("export --session new to an agent that fails: exit %d, want 1 with its words as text\n%s", r.code, out)
	}
	d := c.only()
	if d.State != "error" || d.Failure == nil || d.Failure.Code != "TASK_FAILED" {
		t.Errorf("the failed session's delegation: %+v", d)
	}
	o := c.run("output", d.ID)
	if o.code != 1 || !strings.Contains(o.stdout+o.stderr, "Authentication required") {
		t.Errorf("output of the failed session: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
}

// TestSessionToATaskExecutor: `export --session new` to an executor whose
// agent runs tasks and that takes no rounds (--round-wait 0) fails at
// once with DEP_MISSING and its hint — no fall back to the archive (which
// would not hold a session either), no JSON-RPC object in what the user
// reads. (With rounds, its default, the session is its rounds:
// TestSessionOfRoundsFromTheCommandLine.)
func TestSessionToATaskExecutor(t *testing.T) {
	parallel(t)
	x := startExecutor(t, "echo task", "--round-wait", "0")
	c := newCtl(t)
	ws := sampleWorkspace(t)
	r := c.run("export", ws, "--peer", x.url, "--prompt", "p", "--session", "new", "--ssh-listen", "127.0.0.1:0")
	out := r.stdout + r.stderr
	if r.code == 0 || !strings.Contains(out, "DEP_MISSING: this executor takes no rounds") || !strings.Contains(out, "awcp-ctl export") {
		t.Fatalf("a session to a task executor without rounds: exit %d\n%s", r.code, out)
	}
	if strings.Contains(out, "fell back to archive") || strings.Contains(out, `{"code"`) {
		t.Errorf("it fell back, or shows JSON-RPC:\n%s", out)
	}
}

// TestStartedDaemonGoesWhenIdle: `export --session new` starts a daemon
// to hold the session, says so and when it stops, and that daemon exits
// by itself once its last delegation has ended (here after 2 s idle:
// AWCP_DAEMON_IDLE), where it ran on unseen.
func TestStartedDaemonGoesWhenIdle(t *testing.T) {
	slow(t)
	parallel(t)
	x := sessionAgentExecutor(t)
	c := newCtl(t)
	c.env = append(c.env, "AWCP_DAEMON_IDLE=2s")
	ws := sampleWorkspace(t)
	r := c.run("export", ws, "--peer", x.url, "--prompt", "slow", "--session", "new")
	if !strings.Contains(r.stderr, "awcp: started the daemon") || !strings.Contains(r.stderr, "it stops 2s after its last delegation ends") {
		t.Fatalf("export --session new did not say it started a daemon, and when it stops:\n%s", r.stderr)
	}
	id := c.only().ID
	time.Sleep(4 * time.Second) // the session is live: the daemon stays
	if c.signalDaemon(0) == 0 {
		t.Fatal("the daemon exited while its session was live")
	}
	if r := c.run("close", id); r.code != 0 {
		t.Fatalf("close: exit %d\n%s", r.code, r.stderr)
	}
	for deadline := time.Now().Add(20 * time.Second); c.signalDaemon(0) != 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon still runs 20 s after its last delegation ended")
		}
	}
}

// A session that fails to open fails export --session new --json too:
// exit 1 beside the record that says error, not 0.
func TestSessionThatFailsToOpenFailsInJSON(t *testing.T) {
	parallel(t)
	x := startExecutor(t, "", "--agent-acp", `sh -c 'echo "Error: no API key" >&2; exit 1'`)
	c := newCtl(t)
	r := c.run("export", sampleWorkspace(t), "--peer", x.url, "--prompt", "hi", "--session", "new", "--json")
	if r.code != 1 || !strings.Contains(r.stdout, `"state": "error"`) {
		t.Errorf("export --session new --json of a session that failed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestSessionClosedWhileItAsks: a session closed while its agent awaits a
// permission decision ends completed, and its record says what happened —
// closed with that request unanswered — whatever the agent's last words.
func TestSessionClosedWhileItAsks(t *testing.T) {
	slow(t)
	parallel(t)
	x := sessionAgentExecutor(t)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	writeFiles(t, ws, map[string]string{"notes.txt": "on disk\n"})
	r := c.run("export", ws, "--peer", x.url, "--prompt", "first", "--session", "new")
	m := regexp.MustCompile(`session (\S+) awaits a permission decision \(perm-1\): (Edit main\.go)`).FindStringSubmatch(r.stderr)
	if r.code != 5 || m == nil {
		t.Fatalf("export --session new: exit %d\n%s", r.code, r.stderr)
	}
	if r := c.run("close", m[1]); r.code != 0 {
		t.Fatalf("close: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	c.run("output", m[1], "--block", "--timeout", "60")
	d := c.only()
	st := c.run("status", d.ID).stdout
	if d.State != "completed" || !strings.Contains(st, "note: closed while the agent awaited a permission decision, left unanswered: Edit main.go") {
		t.Errorf("a session closed while it asked: %s\n%s", d.State, st)
	}
	waitWorkRootEmpty(t, x)
}

// TestSessionOfRoundsFromTheCommandLine: --session is not ACP's alone. An
// executor whose agent is a command takes a session as rounds: each
// answer runs the command again, with the new prompt, on the same lent
// workspace (over the live mount: each round's edit is on the owner's
// side as it is made), and close ends it.
func TestSessionOfRoundsFromTheCommandLine(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `echo "$AWCP_PROMPT" >> rounds.txt; echo "did: $AWCP_PROMPT"`)
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"rounds.txt": "start\n"})
	r := c.run("export", ws, "--peer", x.url, "--transport", "live", "--prompt", "first", "--session", "new")
	m := regexp.MustCompile(`session (\S+) awaits your next prompt`).FindStringSubmatch(r.stderr)
	if r.code != 3 || m == nil || strings.TrimSpace(r.stdout) != "did: first" {
		t.Fatalf("export --session new to a command agent: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := m[1]
	for _, prompt := range []string{"second", "third"} {
		r = c.run("answer", id, prompt)
		if r.code != 3 || strings.TrimSpace(r.stdout) != "did: "+prompt {
			t.Fatalf("answer %q: exit %d\n%s%s", prompt, r.code, r.stdout, r.stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "rounds.txt")); !strings.HasSuffix(string(b), prompt+"\n") {
			t.Errorf("after round %q the owner's rounds.txt is %q", prompt, b)
		}
	}
	r = c.run("close", id)
	if r.code != 0 || !strings.Contains(r.stdout, "completed") {
		t.Fatalf("close: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "rounds.txt")); string(b) != "start\nfirst\nsecond\nthird\n" {
		t.Errorf("the owner's rounds.txt: %q", b)
	}
}
