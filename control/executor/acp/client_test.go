package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/awcp/awcp/control/executor/agent"
)

// testAgent is the smallest ACP agent: the tests only use its connection
// to call the client's callbacks.
type testAgent struct{}

func (testAgent) Authenticate(context.Context, acpsdk.AuthenticateRequest) (acpsdk.AuthenticateResponse, error) {
	return acpsdk.AuthenticateResponse{}, nil
}
func (testAgent) Initialize(context.Context, acpsdk.InitializeRequest) (acpsdk.InitializeResponse, error) {
	return acpsdk.InitializeResponse{ProtocolVersion: acpsdk.ProtocolVersionNumber}, nil
}
func (testAgent) Cancel(context.Context, acpsdk.CancelNotification) error { return nil }
func (testAgent) CloseSession(context.Context, acpsdk.CloseSessionRequest) (acpsdk.CloseSessionResponse, error) {
	return acpsdk.CloseSessionResponse{}, nil
}
func (testAgent) ListSessions(context.Context, acpsdk.ListSessionsRequest) (acpsdk.ListSessionsResponse, error) {
	return acpsdk.ListSessionsResponse{}, nil
}
func (testAgent) NewSession(context.Context, acpsdk.NewSessionRequest) (acpsdk.NewSessionResponse, error) {
	return acpsdk.NewSessionResponse{SessionId: "s1"}, nil
}
func (testAgent) Prompt(context.Context, acpsdk.PromptRequest) (acpsdk.PromptResponse, error) {
	return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
}
func (testAgent) ResumeSession(context.Context, acpsdk.ResumeSessionRequest) (acpsdk.ResumeSessionResponse, error) {
	return acpsdk.ResumeSessionResponse{}, nil
}
func (testAgent) SetSessionConfigOption(context.Context, acpsdk.SetSessionConfigOptionRequest) (acpsdk.SetSessionConfigOptionResponse, error) {
	return acpsdk.SetSessionConfigOptionResponse{}, nil
}
func (testAgent) SetSessionMode(context.Context, acpsdk.SetSessionModeRequest) (acpsdk.SetSessionModeResponse, error) {
	return acpsdk.SetSessionModeResponse{}, nil
}

var _ acpsdk.Agent = testAgent{}

// workDir makes a work dir with a text file, a subdir, and symlinks that
// lead out of it.
func workDir(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	wd := filepath.Join(base, "work")
	if err := os.MkdirAll(filepath.Join(wd, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "lines.txt"), []byte("one\ntwo\nthree\nfour\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "secret"), []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "secret"), filepath.Join(wd, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, filepath.Join(wd, "updir")); err != nil {
		t.Fatal(err)
	}
	return wd
}

// connect joins an in-process agent to a client for task t and returns
// the agent's side, from which the tests call the client.
func connect(t *testing.T, task agent.Task, allowExec bool, h agent.Hooks) *acpsdk.AgentSideConnection {
	t.Helper()
	toAgentR, toAgentW := io.Pipe()
	toClientR, toClientW := io.Pipe()
	askCtx, endAsks := context.WithCancel(context.Background())
	c, err := newClient(askCtx, task, allowExec, h, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	acpsdk.NewClientSideConnection(c, toAgentW, toClientR)
	conn := acpsdk.NewAgentSideConnection(testAgent{}, toClientW, toAgentR)
	t.Cleanup(func() {
		endAsks()
		toAgentW.Close()
		toClientW.Close()
		c.releaseAll()
	})
	return conn
}

func code(err error) int {
	var re *acpsdk.RequestError
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}

func TestFileCallbacksConfined(t *testing.T) {
	wd := workDir(t)
	conn := connect(t, agent.Task{WorkDir: wd, AccessMode: "rw"}, true, agent.Hooks{})
	ctx := context.Background()
	read := func(p string, line, limit *int) (string, error) {
		r, err := conn.ReadTextFile(ctx, acpsdk.ReadTextFileRequest{SessionId: "s1", Path: p, Line: line, Limit: limit})
		return r.Content, err
	}
	tests := []struct {
		name        string
		path        string
		line, limit *int
		want        string
		code        int
	}{
		{name: "whole file", path: filepath.Join(wd, "lines.txt"), want: "one\ntwo\nthree\nfour\n"},
		{name: "line and limit are 1-based", path: filepath.Join(wd, "lines.txt"), line: acpsdk.Ptr(2), limit: acpsdk.Ptr(2), want: "two\nthree\n"},
		{name: "line past the end", path: filepath.Join(wd, "lines.txt"), line: acpsdk.Ptr(9), want: ""},
		{name: "line zero", path: filepath.Join(wd, "lines.txt"), line: acpsdk.Ptr(0), code: -32602},
		{name: "relative path", path: "lines.txt", code: -32602},
		{name: "absolute path outside", path: "/etc/hostname", code: -32602},
		{name: "dot-dot out", path: filepath.Join(wd, "..", "secret"), code: -32602},
		{name: "symlink leading out", path: filepath.Join(wd, "escape"), code: -32602},
		{name: "through a symlinked dir leading out", path: filepath.Join(wd, "updir", "secret"), code: -32602},
		{name: "missing", path: filepath.Join(wd, "nope.txt"), code: codeResourceNotFound},
		{name: "a directory", path: filepath.Join(wd, "sub"), code: -32602},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := read(tt.path, tt.line, tt.limit)
			if tt.code != 0 {
				if code(err) != tt.code {
					t.Fatalf("want code %d, got %q, %v", tt.code, got, err)
				}
				if strings.Contains(got, "s3cret") {
					t.Fatal("the secret leaked")
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}

	write := func(p, content string) error {
		_, err := conn.WriteTextFile(ctx, acpsdk.WriteTextFileRequest{SessionId: "s1", Path: p, Content: content})
		return err
	}
	if err := write(filepath.Join(wd, "new", "deep", "file.txt"), "hello\n"); err != nil {
		t.Fatalf("write with new parents: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "new", "deep", "file.txt")); string(b) != "hello\n" {
		t.Fatalf("written %q", b)
	}
	for _, p := range []string{filepath.Join(wd, "escape"), filepath.Join(wd, "updir", "planted"), "/tmp/planted", "rel.txt"} {
		if err := write(p, "x"); code(err) != -32602 {
			t.Errorf("write %s: %v", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(filepath.Dir(wd), "secret")); string(b) != "s3cret\n" {
		t.Fatalf("a write went through a symlink out: %q", b)
	}
}

func TestReadOnlyAndNoExec(t *testing.T) {
	wd := workDir(t)
	conn := connect(t, agent.Task{WorkDir: wd, AccessMode: "ro"}, false, agent.Hooks{})
	ctx := context.Background()
	_, err := conn.WriteTextFile(ctx, acpsdk.WriteTextFileRequest{SessionId: "s1", Path: filepath.Join(wd, "lines.txt"), Content: "x"})
	if code(err) != -32600 {
		t.Fatalf("write in a ro delegation: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "lines.txt")); !strings.HasPrefix(string(b), "one") {
		t.Fatalf("ro file changed: %q", b)
	}
	if _, err := conn.CreateTerminal(ctx, acpsdk.CreateTerminalRequest{SessionId: "s1", Command: "true"}); code(err) != -32600 {
		t.Fatalf("terminal/create without allowExec: %v", err)
	}
}

func TestTerminals(t *testing.T) {
	wd := workDir(t)
	conn := connect(t, agent.Task{WorkDir: wd, AccessMode: "rw"}, true, agent.Hooks{})
	ctx := context.Background()
	// argv is not a shell line: the $(…) reaches the program as it is.
	term, err := conn.CreateTerminal(ctx, acpsdk.CreateTerminalRequest{SessionId: "s1", Command: "sh",
		Args: []string{"-c", `pwd; printf '%s\n' "$0"; echo "$GREETING"; exit 7`, "$(touch pwned)"},
		Cwd:  acpsdk.Ptr(filepath.Join(wd, "sub")), Env: []acpsdk.EnvVariable{{Name: "GREETING", Value: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := conn.WaitForTerminalExit(ctx, acpsdk.WaitForTerminalExitRequest{SessionId: "s1", TerminalId: term.TerminalId})
	if err != nil || exit.ExitCode == nil || *exit.ExitCode != 7 {
		t.Fatalf("wait: %+v %v", exit, err)
	}
	out, err := conn.TerminalOutput(ctx, acpsdk.TerminalOutputRequest{SessionId: "s1", TerminalId: term.TerminalId})
	if err != nil || out.Output != filepath.Join(wd, "sub")+"\n$(touch pwned)\nhi\n" || out.Truncated || out.ExitStatus == nil {
		t.Fatalf("output %+v %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(wd, "sub", "pwned")); err == nil {
		t.Fatal("an argument was run by a shell")
	}

	// The limit keeps the end, cut at a character boundary.
	small, err := conn.CreateTerminal(ctx, acpsdk.CreateTerminalRequest{SessionId: "s1", Command: "printf",
		Args: []string{"%s", "abαβγ"}, OutputByteLimit: acpsdk.Ptr(5)})
	if err != nil {
		t.Fatal(err)
	}
	conn.WaitForTerminalExit(ctx, acpsdk.WaitForTerminalExitRequest{SessionId: "s1", TerminalId: small.TerminalId})
	so, _ := conn.TerminalOutput(ctx, acpsdk.TerminalOutputRequest{SessionId: "s1", TerminalId: small.TerminalId})
	if so.Output != "βγ" || !so.Truncated {
		t.Fatalf("limited output %q truncated %v", so.Output, so.Truncated)
	}

	// kill ends a running command; release forgets it.
	long, err := conn.CreateTerminal(ctx, acpsdk.CreateTerminalRequest{SessionId: "s1", Command: "sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.KillTerminal(ctx, acpsdk.KillTerminalRequest{SessionId: "s1", TerminalId: long.TerminalId}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ex, err := conn.WaitForTerminalExit(wctx, acpsdk.WaitForTerminalExitRequest{SessionId: "s1", TerminalId: long.TerminalId})
	if err != nil || ex.Signal == nil {
		t.Fatalf("killed terminal: %+v %v", ex, err)
	}
	conn.ReleaseTerminal(ctx, acpsdk.ReleaseTerminalRequest{SessionId: "s1", TerminalId: long.TerminalId})
	if _, err := conn.TerminalOutput(ctx, acpsdk.TerminalOutputRequest{SessionId: "s1", TerminalId: long.TerminalId}); code(err) != codeResourceNotFound {
		t.Fatalf("output of a released terminal: %v", err)
	}

	for name, cwd := range map[string]string{"outside": "/tmp", "symlink out": filepath.Join(wd, "updir"), "relative": "sub"} {
		if _, err := conn.CreateTerminal(ctx, acpsdk.CreateTerminalRequest{SessionId: "s1", Command: "true", Cwd: &cwd}); code(err) != -32602 {
			t.Errorf("cwd %s (%s): %v", name, cwd, err)
		}
	}
}

// Permission requests go to the hook with their options; an ask the task
// ends is answered cancelled.
func TestPermissionHook(t *testing.T) {
	wd := workDir(t)
	var got agent.PermissionRequest
	conn := connect(t, agent.Task{WorkDir: wd, AccessMode: "rw"}, true, agent.Hooks{
		Permission: func(ctx context.Context, req agent.PermissionRequest) agent.Decision {
			got = req
			if req.Title == "wait" {
				<-ctx.Done()
				return agent.Decision{By: "task ended"}
			}
			return agent.Decision{OptionID: "yes", By: "test"}
		},
	})
	ctx := context.Background()
	resp, err := conn.RequestPermission(ctx, acpsdk.RequestPermissionRequest{SessionId: "s1",
		ToolCall: acpsdk.ToolCallUpdate{ToolCallId: "t1", Title: acpsdk.Ptr("rm -rf build")},
		Options: []acpsdk.PermissionOption{{OptionId: "no", Name: "No", Kind: acpsdk.PermissionOptionKindRejectOnce},
			{OptionId: "yes", Name: "Yes", Kind: acpsdk.PermissionOptionKindAllowOnce}}})
	if err != nil || resp.Outcome.Selected == nil || resp.Outcome.Selected.OptionId != "yes" {
		t.Fatalf("selected: %+v %v", resp, err)
	}
	if got.ID != "perm-1" || got.Title != "rm -rf build" || len(got.Options) != 2 || got.Options[1].Kind != "allow_once" {
		t.Fatalf("request as the hook saw it: %+v", got)
	}
	var tc map[string]any
	if json.Unmarshal(got.ToolCall, &tc) != nil || tc["toolCallId"] != "t1" {
		t.Fatalf("tool call %s", got.ToolCall)
	}
	// The agent gives up on its request: the hook's ctx ends, the answer
	// is cancelled.
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = conn.RequestPermission(rctx, acpsdk.RequestPermissionRequest{SessionId: "s1",
		ToolCall: acpsdk.ToolCallUpdate{ToolCallId: "t2", Title: acpsdk.Ptr("wait")},
		Options:  []acpsdk.PermissionOption{{OptionId: "yes", Name: "Yes", Kind: acpsdk.PermissionOptionKindAllowOnce}}})
	if err == nil {
		t.Fatal("a request the agent cancelled still answered")
	}
}

// Unknown methods get -32601 and malformed params -32602, and a line that
// is not JSON is skipped: the connection goes on.
func TestProtocolErrors(t *testing.T) {
	wd := workDir(t)
	toAgentR, toAgentW := io.Pipe()
	toClientR, toClientW := io.Pipe()
	c, err := newClient(context.Background(), agent.Task{WorkDir: wd, AccessMode: "rw"}, true, agent.Hooks{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	acpsdk.NewClientSideConnection(c, toAgentW, toClientR)
	t.Cleanup(func() { toClientW.Close(); toAgentW.Close(); c.releaseAll() })
	replies := bufio.NewScanner(toAgentR)
	send := func(line string) {
		if _, err := io.WriteString(toClientW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	reply := func() (id float64, code int) {
		if !replies.Scan() {
			t.Fatal("no reply")
		}
		var r struct {
			ID    float64 `json:"id"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(replies.Bytes(), &r); err != nil {
			t.Fatalf("reply %s: %v", replies.Bytes(), err)
		}
		if r.Error == nil {
			return r.ID, 0
		}
		return r.ID, r.Error.Code
	}
	send("this is not JSON")
	send(`{"jsonrpc":"2.0","id":1,"method":"fs/format_disk","params":{}}`)
	if id, code := reply(); id != 1 || code != -32601 {
		t.Fatalf("unknown method: id %v code %d", id, code)
	}
	send(`{"jsonrpc":"2.0","id":2,"method":"fs/read_text_file","params":{"sessionId":"s1","path":42}}`)
	if id, code := reply(); id != 2 || code != -32602 {
		t.Fatalf("bad params: id %v code %d", id, code)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"` + filepath.Join(wd, "lines.txt") + `","limit":1}}`)
	if id, code := reply(); id != 3 || code != 0 {
		t.Fatalf("a good request after the bad ones: id %v code %d", id, code)
	}
}

// A turn whose tool calls failed says so after the agent's last words,
// in the agent's words, one line each: a refused write is not read as
// done (Gemini CLI's write_file, refused in a folder it does not trust).
func TestFailedToolCallsInTheSummary(t *testing.T) {
	c, err := newClient(context.Background(), agent.Task{WorkDir: workDir(t), AccessMode: "rw"}, false, agent.Hooks{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.releaseAll()
	failed := acpsdk.ToolCallStatusFailed
	completed := acpsdk.ToolCallStatusCompleted
	text := func(s string) []acpsdk.ToolCallContent {
		return []acpsdk.ToolCallContent{{Content: &acpsdk.ToolCallContentContent{Content: acpsdk.TextBlock(s)}}}
	}
	for _, u := range []acpsdk.SessionUpdate{
		{ToolCall: &acpsdk.SessionUpdateToolCall{ToolCallId: "w1", Title: "WriteFile notes.txt"}},
		{ToolCallUpdate: &acpsdk.SessionToolCallUpdate{ToolCallId: "w1", Status: &failed,
			Content: text("Cannot enable privileged approval modes in an untrusted folder.\n\x1b[2J")}},
		{ToolCall: &acpsdk.SessionUpdateToolCall{ToolCallId: "r1", Title: "ReadFile a.txt", Status: acpsdk.ToolCallStatusCompleted}},
		{ToolCallUpdate: &acpsdk.SessionToolCallUpdate{ToolCallId: "r1", Status: &completed}},
		{ToolCall: &acpsdk.SessionUpdateToolCall{ToolCallId: "s1", Title: "Shell make", Status: acpsdk.ToolCallStatusFailed}},
		{AgentMessageChunk: &acpsdk.SessionUpdateAgentMessageChunk{Content: acpsdk.TextBlock("I wrote the notes.")}},
	} {
		if err := c.SessionUpdate(context.Background(), acpsdk.SessionNotification{SessionId: "s", Update: u}); err != nil {
			t.Fatal(err)
		}
	}
	want := "I wrote the notes.\n\n2 tool call(s) failed:\n- WriteFile notes.txt: Cannot enable privileged approval modes in an untrusted folder. [2J\n- Shell make"
	if got := c.summary(); got != want {
		t.Errorf("summary:\n%q\nwant\n%q", got, want)
	}
}

// The agent's messages, and a session's turns, are kept apart in the
// summary: the words of one are not run on into the next's.
func TestSummaryKeepsMessagesApart(t *testing.T) {
	c, err := newClient(context.Background(), agent.Task{WorkDir: workDir(t), AccessMode: "rw"}, false, agent.Hooks{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.releaseAll()
	say := func(id, text string) {
		chunk := &acpsdk.SessionUpdateAgentMessageChunk{Content: acpsdk.TextBlock(text)}
		if id != "" {
			chunk.MessageId = acpsdk.Ptr(id)
		}
		c.SessionUpdate(context.Background(), acpsdk.SessionNotification{SessionId: "s", Update: acpsdk.SessionUpdate{AgentMessageChunk: chunk}})
	}
	say("m1", "checked the auto-mode-classifier-")
	say("m1", "billing")
	say("m2", "done: appended a line")
	c.newTurn()
	say("", "Stub title")
	if got, want := c.summary(), "checked the auto-mode-classifier-billing\n\ndone: appended a line\n\nStub title"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// An agent's refusal reads as its own words, one line: the step and its
// message (and its data's), not the JSON-RPC error whole.
func TestWords(t *testing.T) {
	err := fmt.Errorf("session/prompt: %w", &acpsdk.RequestError{Code: -32000, Message: "Authentication required",
		Data: map[string]any{"details": "Invalid API key\n\x1b[2J· Please run /login"}})
	if got := Words(err); got != "session/prompt: Authentication required: Invalid API key [2J· Please run /login" {
		t.Errorf("agentWords: %q", got)
	}
	if got := Words(errors.New("initialize: peer connection closed")); got != "initialize: peer connection closed" {
		t.Errorf("agentWords of a plain error: %q", got)
	}
}
