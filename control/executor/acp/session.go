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
	"strings"
	"sync"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/tail"
)

// A session delegation (docs/acp-sessions.md) lends a directory for an
// ACP session an editor holds with the executor's agent, through the
// delegator's gateway (`awcp-ctl acp`): as many turns as the editor sends,
// one agent process, the agent's own session kept between them. Here the
// executor relays ACP between the gateway's channel and the agent, and
// routes the agent's callbacks as seed 001's table says:
//
//	session/update, session/request_permission   → the editor
//	fs/read_text_file, fs/write_text_file        → the editor if it declared them, else here, in the mount
//	terminal/*                                   → here, in the mount, confined as for a task
//
// Paths are translated both ways between the work dir and the editor's
// project directory (session/new's cwd); a file callback naming a path
// outside the work dir is refused here and never reaches the editor.
// The agent is initialized once, with every capability this executor can
// serve, so that it need not be told again whichever way a callback goes.

// agentInitID is the id of the relay's own initialize request.
const agentInitID = `"awcp-initialize"`

// Session runs the agent for session delegation t, relaying the channels
// that arrive on channels, until the gateway says goodbye (the editor's
// session is over: the task is done), ctx ends (cancel, expiry:
// ErrKilled), or no channel comes within wait.
//
// A channel that drops is waited for again, up to wait, while the agent
// works on: the gateway reconnects, and the link sends again what the
// other end did not receive (control/sessionlink.go).
func (w Worker) Session(ctx context.Context, t agent.Task, h agent.Hooks, channels <-chan control.SessionChannel, wait time.Duration) (*agent.Result, error) {
	w = w.withDefaults()
	log := w.Logger.With("delegation", t.DelegationID)
	askCtx, endAsks := context.WithCancel(context.Background())
	defer endAsks()
	c, err := newClient(askCtx, t, w.AllowExec, h, log)
	if err != nil {
		return nil, err
	}
	defer c.releaseAll()
	proc, err := agent.Start(t, w.Command, nil)
	if err != nil {
		return nil, fmt.Errorf("ACP agent: %w", err)
	}
	if h.Started != nil {
		h.Started(proc.Pgid)
	}
	stderr := &tail.Buffer{Max: stderrTailBytes}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		sc := bufio.NewScanner(io.TeeReader(proc.Stderr, stderr))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			log.Info("agent stderr", "line", sc.Text())
		}
	}()
	stop := func() {
		proc.Stdin.Close()
		proc.Stop(w.KillGrace)
		proc.Stdout.Close()
		select {
		case <-stderrDone:
		case <-time.After(time.Second):
		}
		proc.Stderr.Close()
		<-stderrDone
	}

	r := &relay{c: c, log: log, agent: control.NewRPCConn(proc.Stdout, proc.Stdin), workDir: c.workDir, readOnly: c.readOnly,
		toAgent: map[string]json.RawMessage{}, prompts: map[string]bool{}, toEditor: map[string]json.RawMessage{}, asks: map[string]agent.PermissionRequest{}}
	initCtx, cancelInit := context.WithTimeout(ctx, wait)
	err = r.initialize(initCtx, w.AllowExec)
	cancelInit()
	if err != nil {
		stop()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", agent.ErrKilled, context.Cause(ctx))
		}
		return &agent.Result{Failed: "the ACP agent did not initialize: " + err.Error(), StderrTail: strings.TrimSpace(stderr.String())}, nil
	}

	var first control.SessionChannel
	select {
	case first = <-channels:
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("%w: %w", agent.ErrKilled, context.Cause(ctx))
	case <-time.After(wait):
		stop()
		return &agent.Result{Failed: fmt.Sprintf("no editor connected to the session within %s", wait)}, nil
	}
	log.Info("session channel connected")
	r.link, r.wait = control.NewSessionLink(), wait
	if err := r.link.Attach(first.Conn, nil, first.Received, true); err != nil {
		first.Conn.Close()
	}
	// Later connections — the gateway reconnecting — replace the live one.
	attachDone := make(chan struct{})
	attaching := make(chan struct{})
	go func() {
		defer close(attaching)
		for {
			select {
			case ch := <-channels:
				var err error
				if ch.Fresh {
					err = r.link.AttachFresh(ch.Conn, r.forNewGateway) // a new gateway took the session over
				} else {
					err = r.link.Attach(ch.Conn, nil, ch.Received, true)
				}
				if err != nil {
					log.Warn("session channel not resumed", "err", err)
				} else {
					log.Info("session channel resumed", "gatewayReceived", ch.Received, "takenOver", ch.Fresh)
				}
			case <-attachDone:
				return
			}
		}
	}()
	ended := make(chan error, 2)
	go func() { ended <- r.fromEditor() }()
	go func() { ended <- r.fromAgent() }()
	var end error
	killed, running := false, 2
	select {
	case end = <-ended:
		running--
	case <-ctx.Done():
		killed = true
	}
	r.link.Close() // the gateway hears the session is over, and does not reconnect
	stop()
	endAsks()
	for ; running > 0; running-- {
		<-ended
	}
	close(attachDone)
	<-attaching
	r.wg.Wait() // callbacks served here: they answered, or failed on the closed pipe
	if killed {
		return nil, fmt.Errorf("%w: %w", agent.ErrKilled, context.Cause(ctx))
	}
	res := &agent.Result{Summary: c.summary(), StderrTail: strings.TrimSpace(stderr.String())}
	if end != nil && !errors.Is(end, io.EOF) && !errors.Is(end, errEditorGone) {
		log.Info("session ended", "err", end)
	}
	if end != nil && !errors.Is(end, errAgentGone) && !errors.Is(end, errEditorGone) {
		res.Failed = "the session ended: " + end.Error()
	}
	if errors.Is(end, errAgentGone) {
		res.Failed = "the ACP agent ended the session: it exited"
		if res.StderrTail != "" {
			res.Failed += "; stderr: " + res.StderrTail
		}
	}
	return res, nil
}

func (w Worker) withDefaults() Worker {
	if w.CancelGrace <= 0 {
		w.CancelGrace = 5 * time.Second
	}
	if w.KillGrace <= 0 {
		w.KillGrace = 2 * time.Second
	}
	if w.Logger == nil {
		w.Logger = slog.Default()
	}
	return w
}

var (
	errEditorGone = errors.New("the editor's channel closed")
	errAgentGone  = errors.New("the agent's output ended")
)

// relay is one session's two ends and what it must remember to route
// between them.
type relay struct {
	c        *client
	log      *slog.Logger
	agent    *control.RPCConn
	link     *control.SessionLink // the editor's side, across its connections
	wait     time.Duration        // how long a dropped channel is waited for
	workDir  string
	readOnly bool
	wg       sync.WaitGroup // callbacks being served here

	mu         sync.Mutex
	agentInit  json.RawMessage                    // the agent's initialize result
	editorCaps acpsdk.ClientCapabilities          // what the editor declared
	editorCwd  string                             // session/new's cwd: the work dir's name at the editor
	next       int                                // our request ids
	toAgent    map[string]json.RawMessage         // our id → the editor's, for requests sent to the agent
	prompts    map[string]bool                    // our ids of the session/prompt requests among them
	toEditor   map[string]json.RawMessage         // our id → the agent's, for callbacks sent to the editor
	asks       map[string]agent.PermissionRequest // our id → a permission request sent to the editor
}

// initialize initializes the agent with every capability this executor
// can serve, and keeps its answer for the editor's initialize.
func (r *relay) initialize(ctx context.Context, allowExec bool) error {
	params, _ := json.Marshal(acpsdk.InitializeRequest{
		ProtocolVersion: acpsdk.ProtocolVersionNumber,
		ClientCapabilities: acpsdk.ClientCapabilities{
			Fs:       acpsdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: !r.readOnly},
			Terminal: allowExec,
		},
		ClientInfo: &acpsdk.Implementation{Name: "awcp-fs", Version: "1"},
	})
	if err := r.agent.Write(&control.RPCMessage{ID: json.RawMessage(agentInitID), Method: acpsdk.AgentMethodInitialize, Params: params}); err != nil {
		return err
	}
	type answer struct {
		m   *control.RPCMessage
		err error
	}
	got := make(chan answer, 1)
	go func() {
		for {
			m, err := r.agent.Read()
			if errors.Is(err, control.ErrNotRPC) {
				continue
			}
			if err != nil || (m.IsResponse() && string(m.ID) == agentInitID) {
				got <- answer{m, err}
				return
			}
			r.log.Debug("agent message before initialize's answer, dropped", "method", m.Method)
		}
	}()
	select {
	case a := <-got:
		if a.err != nil {
			return a.err
		}
		if len(a.m.Error) > 0 {
			return fmt.Errorf("initialize: %s", a.m.Error)
		}
		r.agentInit = a.m.Result
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// forNewGateway reports whether m, kept for an editor that has not
// acknowledged it, goes to a gateway that takes the session over: the
// agent's updates do (a turn that ran on while no gateway was there ends
// in the new editor's view), and so do its requests still waiting for an
// answer; the old editor's answers do not (its ids may be the new one's:
// an old turn's end would be taken for a new prompt's), nor a request it
// answered (a permission it gave would be asked again).
func (r *relay) forNewGateway(m *control.RPCMessage) bool {
	switch {
	case m.IsNotification():
		return true
	case m.IsRequest():
		r.mu.Lock()
		defer r.mu.Unlock()
		_, waiting := r.toEditor[string(m.ID)]
		return waiting
	}
	return false
}

func (r *relay) newID() json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	return json.RawMessage(fmt.Sprintf("%d", r.next))
}

// toEditorPath and toAgentPath translate paths between the two ends.
func (r *relay) toEditorPath(v json.RawMessage) json.RawMessage {
	r.mu.Lock()
	cwd := r.editorCwd
	r.mu.Unlock()
	if cwd == "" {
		return v
	}
	return rewritePaths(v, r.workDir, cwd)
}

func (r *relay) toAgentPath(v json.RawMessage) json.RawMessage {
	r.mu.Lock()
	cwd := r.editorCwd
	r.mu.Unlock()
	if cwd == "" {
		return v
	}
	return rewritePaths(v, cwd, r.workDir)
}

// fromEditor relays what the gateway sends until its channel closes.
func (r *relay) fromEditor() error {
	for {
		m, err := r.link.Read()
		if errors.Is(err, control.ErrLinkDown) {
			r.log.Info("session channel dropped; waiting for the gateway", "for", r.wait)
			timeout := make(chan struct{})
			t := time.AfterFunc(r.wait, func() { close(timeout) })
			back := r.link.WaitAttached(timeout)
			t.Stop()
			if back {
				continue
			}
			return errEditorGone
		}
		if errors.Is(err, control.ErrNotRPC) {
			r.log.Warn("a message from the gateway refused", "err", err)
			if m != nil && m.IsRequest() {
				r.link.Send(control.RPCErrorResponse(m.ID, -32600, "Invalid Request", err.Error()))
			}
			continue
		}
		if err != nil {
			return errEditorGone // the gateway said goodbye
		}
		switch {
		case m.IsRequest() && m.Method == acpsdk.AgentMethodInitialize:
			var req acpsdk.InitializeRequest
			if err := json.Unmarshal(m.Params, &req); err != nil {
				r.link.Send(control.RPCErrorResponse(m.ID, -32602, "Invalid params", err.Error()))
				continue
			}
			r.mu.Lock()
			r.editorCaps = req.ClientCapabilities
			r.mu.Unlock()
			// Answered with the agent's own answer: it was initialized once.
			r.link.Send(&control.RPCMessage{ID: m.ID, Result: r.agentInit})
		case m.IsRequest() && m.Method == acpsdk.AgentMethodSessionNew:
			var req map[string]any
			if err := json.Unmarshal(m.Params, &req); err != nil {
				r.link.Send(control.RPCErrorResponse(m.ID, -32602, "Invalid params", err.Error()))
				continue
			}
			if cwd, _ := req["cwd"].(string); cwd != "" {
				r.mu.Lock()
				r.editorCwd = strings.TrimSuffix(cwd, "/")
				r.mu.Unlock()
			}
			// The session is in the work dir. The editor's MCP servers are
			// commands of the editor's machine: not run here.
			req["cwd"], req["mcpServers"] = r.workDir, []any{}
			m.Params, _ = json.Marshal(req)
			r.forwardToAgent(m)
		case m.IsRequest():
			if m.Method == acpsdk.AgentMethodSessionPrompt {
				r.c.newTurn()
			}
			m.Params = r.toAgentPath(m.Params)
			r.forwardToAgent(m)
		case m.IsNotification():
			m.Params = r.toAgentPath(m.Params)
			if m.Method == "$/cancel_request" {
				m.Params = r.ourID(m.Params)
			}
			r.agent.Write(m)
		case m.IsResponse():
			r.mu.Lock()
			orig, ok := r.toEditor[string(m.ID)]
			delete(r.toEditor, string(m.ID))
			r.mu.Unlock()
			if !ok {
				continue // no callback of ours has that id
			}
			r.answered(string(m.ID), m)
			m.ID, m.Result = orig, r.toAgentPath(m.Result)
			r.agent.Write(m)
		}
	}
}

// asked records a permission request going to the editor (a pending
// permission event of the delegation), so that the decision is traceable:
// who asked (the agent, for which tool call), who decided (the editor).
func (r *relay) asked(ours string, params json.RawMessage) {
	var p acpsdk.RequestPermissionRequest
	if json.Unmarshal(params, &p) != nil {
		return
	}
	r.mu.Lock()
	r.next++
	req := agent.PermissionRequest{ID: fmt.Sprintf("perm-%d", r.next)}
	if p.ToolCall.Title != nil {
		req.Title = *p.ToolCall.Title
	}
	req.ToolCall, _ = json.Marshal(p.ToolCall)
	for _, o := range p.Options {
		req.Options = append(req.Options, agent.PermissionOption{OptionID: string(o.OptionId), Name: o.Name, Kind: string(o.Kind)})
	}
	r.asks[ours] = req
	r.mu.Unlock()
	if r.c.hooks.Decided != nil {
		r.c.hooks.Decided(req, control.PermissionPending, agent.Decision{})
	}
}

// answered records the editor's answer to a permission request, if m is
// one.
func (r *relay) answered(ours string, m *control.RPCMessage) {
	r.mu.Lock()
	req, ok := r.asks[ours]
	delete(r.asks, ours)
	r.mu.Unlock()
	if !ok || r.c.hooks.Decided == nil {
		return
	}
	var resp acpsdk.RequestPermissionResponse
	d := agent.Decision{By: "editor"} // of the session: the gateway's user
	outcome := control.PermissionCancelled
	if len(m.Error) == 0 && json.Unmarshal(m.Result, &resp) == nil && resp.Outcome.Selected != nil {
		outcome, d.OptionID = control.PermissionSelected, string(resp.Outcome.Selected.OptionId)
	}
	r.c.hooks.Decided(req, outcome, d)
}

// forwardToAgent sends an editor's request to the agent under an id of
// ours, remembering the editor's.
func (r *relay) forwardToAgent(m *control.RPCMessage) {
	id := r.newID()
	r.mu.Lock()
	r.toAgent[string(id)] = m.ID
	if m.Method == acpsdk.AgentMethodSessionPrompt {
		r.prompts[string(id)] = true
	}
	r.mu.Unlock()
	m.ID = id
	r.agent.Write(m)
}

// ourID rewrites a $/cancel_request's requestId from the editor's id to
// the one the agent knows the request by.
func (r *relay) ourID(params json.RawMessage) json.RawMessage {
	var p map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil {
		return params
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ours, theirs := range r.toAgent {
		if string(theirs) == string(p["requestId"]) {
			p["requestId"] = json.RawMessage(ours)
			out, _ := json.Marshal(p)
			return out
		}
	}
	return params
}

// fromAgent relays what the agent sends until its output ends.
func (r *relay) fromAgent() error {
	for {
		m, err := r.agent.Read()
		if errors.Is(err, control.ErrNotRPC) {
			r.log.Info("agent stdout that is not ACP, or ambiguous: not relayed", "err", err) // as for a task: logged, not fatal
			if m != nil && m.IsRequest() {
				r.agent.Write(control.RPCErrorResponse(m.ID, -32600, "Invalid Request", err.Error()))
			}
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, os.ErrClosed) {
				return errAgentGone
			}
			return err
		}
		switch {
		case m.IsResponse():
			r.mu.Lock()
			orig, ok := r.toAgent[string(m.ID)]
			prompt := r.prompts[string(m.ID)]
			delete(r.toAgent, string(m.ID))
			delete(r.prompts, string(m.ID))
			r.mu.Unlock()
			if !ok {
				continue
			}
			if prompt {
				r.turnEnded(m)
			}
			m.ID, m.Result = orig, r.toEditorPath(m.Result)
			if err := r.link.Send(m); err != nil {
				return err // the editor is too far behind: the session ends
			}
		case m.IsNotification():
			if m.Method == acpsdk.ClientMethodSessionUpdate {
				var n acpsdk.SessionNotification
				if json.Unmarshal(m.Params, &n) == nil {
					r.c.SessionUpdate(context.Background(), n) // the delegation's progress lines
				}
			}
			m.Params = r.toEditorPath(m.Params)
			if err := r.link.Send(m); err != nil {
				return err
			}
		case m.IsRequest():
			r.callback(m)
		}
	}
}

// turnEnded tells the delegator, after the turn's every progress line,
// that the agent answered a turn (control.TurnEndedPrefix).
func (r *relay) turnEnded(m *control.RPCMessage) {
	r.c.flush()
	stop := "error"
	var resp acpsdk.PromptResponse
	if m.Error == nil && json.Unmarshal(m.Result, &resp) == nil {
		stop = string(resp.StopReason)
	}
	r.c.emit(agent.Update{Message: control.TurnEndedPrefix + stop})
}

// callback routes one of the agent's requests: to the editor, or served
// here (in its own goroutine: terminal/wait_for_exit blocks).
func (r *relay) callback(m *control.RPCMessage) {
	r.mu.Lock()
	caps := r.editorCaps
	r.mu.Unlock()
	local := true
	switch m.Method {
	case acpsdk.ClientMethodFsReadTextFile, acpsdk.ClientMethodFsWriteTextFile:
		var p struct {
			Path string `json:"path"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil {
			r.agent.Write(control.RPCErrorResponse(m.ID, -32602, "Invalid params", err.Error()))
			return
		}
		if _, err := r.c.path(p.Path); err != nil {
			r.log.Warn("file callback outside the work dir refused", "method", m.Method, "path", p.Path)
			r.agent.Write(control.RPCErrorResponse(m.ID, -32602, "Invalid params", map[string]any{"path": p.Path, "error": "the path is outside the work directory"}))
			return
		}
		if m.Method == acpsdk.ClientMethodFsReadTextFile {
			local = !caps.Fs.ReadTextFile
		} else {
			local = !caps.Fs.WriteTextFile || r.readOnly // a ro delegation's refusal is given here
		}
	case acpsdk.ClientMethodSessionRequestPermission:
		local = false
	case acpsdk.ClientMethodTerminalCreate, acpsdk.ClientMethodTerminalOutput, acpsdk.ClientMethodTerminalWaitForExit,
		acpsdk.ClientMethodTerminalKill, acpsdk.ClientMethodTerminalRelease:
		local = true // run on the executor: the remote machine is the point of delegating
	default:
		// Seed 001's table has no other callback: nothing else goes to
		// the editor (its gateway refuses it too).
		r.log.Warn("agent callback of an unknown method refused", "method", m.Method)
		r.agent.Write(control.RPCErrorResponse(m.ID, -32601, "Method not found", m.Method))
		return
	}
	if !local {
		id := r.newID()
		r.mu.Lock()
		r.toEditor[string(id)] = m.ID
		r.mu.Unlock()
		if m.Method == acpsdk.ClientMethodSessionRequestPermission {
			r.asked(string(id), m.Params)
		}
		m.ID, m.Params = id, r.toEditorPath(m.Params)
		r.link.Send(m)
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		result, err := r.serveLocally(m)
		if err != nil {
			var re *acpsdk.RequestError
			if errors.As(err, &re) {
				r.agent.Write(control.RPCErrorResponse(m.ID, re.Code, re.Message, re.Data))
			} else {
				r.agent.Write(control.RPCErrorResponse(m.ID, -32603, "Internal error", err.Error()))
			}
			return
		}
		raw, _ := json.Marshal(result)
		r.agent.Write(&control.RPCMessage{ID: m.ID, Result: raw})
	}()
}

// serveLocally answers a callback with the executor's own client.
func (r *relay) serveLocally(m *control.RPCMessage) (any, error) {
	ctx := r.c.askCtx
	switch m.Method {
	case acpsdk.ClientMethodFsReadTextFile:
		return call(ctx, m.Params, r.c.ReadTextFile)
	case acpsdk.ClientMethodFsWriteTextFile:
		return call(ctx, m.Params, r.c.WriteTextFile)
	case acpsdk.ClientMethodTerminalCreate:
		return call(ctx, m.Params, r.c.CreateTerminal)
	case acpsdk.ClientMethodTerminalOutput:
		return call(ctx, m.Params, r.c.TerminalOutput)
	case acpsdk.ClientMethodTerminalWaitForExit:
		return call(ctx, m.Params, r.c.WaitForTerminalExit)
	case acpsdk.ClientMethodTerminalKill:
		return call(ctx, m.Params, r.c.KillTerminal)
	case acpsdk.ClientMethodTerminalRelease:
		return call(ctx, m.Params, r.c.ReleaseTerminal)
	}
	return nil, acpsdk.NewMethodNotFound(m.Method)
}

// call decodes params for one of the client's callbacks and runs it.
func call[Req, Resp any](ctx context.Context, params json.RawMessage, fn func(context.Context, Req) (Resp, error)) (any, error) {
	var req Req
	if err := json.Unmarshal(params, &req); err != nil {
		return nil, acpsdk.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	return fn(ctx, req)
}

// Probe starts the agent as t says (its work directory, environment and
// sandbox: executor.ProbeTask's, as a session's agent is started),
// initializes it as a session's relay would, and returns its answer
// (capabilities, info, auth methods): what an editor's gateway tells the
// editor before any session exists. The agent is stopped at once.
func (w Worker) Probe(ctx context.Context, t agent.Task) (json.RawMessage, error) {
	init, _, err := w.ProbeStderr(ctx, t)
	return init, err
}

// ProbeStderr is Probe, with the end of what the agent wrote to stderr
// meanwhile: why it did not answer, where it did not.
func (w Worker) ProbeStderr(ctx context.Context, t agent.Task) (_ json.RawMessage, stderrTail string, _ error) {
	return w.probe(ctx, t, false)
}

func (w Worker) probe(ctx context.Context, t agent.Task, openSession bool) (_ json.RawMessage, stderrTail string, _ error) {
	w = w.withDefaults()
	if t.DelegationID == "" {
		t.DelegationID = "probe"
	}
	t.AccessMode = "ro"
	proc, err := agent.Start(t, w.Command, nil)
	if err != nil {
		return nil, "", fmt.Errorf("ACP agent: %w", err)
	}
	stderr := &tail.Buffer{Max: stderrTailBytes}
	drained := make(chan struct{})
	go func() { defer close(drained); io.Copy(stderr, proc.Stderr) }() // ends with the pipe
	stop := func() {
		proc.Stdin.Close()
		proc.Stop(w.KillGrace)
		proc.Stdout.Close()
		select {
		case <-drained:
		case <-time.After(time.Second):
		}
		proc.Stderr.Close()
		<-drained
	}
	r := &relay{log: w.Logger, agent: control.NewRPCConn(proc.Stdout, proc.Stdin), readOnly: true}
	err = r.initialize(ctx, w.AllowExec)
	if err == nil && openSession {
		err = r.probeSession(ctx, t.WorkDir)
	}
	stop()
	if err != nil {
		// r.agentInit is what it answered, if it got as far.
		return r.agentInit, strings.TrimSpace(stderr.String()), err
	}
	return r.agentInit, "", nil
}

// ProbeSession is ProbeStderr, then a session opened in the task's work
// dir and left unused: where an agent checks its login at session/new
// (Gemini CLI and Codex say "API key is missing", "Authentication
// required" there), a missing one is found before a delegation's prompt
// is. Nothing is prompted, so nothing costs a model call.
func (w Worker) ProbeSession(ctx context.Context, t agent.Task) (_ json.RawMessage, stderrTail string, _ error) {
	return w.probe(ctx, t, true)
}

// probeSessionID is the id of a probe's own session/new.
const probeSessionID = `"awcp-probe-session"`

// probeSession opens a session in cwd. The agent's requests meanwhile are
// refused (a probe has no editor) and its notifications dropped.
func (r *relay) probeSession(ctx context.Context, cwd string) error {
	params, _ := json.Marshal(acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{}})
	if err := r.agent.Write(&control.RPCMessage{ID: json.RawMessage(probeSessionID), Method: acpsdk.AgentMethodSessionNew, Params: params}); err != nil {
		return err
	}
	got := make(chan error, 1)
	go func() {
		for {
			m, err := r.agent.Read()
			switch {
			case errors.Is(err, control.ErrNotRPC):
				continue
			case err != nil:
				got <- err
				return
			case m.IsResponse() && string(m.ID) == probeSessionID:
				if len(m.Error) > 0 {
					var e acpsdk.RequestError
					json.Unmarshal(m.Error, &e)
					got <- fmt.Errorf("session/new: %w", &e)
					return
				}
				got <- nil
				return
			case m.IsRequest():
				r.agent.Write(&control.RPCMessage{ID: m.ID, Error: json.RawMessage(`{"code":-32601,"message":"awcp-fs doctor has no editor"}`)})
			}
		}
	}()
	select {
	case err := <-got:
		return err
	case <-ctx.Done():
		return fmt.Errorf("session/new: no answer: %w", ctx.Err())
	}
}
