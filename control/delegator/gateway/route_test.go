package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// hostileExecutor is an executor (or an agent behind an honest one) that,
// once prompted, sends the editor every callback it should not: each line
// of attacks, raw, then one honest file read and a progress update, then
// the prompt's answer. What the gateway answered each attack is kept.
type hostileExecutor struct {
	fakeExecutor
	dir     string
	attacks []string // raw lines, each a request with id "a<N>" or a notification
	wmu     sync.Mutex
	mu      sync.Mutex
	answers map[string]*control.RPCMessage
	init    json.RawMessage // the initialize params the gateway sent
	got     chan string     // ids answered
}

func (f *hostileExecutor) Create(req delegator.ExportRequest) (*lease.Delegation, error) {
	return &lease.Delegation{Lease: lease.Lease{ID: "dlg-hostile"}, LocalDir: f.dir,
		Policy: lease.ExportPolicy{Hide: []string{".env"}}}, nil
}

func (f *hostileExecutor) AttachSession(ctx context.Context, id string, link *control.SessionLink, first bool) error {
	gw, ex := net.Pipe()
	rc := control.NewRPCConn(ex, ex)
	write := func(line string) {
		f.wmu.Lock()
		defer f.wmu.Unlock()
		io.WriteString(ex, line+"\n")
	}
	go func() {
		write(`{"jsonrpc":"2.0","method":"$/awcp/resume","params":{"received":0}}`)
		for {
			m, err := rc.Read()
			if errors.Is(err, control.ErrNotRPC) {
				continue
			}
			if err != nil || m.Method == "$/awcp/bye" {
				ex.Close()
				return
			}
			switch {
			case m.Method == "initialize":
				f.mu.Lock()
				f.init = m.Params
				f.mu.Unlock()
				write(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":1}}`)
			case m.Method == "session/new":
				write(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"sessionId":"s1"}}`)
			case m.Method == "session/prompt":
				go f.attack(write, m.ID)
			case m.IsResponse():
				f.mu.Lock()
				f.answers[strings.Trim(string(m.ID), `"`)] = m
				f.mu.Unlock()
				f.got <- strings.Trim(string(m.ID), `"`)
			}
		}
	}()
	received, grc, err := control.ReadResume(gw)
	if err != nil {
		return err
	}
	return link.Attach(gw, grc, received, false)
}

func (f *hostileExecutor) attack(write func(string), promptID json.RawMessage) {
	for _, line := range f.attacks {
		write(line)
	}
	write(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"honest"}}}}`)
	write(`{"jsonrpc":"2.0","id":"honest","method":"fs/read_text_file","params":{"sessionId":"s1","path":"` + filepath.Join(f.dir, "notes.txt") + `"}}`)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case id := <-f.got:
			if id == "honest" {
				write(`{"jsonrpc":"2.0","id":` + string(promptID) + `,"result":{"stopReason":"end_turn"}}`)
				return
			}
		case <-deadline:
			return
		}
	}
}

// The gateway, not the executor, decides what reaches the editor: a
// hostile executor's terminals, reads and writes outside the project or
// of a hidden file, writes of what git runs, unknown methods, and messages
// built to be read one way by a checker and another by the editor (a key
// twice, keys differing in case) are refused at the gateway and answered
// as refused; an honest read inside the project, and progress, go on.
func TestGatewayRefusesWhatTheEditorMustNotDo(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	for name, content := range map[string]string{"notes.txt": "notes", ".env": "SECRET=1", ".git/config": "[core]"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	os.Symlink(outside, filepath.Join(dir, "out"))
	os.Symlink(filepath.Join(outside, "nowhere"), filepath.Join(dir, "dangling"))
	notes := filepath.Join(dir, "notes.txt")
	req := func(n int, method, params string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":"a%d","method":%q,"params":%s}`, n, method, params)
	}
	attacks := []string{
		req(1, "terminal/create", `{"sessionId":"s1","command":"sh","args":["-c","touch /tmp/pwned"]}`),
		req(2, "fs/read_text_file", `{"sessionId":"s1","path":"/root/.ssh/id_ed25519"}`),
		req(3, "fs/write_text_file", `{"sessionId":"s1","path":"/root/.bashrc","content":"evil"}`),
		req(4, "x/run", `{"sessionId":"s1"}`),
		req(5, "fs/read_text_file", `{"sessionId":"s1","path":"/etc/passwd","PATH":"`+notes+`"}`),
		req(6, "fs/read_text_file", `{"sessionId":"s1","PATH":"/etc/passwd","path":"`+notes+`"}`),
		req(7, "fs/read_text_file", `{"sessionId":"s1","path":"/etc/passwd","path":"`+notes+`"}`),
		req(8, "fs/read_text_file", `{"sessionId":"s1","path":"`+filepath.Join(dir, "out", "secret")+`"}`),
		req(9, "fs/write_text_file", `{"sessionId":"s1","path":"`+filepath.Join(dir, "dangling")+`","content":"x"}`),
		req(10, "fs/write_text_file", `{"sessionId":"s1","path":"`+filepath.Join(dir, ".git", "config")+`","content":"[core]\n\tfsmonitor = touch /tmp/pwned"}`),
		req(11, "fs/write_text_file", `{"sessionId":"s1","path":"`+filepath.Join(dir, ".git", "hooks", "post-checkout")+`","content":"#!/bin/sh"}`),
		req(12, "fs/read_text_file", `{"sessionId":"s1","path":"`+filepath.Join(dir, ".env")+`"}`),
		req(13, "fs/read_text_file", `{"sessionId":"s1","path":"`+dir+`/../`+filepath.Base(outside)+`/secret"}`),
		req(14, "fs/read_text_file", `{"sessionId":"s1","path":"notes.txt"}`),
		req(15, "fs/read_text_file", `{"sessionId":"s1","path":"`+notes+`","command":"sh"}`),
		`{"jsonrpc":"2.0","id":"a16","method":"fs/read_text_file","Method":"terminal/create","params":{"sessionId":"s1","path":"` + notes + `"}}`,
		req(17, "session/request_permission", `{"sessionId":"s1","toolCall":{"toolCallId":"t","title":"x"},"options":[],"Options":[]}`),
		`{"jsonrpc":"2.0","method":"terminal/output","params":{"sessionId":"s1"}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"dup"},"content":{"type":"text","text":"other"}}}}`,
		`{"jsonrpc":"2.0","id":"a18","method":"fs/read_text_file","params":{"sessionId":"s1","path":"` + notes + `"},"extra":1}`,
	}
	f := &hostileExecutor{dir: dir, attacks: attacks, answers: map[string]*control.RPCMessage{}, got: make(chan string, 64)}
	heard, events := driveHostile(t, f, delegator.ExportRequest{Peer: "http://x"})
	if len(heard) != 2 || !strings.Contains(heard[0], `"honest"`) || !strings.Contains(heard[1], `"path":"`+notes+`"`) {
		t.Errorf("the editor heard %d messages, want the honest update and read:\n%s", len(heard), strings.Join(heard, "\n"))
	}
	f.mu.Lock()
	for i := 1; i <= 18; i++ {
		id := fmt.Sprintf("a%d", i)
		if a := f.answers[id]; a == nil || len(a.Error) == 0 {
			t.Errorf("attack %s was not answered as refused: %v", id, a)
		}
	}
	f.mu.Unlock()
	refused := 0
	for _, e := range events {
		if strings.HasPrefix(e, "channel.refused") {
			refused++
		}
	}
	if refused < 20 {
		t.Errorf("%d refusals recorded, want 20:\n%s", refused, strings.Join(events, "\n"))
	}
}

// driveHostile has an editor (fs and terminals declared) open a session
// through a gateway with req to hostile executor f in f.dir, prompt once,
// answer the file reads it hears, and close: what it heard, and the
// channel events the gateway recorded.
func driveHostile(t *testing.T, f *hostileExecutor, req delegator.ExportRequest) (heard, events []string) {
	t.Helper()
	dir := f.dir
	var evMu sync.Mutex
	g := &Gateway{Delegator: f, Request: req,
		Channel: func(_ string, ev lease.SessionEvent, _ *lease.SessionChannel) {
			evMu.Lock()
			events = append(events, ev.Event+" "+ev.Detail)
			evMu.Unlock()
		}}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- g.Serve(context.Background(), inR, outW) }()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(s string) { io.WriteString(inW, s+"\n") }
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("the editor heard nothing")
		}
		return ""
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true}}}`)
	next()
	send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"` + dir + `","mcpServers":[]}}`)
	if a := next(); !strings.Contains(a, `"sessionId":"s1"`) {
		t.Fatalf("session/new: %s", a)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}`)
	for {
		l := next()
		var m control.RPCMessage
		json.Unmarshal([]byte(l), &m)
		if string(m.ID) == "3" {
			break
		}
		heard = append(heard, l)
		if m.Method == "fs/read_text_file" {
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":"notes"}}`)
		}
	}
	inW.Close()
	<-served
	evMu.Lock()
	defer evMu.Unlock()
	return heard, slices.Clone(events)
}

// A staged session's writes are kept for review: the gateway declares to
// the executor that the editor does not write files, and refuses a write
// the executor forwards anyway, inside the project as it is — it would
// land in the project at once, past the review.
func TestStagedSessionKeepsWritesForReview(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("notes"), 0o644)
	attacks := []string{`{"jsonrpc":"2.0","id":"a1","method":"fs/write_text_file","params":{"sessionId":"s1","path":"` + notes + `","content":"unreviewed"}}`}
	f := &hostileExecutor{dir: dir, attacks: attacks, answers: map[string]*control.RPCMessage{}, got: make(chan string, 64)}
	heard, _ := driveHostile(t, f, delegator.ExportRequest{Peer: "http://x", Snapshot: lease.SnapshotStaged})
	f.mu.Lock()
	a, init := f.answers["a1"], f.init
	f.mu.Unlock()
	if a == nil || len(a.Error) == 0 {
		t.Errorf("the write in a staged session was not refused: %v", a)
	}
	for _, l := range heard {
		if strings.Contains(l, "fs/write_text_file") {
			t.Errorf("the editor was asked to write: %s", l)
		}
	}
	if !strings.Contains(string(init), `"writeTextFile":false`) || !strings.Contains(string(init), `"readTextFile":true`) {
		t.Errorf("the executor was told the editor's capabilities as %s", init)
	}
}
