package acp

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
)

// sessionAgentEnv makes this test binary the session agent below.
const sessionAgentEnv = "AWCP_TEST_SESSION_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(sessionAgentEnv) != "" {
		a := &sessionAgent{}
		a.conn = acpsdk.NewAgentSideConnection(a, os.Stdout, os.Stdin)
		<-a.conn.Done()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sessionAgent is an ACP agent that keeps one session over many turns.
// Each turn it reads notes.txt of its cwd and says what it read, writes
// turn-N.txt, reads a path outside its cwd, asks permission, and says
// how many turns it has had.
type sessionAgent struct {
	testAgent
	conn  *acpsdk.AgentSideConnection
	mu    sync.Mutex
	cwd   string
	turns int
}

func (a *sessionAgent) Initialize(context.Context, acpsdk.InitializeRequest) (acpsdk.InitializeResponse, error) {
	return acpsdk.InitializeResponse{ProtocolVersion: acpsdk.ProtocolVersionNumber,
		AgentInfo: &acpsdk.Implementation{Name: "session-test-agent", Version: "7"}}, nil
}

func (a *sessionAgent) NewSession(_ context.Context, r acpsdk.NewSessionRequest) (acpsdk.NewSessionResponse, error) {
	a.mu.Lock()
	a.cwd = r.Cwd
	a.mu.Unlock()
	return acpsdk.NewSessionResponse{SessionId: "sess-1"}, nil
}

func (a *sessionAgent) Prompt(ctx context.Context, r acpsdk.PromptRequest) (acpsdk.PromptResponse, error) {
	a.mu.Lock()
	a.turns++
	n, cwd := a.turns, a.cwd
	a.mu.Unlock()
	say := func(s string) {
		a.conn.SessionUpdate(ctx, acpsdk.SessionNotification{SessionId: r.SessionId, Update: acpsdk.UpdateAgentMessageText(s + "\n")})
	}
	read, err := a.conn.ReadTextFile(ctx, acpsdk.ReadTextFileRequest{SessionId: r.SessionId, Path: filepath.Join(cwd, "notes.txt")})
	say(fmt.Sprintf("turn %d: %s; read %q (%v)", n, r.Prompt[0].Text.Text, read.Content, err))
	_, err = a.conn.WriteTextFile(ctx, acpsdk.WriteTextFileRequest{SessionId: r.SessionId, Path: filepath.Join(cwd, fmt.Sprintf("turn-%d.txt", n)), Content: "written in turn " + fmt.Sprint(n)})
	say(fmt.Sprintf("write: %v", err))
	_, err = a.conn.ReadTextFile(ctx, acpsdk.ReadTextFileRequest{SessionId: r.SessionId, Path: "/etc/hostname"})
	say(fmt.Sprintf("outside: %v", err != nil))
	perm, err := a.conn.RequestPermission(ctx, acpsdk.RequestPermissionRequest{SessionId: r.SessionId,
		ToolCall: acpsdk.ToolCallUpdate{ToolCallId: "t1", Locations: []acpsdk.ToolCallLocation{{Path: filepath.Join(cwd, "x.go")}}},
		Options:  []acpsdk.PermissionOption{{OptionId: "yes", Name: "Yes", Kind: acpsdk.PermissionOptionKindAllowOnce}}})
	if err == nil && perm.Outcome.Selected != nil {
		say("permission: " + string(perm.Outcome.Selected.OptionId))
	}
	say(fmt.Sprintf("turns so far: %d", n))
	return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
}

// editor is the ACP client at the gateway's end: it declares fs, answers
// reads from its buffer, records writes, and allows what is asked.
type editor struct {
	mu      sync.Mutex
	text    strings.Builder
	reads   []string
	writes  map[string]string
	perms   []string
	buffers map[string]string
}

func (e *editor) ReadTextFile(_ context.Context, r acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reads = append(e.reads, r.Path)
	if b, ok := e.buffers[r.Path]; ok {
		return acpsdk.ReadTextFileResponse{Content: b}, nil
	}
	return acpsdk.ReadTextFileResponse{}, acpsdk.NewInvalidParams("no buffer")
}

func (e *editor) WriteTextFile(_ context.Context, r acpsdk.WriteTextFileRequest) (acpsdk.WriteTextFileResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writes[r.Path] = r.Content
	return acpsdk.WriteTextFileResponse{}, nil
}

func (e *editor) RequestPermission(_ context.Context, r acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	e.mu.Lock()
	for _, l := range r.ToolCall.Locations {
		e.perms = append(e.perms, l.Path)
	}
	e.mu.Unlock()
	return acpsdk.RequestPermissionResponse{Outcome: acpsdk.NewRequestPermissionOutcomeSelected(r.Options[0].OptionId)}, nil
}

func (e *editor) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	if c := n.Update.AgentMessageChunk; c != nil && c.Content.Text != nil {
		e.mu.Lock()
		e.text.WriteString(c.Content.Text.Text)
		e.mu.Unlock()
	}
	return nil
}

func (e *editor) CreateTerminal(context.Context, acpsdk.CreateTerminalRequest) (acpsdk.CreateTerminalResponse, error) {
	return acpsdk.CreateTerminalResponse{}, acpsdk.NewMethodNotFound("terminal/create")
}
func (e *editor) KillTerminal(context.Context, acpsdk.KillTerminalRequest) (acpsdk.KillTerminalResponse, error) {
	return acpsdk.KillTerminalResponse{}, nil
}
func (e *editor) TerminalOutput(context.Context, acpsdk.TerminalOutputRequest) (acpsdk.TerminalOutputResponse, error) {
	return acpsdk.TerminalOutputResponse{}, nil
}
func (e *editor) ReleaseTerminal(context.Context, acpsdk.ReleaseTerminalRequest) (acpsdk.ReleaseTerminalResponse, error) {
	return acpsdk.ReleaseTerminalResponse{}, nil
}
func (e *editor) WaitForTerminalExit(context.Context, acpsdk.WaitForTerminalExitRequest) (acpsdk.WaitForTerminalExitResponse, error) {
	return acpsdk.WaitForTerminalExitResponse{}, nil
}

// A session delegation relays an editor's session to one agent process:
// four turns keep the agent's own session; the agent's reads come from
// the editor's buffer and its writes go to the editor, at the editor's
// paths; a path outside the work dir is refused before the editor hears
// of it; a permission is the editor's to answer; closing the channel ends
// the session, done, with the agent gone.
func TestSessionRelaysFourTurns(t *testing.T) {
	wd := workDir(t)
	os.WriteFile(filepath.Join(wd, "notes.txt"), []byte("on disk\n"), 0o644)
	const project = "/home/ana/project"
	channels := make(chan control.SessionChannel, 1)
	gatewayEnd, executorEnd := net.Pipe()
	channels <- control.SessionChannel{Conn: executorEnd}
	w := Worker{Command: sessionAgentEnv + "=1 exec '" + os.Args[0] + "'", KillGrace: time.Second}
	var progress []string
	var pmu sync.Mutex
	h := agent.Hooks{Update: func(u agent.Update) { pmu.Lock(); progress = append(progress, u.Message); pmu.Unlock() }}
	type outcome struct {
		res *agent.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := w.Session(context.Background(), agent.Task{DelegationID: "dlg_s", WorkDir: wd, AccessMode: "rw"}, h, channels, 10*time.Second)
		done <- outcome{res, err}
	}()

	ed := &editor{writes: map[string]string{}, buffers: map[string]string{project + "/notes.txt": "unsaved buffer"}}
	conn := acpsdk.NewClientSideConnection(ed, gatewayEnd, gatewayEnd)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	init, err := conn.Initialize(ctx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber,
		ClientCapabilities: acpsdk.ClientCapabilities{Fs: acpsdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}}})
	if err != nil || init.AgentInfo == nil || init.AgentInfo.Name != "session-test-agent" {
		t.Fatalf("initialize: %+v %v", init, err)
	}
	sess, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: project, McpServers: []acpsdk.McpServer{}})
	if err != nil || sess.SessionId != "sess-1" {
		t.Fatalf("session/new: %+v %v", sess, err)
	}
	for i := 1; i <= 4; i++ {
		resp, err := conn.Prompt(ctx, acpsdk.PromptRequest{SessionId: sess.SessionId, Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock(fmt.Sprintf("task %d", i))}})
		if err != nil || resp.StopReason != acpsdk.StopReasonEndTurn {
			t.Fatalf("turn %d: %+v %v", i, resp, err)
		}
	}
	ed.mu.Lock()
	text := ed.text.String()
	ed.mu.Unlock()
	for _, want := range []string{`turn 1: task 1; read "unsaved buffer"`, "turn 4: task 4", "turns so far: 4", "write: <nil>", "outside: true", "permission: yes"} {
		if !strings.Contains(text, want) {
			t.Errorf("the editor heard no %q:\n%s", want, text)
		}
	}
	ed.mu.Lock()
	if len(ed.writes) != 4 || ed.writes[project+"/turn-4.txt"] != "written in turn 4" {
		t.Errorf("the editor's writes: %v", ed.writes)
	}
	for _, p := range append(ed.reads, ed.perms...) {
		if !strings.HasPrefix(p, project+"/") {
			t.Errorf("the editor was sent a path not its own: %s", p)
		}
	}
	ed.mu.Unlock()
	if _, err := os.Stat(filepath.Join(wd, "turn-1.txt")); err == nil {
		t.Error("a write the editor declared it does was done here too")
	}

	// The editor's session is over: the gateway says goodbye, and closes.
	io.WriteString(gatewayEnd, `{"jsonrpc":"2.0","method":"$/awcp/bye"}`+"\n")
	gatewayEnd.Close()
	select {
	case o := <-done:
		if o.err != nil || o.res.Failed != "" || !strings.Contains(o.res.Summary, "turns so far: 4") {
			t.Fatalf("the session ended with %+v, %v", o.res, o.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("closing the channel did not end the session")
	}
	pmu.Lock()
	defer pmu.Unlock()
	if !strings.Contains(strings.Join(progress, "\n"), "turn 2: task 2") {
		t.Errorf("the session's progress lines: %q", progress)
	}
}
