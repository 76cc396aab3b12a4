package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// editorTranscript is what testdata/acp_editor.mjs prints.
type editorTranscript struct {
	Exception string `json:"exception"`
	Init      struct {
		AgentInfo struct {
			Name string `json:"name"`
		} `json:"agentInfo"`
	} `json:"init"`
	Reads            []string `json:"reads"`
	Writes           []string `json:"writes"`
	Permissions      []string `json:"permissions"`
	Text             string   `json:"text"`
	Turns            []string `json:"turns"`
	DirectSeenInTurn []bool   `json:"directSeenInTurn"`
	Cancelled        string   `json:"cancelled"`
	CancelMs         int      `json:"cancelMs"`
	UnknownSession   string   `json:"unknownSession"`
	SessionID        string   `json:"sessionId"`
	SecondSessionID  string   `json:"secondSessionId"`
	Parallel         []string `json:"parallel"`
	ClosedSession    string   `json:"closedSession"`
	Slow             string   `json:"slow"`
	AfterSlow        string   `json:"afterSlow"`
	ExitCode         *int     `json:"exitCode"`
	ExitMs           int      `json:"exitMs"`
	Stderr           string   `json:"stderr"`
}

// TestEditorSessionThroughTheGateway: an editor on the official ACP SDK
// starts `awcp-ctl acp` as its agent; its session is a live-mount
// delegation to an executor whose ACP agent (the official SDK's too) holds
// it for every turn in one process. The agent's own writes show in the
// editor's project during the turn; its reads come from the editor's
// buffer, its writes are done by the editor at the editor's paths; a path
// outside is refused before the editor hears of it; the editor answers
// the permission; session/cancel ends a hanging turn and the next turn
// works; closing the gateway's stdin ends it, and the executor is left
// with no mount and no work dir.
func TestEditorSessionThroughTheGateway(t *testing.T) {
	slow(t)
	parallel(t)
	x := sessionAgentExecutor(t)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	writeFiles(t, ws, map[string]string{"notes.txt": "on disk\n", "main.go": "package main\n"})
	ws2 := filepath.Join(t.TempDir(), "second")
	writeFiles(t, ws2, map[string]string{"notes.txt": "second\n"})

	// While the slow turn runs, every connection to the executor's port is
	// reset at both ends (ss -K): the gateway's channel and the
	// delegator's event streams.
	mark := t.TempDir()
	_, port, _ := strings.Cut(x.addr, ":")
	cut := make(chan string, 1)
	go func() {
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(mark, "slow-started")); err == nil {
				out, err := exec.Command("ss", "-K", "( dport = :"+port+" or sport = :"+port+" )").CombinedOutput()
				cut <- fmt.Sprintf("%v %s", err, out)
				return
			}
		}
		cut <- "never cut"
	}()
	var tr editorTranscript
	runNode(t, nodeModules(t, acpSDK), "acp_editor.mjs", []string{"AWCP_CTL=" + filepath.Join(binDir, "awcp-ctl"), "STATE=" + c.state, "PEER=" + x.url, "WS=" + ws, "WS2=" + ws2, "MARK=" + mark}, &tr)
	if r := <-cut; !strings.Contains(r, "<nil>") || !strings.Contains(r, ":"+port) {
		t.Fatalf("the cut: %s", r)
	}
	if tr.Exception != "" {
		t.Fatalf("the editor failed: %s\ngateway stderr:\n%s", tr.Exception, tr.Stderr)
	}
	if tr.Init.AgentInfo.Name != "awcp-session-agent" {
		t.Errorf("the editor's initialize was not answered with the remote agent's: %+v", tr.Init)
	}
	if want := []string{"end_turn", "end_turn", "end_turn", "end_turn", "end_turn"}; !slices.Equal(tr.Turns, want) {
		t.Errorf("turns ended %v, want %v", tr.Turns, want)
	}
	pids := map[string]bool{}
	for _, m := range regexp.MustCompile(`turn (\d) of process (\d+): ([^;]*); read "the editor's unsaved buffer"; outside -32602; permission allow`).FindAllStringSubmatch(tr.Text, -1) {
		pids[m[2]] = true
	}
	// After the cut the slow turn ended once, and the next turn is the
	// one after it: nothing was sent to the agent twice.
	if tr.Slow != "end_turn" || tr.AfterSlow != "end_turn" || strings.Count(tr.Text, "slow turn 7 done") != 1 ||
		strings.Count(tr.Text, "slow turn 7 started") != 1 || !strings.Contains(tr.Text, "turn 8 of process") {
		t.Errorf("the turn the channel was cut in (%q, then %q):\n%s", tr.Slow, tr.AfterSlow, tr.Text)
	}
	if !strings.Contains(tr.Stderr, "session channel dropped; reconnecting") || !strings.Contains(tr.Stderr, "session channel back") {
		t.Errorf("the gateway never lost and got back its channel:\n%s", tr.Stderr)
	}
	if len(pids) != 1 || strings.Count(tr.Text, "read \"the editor's unsaved buffer\"") != 7 || !strings.Contains(tr.Text, "turn 9 of process") {
		t.Errorf("the agent's turns in the first session (one process, reads from the buffer, outside refused, permission allowed):\n%s", tr.Text)
	}
	// The second session: its own delegation and agent process, in its own
	// project, at the same time; closed, it is expired.
	second := regexp.MustCompile(`turn 1 of process (\d+): in the second project; read "second\\n"`).FindStringSubmatch(tr.Text)
	if second == nil || pids[second[1]] || !slices.Equal(tr.Parallel, []string{"end_turn", "end_turn"}) {
		t.Errorf("the second session (%v, %v):\n%s", second, tr.Parallel, tr.Text)
	}
	// Each agent has a PID namespace of its own, and both made their
	// session id of their pid: the editor still sees two.
	if tr.SessionID == "" || tr.SessionID == tr.SecondSessionID {
		t.Errorf("the editor's two sessions have ids %q and %q", tr.SessionID, tr.SecondSessionID)
	}
	if !strings.Contains(tr.ClosedSession, "session_expired") {
		t.Errorf("a prompt to a closed session: %q", tr.ClosedSession)
	}
	for i := 1; i <= 4; i++ {
		if b, err := os.ReadFile(filepath.Join(ws, "turn-"+string(rune('0'+i))+".txt")); err != nil || !strings.Contains(string(b), "through the editor") {
			t.Errorf("turn-%d.txt in the project: %q %v", i, b, err)
		}
	}
	for _, p := range append(append(tr.Reads, tr.Writes...), tr.Permissions...) {
		if !strings.HasPrefix(p, ws+"/") && !strings.HasPrefix(p, ws2+"/") {
			t.Errorf("the editor was sent a path that is not its projects': %s", p)
		}
	}
	if len(tr.DirectSeenInTurn) != 8 || slices.Contains(tr.DirectSeenInTurn, false) {
		t.Errorf("the agent's own writes in the editor's project during each turn: %v", tr.DirectSeenInTurn)
	}
	if tr.Cancelled != "cancelled" || tr.CancelMs > 5000 {
		t.Errorf("the hanging turn after session/cancel: %q in %d ms", tr.Cancelled, tr.CancelMs)
	}
	if !strings.Contains(tr.UnknownSession, "session_expired") {
		t.Errorf("a prompt to no session: %q", tr.UnknownSession)
	}
	if tr.ExitCode == nil || *tr.ExitCode != 0 || tr.ExitMs > 30000 {
		t.Errorf("the gateway after its stdin closed: exit %v in %d ms\n%s", tr.ExitCode, tr.ExitMs, tr.Stderr)
	}
	ds := c.status()
	if len(ds) != 2 || ds[0].State != "completed" || ds[1].State != "completed" {
		t.Errorf("the sessions' delegations: %+v", ds)
	}
	// Every permission the editor answered is on the delegation's record:
	// asked by the agent, for its tool call, decided by the editor.
	r := c.run("status", ds[0].ID, "--json")
	// Seed 002's channel: its identity, and what became of it.
	for _, want := range []string{`"channelId": "ch-`, `"peerRole": "executor"`, `"fs.readTextFile"`, `"event": "channel.connected"`,
		`"event": "channel.disconnected"`, `"event": "channel.resumed"`, `"event": "channel.permission_forwarded"`, `"event": "channel.permission_returned"`,
		`"detail": "Edit main.go: selected allow"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the first session's record lacks %s", want)
		}
	}
	if strings.Contains(r.stdout, "sessionKey") || !strings.Contains(r.stdout, `"session": "acp"`) {
		t.Errorf("status --json shows the session's key, or not that it is a session:\n%s", r.stdout)
	}
	if n := strings.Count(r.stdout, `"decidedBy": "editor"`); n != 7 || !strings.Contains(r.stdout, `"title": "Edit main.go"`) ||
		strings.Count(r.stdout, `"how": "user"`) != 7 || strings.Count(r.stdout, `"holds": "this request"`) != 7 {
		t.Errorf("the first session's permissions on record (%d decided by the editor):\n%s", n, r.stdout)
	}
	waitWorkRootEmpty(t, x)
}

// TestEditorSessionOutlivesItsGateway: the editor's agent command is
// killed (SIGKILL) while a turn runs; the editor starts it again and
// session/load takes the session over — the same delegation, agent
// process and live mount (the gateway listens for the mount where the
// old one did). The running turn ran on, and its end reaches the new
// editor; a further turn works; a session/resume of an unknown session
// is session_expired. The delegation was not ended meanwhile.
func TestEditorSessionOutlivesItsGateway(t *testing.T) {
	slow(t)
	parallel(t)
	x := sessionAgentExecutor(t)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	writeFiles(t, ws, map[string]string{"notes.txt": "on disk\n"})
	var tr struct {
		Exception   string    `json:"exception"`
		FirstTurn   string    `json:"firstTurn"`
		FirstExit   string    `json:"firstExit"`
		UnknownLoad string    `json:"unknownLoad"`
		SlowEndSeen bool      `json:"slowEndSeen"`
		AfterTurn   string    `json:"afterTurn"`
		SecondExit  any       `json:"secondExit"`
		Text        [2]string `json:"text"`
		Stderr      [2]string `json:"stderr"`
		Init        struct {
			AgentCapabilities struct {
				LoadSession bool `json:"loadSession"`
			} `json:"agentCapabilities"`
		} `json:"init"`
	}
	runNode(t, nodeModules(t, acpSDK), "acp_editor_reload.mjs", []string{"AWCP_CTL=" + filepath.Join(binDir, "awcp-ctl"), "STATE=" + c.state,
		"PEER=" + x.url, "WS=" + ws, "SSH=" + freeAddr(t)}, &tr)
	if tr.Exception != "" {
		t.Fatalf("the editor failed: %s\nfirst gateway:\n%s\nsecond gateway:\n%s", tr.Exception, tr.Stderr[0], tr.Stderr[1])
	}
	if tr.FirstTurn != "end_turn" || tr.FirstExit != "SIGKILL" || !strings.Contains(tr.Text[0], "slow turn 2 started") {
		t.Fatalf("the first gateway's turns (%q, exit %q):\n%s", tr.FirstTurn, tr.FirstExit, tr.Text[0])
	}
	if !tr.Init.AgentCapabilities.LoadSession || !strings.Contains(tr.UnknownLoad, "session_expired") {
		t.Errorf("the second gateway's initialize (loadSession %v) and an unknown session's resume: %q", tr.Init.AgentCapabilities.LoadSession, tr.UnknownLoad)
	}
	pid := regexp.MustCompile(`turn 1 of process (\d+)`).FindStringSubmatch(tr.Text[0])
	if !tr.SlowEndSeen || strings.Count(tr.Text[1], "slow turn 2 done") != 1 || tr.AfterTurn != "end_turn" || pid == nil ||
		!strings.Contains(tr.Text[1], "turn 3 of process "+pid[1]+": after") {
		t.Errorf("the session through the second gateway (slow end seen %v, next turn %q):\n%s\nits log:\n%s", tr.SlowEndSeen, tr.AfterTurn, tr.Text[1], tr.Stderr[1])
	}
	if fmt.Sprint(tr.SecondExit) != "0" {
		t.Errorf("the second gateway exited %v", tr.SecondExit)
	}
	ds := c.status()
	if len(ds) != 1 || ds[0].State != "completed" {
		t.Fatalf("the session's delegation: %+v", ds)
	}
	r := c.run("status", ds[0].ID, "--json")
	if !strings.Contains(r.stdout, "taken over by a new gateway") {
		t.Errorf("the record does not say the session was taken over:\n%s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(ws, "direct-3.txt")); err != nil {
		t.Errorf("the agent's write after the take-over is not in the workspace: %v", err)
	}
	waitWorkRootEmpty(t, x)
}
