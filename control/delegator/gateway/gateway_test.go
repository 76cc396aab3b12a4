package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// fakeExecutor is the delegator's service and the executor's relay in
// one: each session's channel is a pipe whose far end answers initialize,
// session/new and session/prompt, and records when it was closed.
type fakeExecutor struct {
	closed chan string // delegation ids whose channel the gateway closed
}

func (f *fakeExecutor) Create(req delegator.ExportRequest) (*lease.Delegation, error) {
	if !req.Session {
		panic("a gateway's delegation must be a session")
	}
	return &lease.Delegation{Lease: lease.Lease{ID: "dlg-" + strings.ReplaceAll(req.Dir, "/", "_")}, LocalDir: req.Dir}, nil
}

func (f *fakeExecutor) Run(ctx context.Context, id string) (*lease.Delegation, error) {
	return nil, nil
}

func (f *fakeExecutor) FindSession(sessionID, dir string) (*lease.Delegation, error) {
	return nil, lease.ErrNotFound
}

func (f *fakeExecutor) TakeOverSession(ctx context.Context, id string, link *control.SessionLink) error {
	return errors.New("nothing to take over")
}

func (f *fakeExecutor) RenewSession(ctx context.Context, id string) (time.Time, error) {
	return time.Now().Add(time.Hour), nil
}

func (f *fakeExecutor) Cancel(ctx context.Context, id string) (*lease.Delegation, error) {
	return nil, nil
}

func (f *fakeExecutor) AttachSession(ctx context.Context, id string, link *control.SessionLink, first bool) error {
	gw, ex := net.Pipe()
	go func() {
		rc := control.NewRPCConn(ex, ex)
		rc.Write(&control.RPCMessage{Method: "$/awcp/resume", Params: json.RawMessage(`{"received":0}`)})
		for {
			m, err := rc.Read()
			if err != nil || m.Method == "$/awcp/bye" {
				ex.Close()
				f.closed <- id
				return
			}
			switch m.Method {
			case "initialize":
				rc.Write(&control.RPCMessage{ID: m.ID, Result: json.RawMessage(`{"protocolVersion":1,"agentInfo":{"name":"fake"}}`)})
			case "session/new":
				rc.Write(&control.RPCMessage{ID: m.ID, Result: json.RawMessage(`{"sessionId":"s-` + id + `"}`)})
			case "session/prompt":
				rc.Write(&control.RPCMessage{ID: m.ID, Result: json.RawMessage(`{"stopReason":"end_turn"}`)})
			}
		}
	}()
	received, rc, err := control.ReadResume(gw)
	if err != nil {
		return err
	}
	return link.Attach(gw, rc, received, false)
}

// A session nothing went through for the idle TTL ends — its channel is
// closed, so its delegation ends — and the editor's next request to it is
// session_expired; the gateway answers initialize itself.
func TestIdleSessionExpires(t *testing.T) {
	f := &fakeExecutor{closed: make(chan string, 4)}
	g := &Gateway{Delegator: f, Request: delegator.ExportRequest{Peer: "http://x"}, IdleTTL: 300 * time.Millisecond}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- g.Serve(context.Background(), inR, outW) }()
	answers := bufio.NewScanner(outR)
	call := func(line string) string {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if !answers.Scan() {
			t.Fatal("no answer")
		}
		return answers.Text()
	}
	if a := call(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`); !strings.Contains(a, `"loadSession":true`) {
		t.Fatalf("initialize: %s", a)
	}
	if a := call(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/p","mcpServers":[]}}`); !strings.Contains(a, `"sessionId":"s-dlg-_p"`) {
		t.Fatalf("session/new: %s", a)
	}
	if a := call(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s-dlg-_p","prompt":[]}}`); !strings.Contains(a, `"id":3`) || !strings.Contains(a, "end_turn") {
		t.Fatalf("session/prompt: %s", a)
	}
	select {
	case id := <-f.closed:
		if id != "dlg-_p" {
			t.Fatalf("closed %s", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an idle session was not ended")
	}
	time.Sleep(50 * time.Millisecond) // the gateway forgets it
	if a := call(`{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"s-dlg-_p","prompt":[]}}`); !strings.Contains(a, "session_expired") || !strings.Contains(a, `"id":4`) {
		t.Fatalf("a prompt to the ended session: %s", a)
	}
	inW.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the gateway did not end with its editor")
	}
}

// Two sessions whose agents chose the same session id are two sessions to
// the editor: the second gets an id of its own, renamed both ways.
func TestSessionIDsStayApart(t *testing.T) {
	if got := renameSession(json.RawMessage(`{"sessionId":"s-1","prompt":[]}`), "s-1", "s-1@dlg"); !strings.Contains(string(got), `"sessionId":"s-1@dlg"`) || !strings.Contains(string(got), `"prompt":[]`) {
		t.Errorf("renamed: %s", got)
	}
	if got := renameSession(json.RawMessage(`{"sessionId":"other"}`), "s-1", "s-1@dlg"); string(got) != `{"sessionId":"other"}` {
		t.Errorf("another session's id was renamed: %s", got)
	}
	g := &Gateway{sessions: map[string]*session{}}
	a := &session{agentID: "s-1", delegation: "dlg-aaaaaaaa-1", link: control.NewSessionLink()}
	b := &session{agentID: "s-1", delegation: "dlg-bbbbbbbb-2", link: control.NewSessionLink()}
	if !g.register(a) || !g.register(b) {
		t.Fatal("a session was not registered")
	}
	if a.id != "s-1" || b.id == a.id || g.sessions[b.id] != b {
		t.Errorf("editor ids %q and %q", a.id, b.id)
	}
}
