// Package gateway is `awcp-ctl acp`: it speaks ACP as an agent to an
// editor (JSON-RPC, NDJSON on the editor's pipe) and gives each session
// the editor opens a delegation of its own — the session's cwd lent to
// the executor, whose ACP agent holds the session in the mount — relaying
// the editor's requests and the agent's callbacks over the delegation's
// channel (control/session.go) for as many turns as the editor sends.
//
// The executor routes the agent's callbacks (control/executor/acp): here
// they arrive already translated to the editor's paths, and go to the
// editor as they came. Ids are the gateway's own on each side, so that
// several sessions never mix theirs.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// Delegator is what the gateway needs of the delegator's service.
type Delegator interface {
	Create(req delegator.ExportRequest) (*lease.Delegation, error)
	Run(ctx context.Context, id string) (*lease.Delegation, error)
	AttachSession(ctx context.Context, id string, link *control.SessionLink, first bool) error
	// FindSession and TakeOverSession are a restarted editor's
	// session/load: the session a gone gateway held, and its channel
	// connected anew.
	FindSession(sessionID, dir string) (*lease.Delegation, error)
	TakeOverSession(ctx context.Context, id string, link *control.SessionLink) error
	// RenewSession renews the session's lease once half of it is gone,
	// and returns its end.
	RenewSession(ctx context.Context, id string) (time.Time, error)
	Cancel(ctx context.Context, id string) (*lease.Delegation, error)
}

// Gateway serves one editor.
type Gateway struct {
	Delegator Delegator
	// Request is every session's export: the peer, transport, access,
	// policy and token; Dir and Session are set per session.
	Request delegator.ExportRequest
	// Version is this program's, for initialize's agentInfo.
	Version string
	// IdleTTL ends a session nothing went through for this long, with no
	// request of the editor's in flight (seed 003 §6.4). 0: never.
	IdleTTL time.Duration
	// AgentInit, if set, fetches the remote agent's answer to initialize
	// (the executor's manifest has it): the editor's initialize is
	// answered with it — or refused, where its error wraps ErrAgentFailed
	// (the executor says its agent gave none).
	AgentInit func(ctx context.Context) (json.RawMessage, error)
	// AuthTimeout bounds the editor's authenticate on the executor
	// (default AuthTimeout).
	AuthTimeout time.Duration
	// Started, if set, is told each session's delegation id.
	Started func(sessionID, delegationID string)
	// Channel, if set, records a session's channel events (seed 002):
	// connected (with the channel's identity), disconnected, resumed,
	// and the permissions it carried to the editor and back.
	Channel func(delegationID string, ev lease.SessionEvent, ch *lease.SessionChannel)
	Logger  *slog.Logger

	editor *control.RPCConn
	wg     sync.WaitGroup // the delegations' Runs and the channels' readers

	mu       sync.Mutex
	closing  bool                // the editor is gone: no session opens
	init     json.RawMessage     // the editor's initialize params, for each channel
	caps     []string            // what the editor declared in them (capabilities)
	auth     json.RawMessage     // the editor's last authenticate params, for each channel
	sessions map[string]*session // by the agent's session id
	pending  map[string]pending  // the editor's requests in flight, by our id toward a channel
	asked    map[string]pending  // the agent's callbacks in flight, by our id toward the editor
	perms    map[string]string   // those that are permission requests: their titles
	next     int
	tag      string // in every id of this gateway's (newID)
}

// session is one of the editor's sessions: its delegation and channel.
// id is the session's id as the editor knows it, agentID as the agent
// does: the same, unless another open session's agent (of another
// delegation, maybe another executor) chose that id too.
type session struct {
	id, agentID, delegation string
	cwd                     string               // the directory lent: file callbacks stay inside
	hide                    *wire.Matcher        // the export's hidden paths
	link                    *control.SessionLink // the channel, across its connections
	last                    atomic.Int64         // when a message last went either way (unix ns)
	ended                   chan struct{}        // closed when its channel has ended
}

func (s *session) touch() { s.last.Store(time.Now().UnixNano()) }

// pending is a request on its way: where its answer goes back, under
// which id.
type pending struct {
	s  *session
	id json.RawMessage
}

// Serve runs until the editor closes in, then ends every session — each
// delegation ends as a completed one, with today's clean-up — and returns
// once they have.
func (g *Gateway) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	if g.Logger == nil {
		g.Logger = slog.Default()
	}
	g.editor = control.NewRPCConn(in, out)
	g.sessions, g.pending, g.asked, g.perms = map[string]*session{}, map[string]pending{}, map[string]pending{}, map[string]string{}
	runCtx, stopRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRuns()
	err := g.fromEditor(ctx, runCtx)
	// The editor is gone: every session ends — those being opened too, as
	// they open — and the executor hears goodbye; the delegations end done.
	g.mu.Lock()
	g.closing = true
	open := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		open = append(open, s)
	}
	g.mu.Unlock()
	for _, s := range open {
		s.link.Close()
	}
	g.wg.Wait()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (g *Gateway) newID() json.RawMessage {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tag == "" {
		// This gateway's own: an answer the executor keeps for another
		// gateway of the same session (one that ended) never matches a
		// request of this one's.
		var b [4]byte
		rand.Read(b[:])
		g.tag = hex.EncodeToString(b[:])
	}
	g.next++
	return json.RawMessage(fmt.Sprintf(`"gw-%s-%d"`, g.tag, g.next))
}

// fromEditor handles what the editor sends until it closes.
func (g *Gateway) fromEditor(ctx, runCtx context.Context) error {
	for {
		m, err := g.editor.Read()
		if errors.Is(err, control.ErrNotRPC) {
			g.Logger.Warn("a line from the editor that is no JSON-RPC message, or an ambiguous one, refused", "err", err)
			switch {
			case m == nil: // not JSON at all: JSON-RPC's parse error, and on
				g.editor.Write(control.RPCErrorResponse(json.RawMessage("null"), -32700, "Parse error", err.Error()))
			case m.IsRequest():
				g.editor.Write(control.RPCErrorResponse(m.ID, -32600, "Invalid Request", err.Error()))
			}
			continue
		}
		if err != nil {
			return err
		}
		switch {
		case m.IsRequest() && m.Method == "initialize":
			init := m.Params
			if s := g.Request.Snapshot; s == lease.SnapshotStaged || s == lease.SnapshotDiscard {
				init = withoutEditorWrites(init)
			}
			g.mu.Lock()
			g.init, g.caps = init, capabilities(init)
			g.mu.Unlock()
			res, err := g.initializeResult(ctx)
			if err != nil {
				// The executor knows its agent does not start: said now,
				// in the agent's words, not at session/new after a wait.
				g.editor.Write(control.RPCErrorResponse(m.ID, -32603, err.Error(),
					map[string]any{"hint": "the executor's operator runs `awcp-fs doctor` with the same --agent-acp: it starts the agent as serve does and says what it needs"}))
				continue
			}
			g.editor.Write(&control.RPCMessage{ID: m.ID, Result: res})
		case m.IsRequest() && m.Method == "authenticate":
			// The agent runs on the executor, one process a session:
			// the method the editor chose is run there, with the
			// executor's credentials, as each session's channel opens,
			// before its session/new, which fails in the agent's words
			// if it does (newSession). Nothing of the editor's is sent
			// but the method's id.
			var p struct {
				MethodID string `json:"methodId"`
			}
			if err := json.Unmarshal(m.Params, &p); err != nil || p.MethodID == "" {
				g.editor.Write(control.RPCErrorResponse(m.ID, -32602, "Invalid params", "authenticate needs a methodId"))
				continue
			}
			params, _ := json.Marshal(p)
			g.mu.Lock()
			g.auth = params
			g.mu.Unlock()
			g.editor.Write(&control.RPCMessage{ID: m.ID, Result: json.RawMessage(`{}`)})
		case m.IsRequest() && m.Method == "session/new":
			g.wg.Add(1)
			go func() { defer g.wg.Done(); g.newSession(ctx, runCtx, m) }()
		case m.IsRequest() && (m.Method == "session/load" || m.Method == "session/resume"):
			g.wg.Add(1)
			go func() { defer g.wg.Done(); g.loadSession(ctx, runCtx, m) }()
		case m.IsRequest() && m.Method == "session/close":
			s := g.sessionOf(m.Params)
			if s == nil {
				g.editor.Write(expired(m.ID))
				continue
			}
			s.link.Close()
			g.editor.Write(&control.RPCMessage{ID: m.ID, Result: json.RawMessage(`{}`)})
		case m.IsRequest():
			s := g.sessionOf(m.Params)
			if s == nil {
				g.editor.Write(expired(m.ID))
				continue
			}
			s.touch()
			id := g.newID()
			g.mu.Lock()
			g.pending[string(id)] = pending{s, m.ID}
			g.mu.Unlock()
			orig := m.ID
			m.ID = id
			m.Params = renameSession(m.Params, s.id, s.agentID)
			if err := s.link.Send(m); err != nil {
				g.mu.Lock()
				delete(g.pending, string(id))
				g.mu.Unlock()
				g.editor.Write(expired(orig))
			}
		case m.IsNotification() && m.Method == "$/cancel_request":
			g.cancelRequest(m)
		case m.IsNotification():
			if s := g.sessionOf(m.Params); s != nil {
				s.touch()
				m.Params = renameSession(m.Params, s.id, s.agentID)
				s.link.Send(m)
			}
		case m.IsResponse():
			g.mu.Lock()
			p, ok := g.asked[string(m.ID)]
			delete(g.asked, string(m.ID))
			title, perm := g.perms[string(m.ID)]
			delete(g.perms, string(m.ID))
			g.mu.Unlock()
			if ok {
				if perm {
					g.event(p.s.delegation, "channel.permission_returned", title+": "+permissionOutcome(m), nil)
				}
				m.ID = p.id
				p.s.link.Send(m)
			}
		}
	}
}

// cancelRequest passes the editor's $/cancel_request on to the session the
// request went to, naming it by the id it has there.
func (g *Gateway) cancelRequest(m *control.RPCMessage) {
	var p map[string]json.RawMessage
	if json.Unmarshal(m.Params, &p) != nil {
		return
	}
	g.mu.Lock()
	var to *session
	for ours, pend := range g.pending {
		if string(pend.id) == string(p["requestId"]) {
			p["requestId"], to = json.RawMessage(ours), pend.s
			break
		}
	}
	g.mu.Unlock()
	if to != nil {
		m.Params, _ = json.Marshal(p)
		to.link.Send(m)
	}
}

// initializeResult is the gateway's answer to the editor's initialize:
// the remote agent's own answer, where the executor has it, less what the
// gateway does not carry (loading a session, the editor's MCP servers);
// else what any ACP agent takes (text prompts).
func (g *Gateway) initializeResult(ctx context.Context) (json.RawMessage, error) {
	res := map[string]any{
		"protocolVersion":   1,
		"agentCapabilities": map[string]any{"promptCapabilities": map[string]any{"image": false, "audio": false, "embeddedContext": false}},
		"agentInfo":         map[string]any{"name": "awcp-ctl acp", "title": "remote agent at " + g.Request.Peer, "version": g.Version},
		"authMethods":       []any{},
	}
	if g.AgentInit != nil {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		raw, err := g.AgentInit(actx)
		cancel()
		var remote map[string]any
		switch {
		case errors.Is(err, ErrAgentFailed):
			return nil, err
		case err != nil:
			g.Logger.Warn("the remote agent's capabilities are unknown; answering initialize with the least", "err", err)
		case json.Unmarshal(raw, &remote) == nil && remote != nil:
			res = remote
		}
	}
	caps, _ := res["agentCapabilities"].(map[string]any)
	if caps == nil {
		caps = map[string]any{}
		res["agentCapabilities"] = caps
	}
	// session/load (and session/resume) take over a session whose
	// gateway is gone (a restarted editor); the agent's own loading is not
	// used: its session never ended. session/close ends one.
	caps["loadSession"] = true
	caps["sessionCapabilities"] = map[string]any{"resume": map[string]any{}, "close": map[string]any{}}
	caps["mcpCapabilities"] = map[string]any{"http": false, "sse": false}
	raw, _ := json.Marshal(res)
	return raw, nil
}

// ErrAgentFailed is what AgentInit's error wraps where the executor says
// its agent did not answer initialize: initialize is answered with it.
var ErrAgentFailed = errors.New("the executor's ACP agent did not start")

// sessionOf is the open session params name (sessionId), or nil.
func (g *Gateway) sessionOf(params json.RawMessage) *session {
	var p struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(params, &p)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sessions[p.SessionID]
}

// What the gateway holds of an agent's notifications sent before it
// answers session/new (newSession).
const (
	maxEarly      = 256
	maxEarlyBytes = 4 << 20
)

// newSession lends session/new's cwd for a session, opens its channel,
// and answers the editor with the agent's session.
func (g *Gateway) newSession(ctx, runCtx context.Context, m *control.RPCMessage) {
	var ended chan *lease.Delegation // the delegation as it ended, once it has
	fail := func(err error) {
		pe := control.AsProtocolError(err, control.CodeSetupFailed)
		data := map[string]any{"code": pe.Code, "hint": pe.Hint}
		// A channel that failed because the session did: its end says
		// why (the agent's failure, its stderr, the executor's hint),
		// where "the channel closed" says nothing.
		if del := endedWith(ended); del != nil && del.Failure != nil && del.Failure.Code != control.CodeCancelled {
			pe = &control.ProtocolError{Code: del.Failure.Code, Message: del.Failure.Message, Hint: del.Failure.Hint}
			data = map[string]any{"code": pe.Code, "hint": pe.Hint}
			if del.AgentStderr != "" {
				data["agentStderr"] = del.AgentStderr
				pe.Message += "; the agent's stderr: " + lease.TellingLine(del.AgentStderr)
			}
		}
		g.editor.Write(control.RPCErrorResponse(m.ID, -32603, pe.Code+": "+pe.Message, data))
	}
	var p struct {
		Cwd string `json:"cwd"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || !filepath.IsAbs(p.Cwd) {
		g.editor.Write(control.RPCErrorResponse(m.ID, -32602, "Invalid params", "session/new needs an absolute cwd"))
		return
	}
	req := g.Request
	req.Dir, req.Session = p.Cwd, true
	if req.Prompt == "" {
		req.Prompt = "an ACP session from an editor, in " + p.Cwd
	}
	del, err := g.Delegator.Create(req)
	if err != nil {
		fail(err)
		return
	}
	ended = make(chan *lease.Delegation, 1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		d, _ := g.Delegator.Run(runCtx, del.ID)
		ended <- d
	}()
	link := control.NewSessionLink()
	if err := g.Delegator.AttachSession(ctx, del.ID, link, true); err != nil {
		// Its own end first, which says why (a cancel first would say
		// only "cancelled"); then the cancel, if it did not end.
		fail(err)
		g.Delegator.Cancel(context.Background(), del.ID)
		return
	}
	s := &session{delegation: del.ID, cwd: p.Cwd, hide: wire.NewMatcher(del.Policy.Hide), link: link, ended: make(chan struct{})}
	if del.LocalDir != "" {
		s.cwd = del.LocalDir
	}
	s.touch()
	// The editor's initialize, then its session/new, on the channel: the
	// executor answers initialize with the agent's own answer.
	g.mu.Lock()
	init, auth := g.init, g.auth
	g.mu.Unlock()
	if init == nil {
		init = json.RawMessage(`{"protocolVersion":1,"clientCapabilities":{}}`)
	}
	// The agent's notifications before its answer, held until the
	// session is the editor's to hear: at most maxEarly of them, of
	// maxEarlyBytes in all — an executor that floods before answering
	// loses the session, not the gateway its memory.
	var early []*control.RPCMessage
	earlyBytes := 0
	call := func(id, method string, params json.RawMessage) (*control.RPCMessage, error) {
		if err := s.link.Send(&control.RPCMessage{ID: json.RawMessage(id), Method: method, Params: params}); err != nil {
			return nil, err
		}
		for {
			a, err := s.link.Read()
			if errors.Is(err, control.ErrNotRPC) {
				continue
			}
			if err != nil || a.IsResponse() && string(a.ID) == id {
				return a, err
			}
			if a.IsNotification() {
				early = append(early, a)
				earlyBytes += len(a.Params)
				if len(early) > maxEarly || earlyBytes > maxEarlyBytes {
					return nil, fmt.Errorf("the executor sent more than %d notifications (or %d bytes of them) before answering %s", maxEarly, maxEarlyBytes, method)
				}
			}
		}
	}
	answer, err := call(`"gw-init"`, "initialize", init)
	if err == nil && auth != nil {
		// The editor's authenticate, run by this session's agent on the
		// executor; its refusal is session/new's, in its words. A method
		// that waits for a browser or a person there never ends: the
		// channel is closed after AuthTimeout, and that said.
		var timedOut atomic.Bool
		timer := time.AfterFunc(g.authTimeout(), func() { timedOut.Store(true); link.Close() })
		answer, err = call(`"gw-auth"`, "authenticate", auth)
		timer.Stop()
		switch {
		case timedOut.Load():
			link.Close()
			g.editor.Write(control.RPCErrorResponse(m.ID, -32603, fmt.Sprintf("the agent's authenticate (%s) did not end within %s on the executor: a login that needs a browser or a person cannot run there", authMethod(auth), g.authTimeout()),
				map[string]any{"hint": "the executor's operator logs the agent in on the executor, or gives it an API key (docs/agents.md); then authenticate with a method that needs neither"}))
			return
		case err == nil && answer != nil && len(answer.Error) > 0:
			answer.Error = onExecutor(answer.Error)
		}
	}
	if err == nil && (answer == nil || len(answer.Error) == 0) {
		answer, err = call(`"gw-new"`, "session/new", m.Params)
	}
	if err != nil || answer == nil || len(answer.Error) > 0 {
		link.Close()
		if answer != nil && len(answer.Error) > 0 {
			g.editor.Write(&control.RPCMessage{ID: m.ID, Error: answer.Error})
			return
		}
		fail(fmt.Errorf("the session's channel: %w", err))
		return
	}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(answer.Result, &sess)
	s.agentID = sess.SessionID
	if !g.register(s) {
		return
	}
	answer.Result = renameSession(answer.Result, s.agentID, s.id)
	for _, n := range early {
		n.Params = renameSession(n.Params, s.agentID, s.id)
	}
	if g.Started != nil {
		g.Started(s.id, del.ID)
	}
	g.Logger.Info("session open", "session", s.id, "delegation", del.ID, "cwd", p.Cwd)
	g.editor.Write(&control.RPCMessage{ID: m.ID, Result: answer.Result})
	for _, n := range early {
		g.editor.Write(n)
	}
	g.event(del.ID, "channel.connected", "session "+s.id, &lease.SessionChannel{
		ID: "ch-" + shortID(del.ID) + "-" + s.id, Transport: control.SessionUpgrade, PeerRole: "executor", Capabilities: capabilities(init),
		SessionID: s.id, AgentSessionID: differs(s.agentID, s.id)})
	g.hold(s)
}

// AuthTimeout is how long an editor's authenticate may take on the
// executor, by default.
const AuthTimeout = 30 * time.Second

func (g *Gateway) authTimeout() time.Duration {
	if g.AuthTimeout > 0 {
		return g.AuthTimeout
	}
	return AuthTimeout
}

// authMethod is the method authenticate's params name.
func authMethod(params json.RawMessage) string {
	var p struct {
		MethodID string `json:"methodId"`
	}
	json.Unmarshal(params, &p)
	return p.MethodID
}

// onExecutor is an agent's refusal of authenticate, saying where it ran:
// its code and message kept, what the executor's operator does added.
func onExecutor(rpcErr json.RawMessage) json.RawMessage {
	var e map[string]any
	if json.Unmarshal(rpcErr, &e) != nil {
		return rpcErr
	}
	msg, _ := e["message"].(string)
	e["message"] = msg + " (authenticate ran on the executor, with its credentials: its operator logs the agent in there, or gives it an API key; see docs/agents.md)"
	out, _ := json.Marshal(e)
	return out
}

// register adds s to the open sessions, under the editor's id for it (the
// agent's, or made unique), unless the editor is going or the id is open
// already: s is then closed, and register reports false.
func (g *Gateway) register(s *session) bool {
	g.mu.Lock()
	closing := g.closing
	if s.id == "" { // a new session: the agent's id, unless an open one has it
		s.id = s.agentID
		if _, taken := g.sessions[s.id]; taken || s.id == "" {
			s.id = s.agentID + "@" + shortID(s.delegation)
		}
	}
	if _, taken := g.sessions[s.id]; taken {
		closing = true // a session/load of one open here already
	}
	if !closing {
		g.sessions[s.id] = s
	}
	g.mu.Unlock()
	if closing {
		s.link.Close() // opened as the editor went away
	}
	return !closing
}

// fromChannel relays what the session's channel sends until it ends: the
// session is then over, and the editor's requests still in flight on it
// are answered session_expired.
func (g *Gateway) fromChannel(s *session) {
	defer close(s.ended)
	for {
		m, err := s.link.Read()
		if errors.Is(err, control.ErrLinkDown) {
			// Dropped, not ended: the turn goes on at the executor. Back,
			// the link sends again what either end missed.
			g.Logger.Info("session channel dropped; reconnecting", "session", s.id, "delegation", s.delegation)
			g.event(s.delegation, "channel.disconnected", "the connection to the executor failed; reconnecting", nil)
			if err := g.Delegator.AttachSession(context.Background(), s.delegation, s.link, false); err != nil {
				g.Logger.Warn("session channel lost", "session", s.id, "err", err)
				g.event(s.delegation, "channel.disconnected", "lost: "+err.Error(), nil)
				break
			}
			g.Logger.Info("session channel back", "session", s.id)
			g.event(s.delegation, "channel.resumed", fmt.Sprintf("resumed after message %d received", s.link.Received()), nil)
			continue
		}
		if errors.Is(err, control.ErrNotRPC) {
			g.refuse(s, m, err)
			continue
		}
		if err != nil {
			break // the executor ended the session
		}
		s.touch()
		switch {
		case m.IsResponse():
			g.mu.Lock()
			p, ok := g.pending[string(m.ID)]
			delete(g.pending, string(m.ID))
			g.mu.Unlock()
			if ok {
				m.ID = p.id
				g.editor.Write(m)
			}
		case m.IsRequest():
			routed, err := g.routeRequest(s, m)
			if err != nil {
				g.refuse(s, m, err)
				continue
			}
			m = routed
			m.Params = renameSession(m.Params, s.agentID, s.id)
			id := g.newID()
			g.mu.Lock()
			g.asked[string(id)] = pending{s, m.ID}
			g.mu.Unlock()
			if m.Method == "session/request_permission" {
				title := permissionTitle(m.Params)
				g.mu.Lock()
				g.perms[string(id)] = title
				g.mu.Unlock()
				g.event(s.delegation, "channel.permission_forwarded", title, nil)
			}
			m.ID = id
			g.editor.Write(m)
		case m.IsNotification():
			if !routeNotification(m) {
				g.refuse(s, m, fmt.Errorf("%w: the notification %q", errRefused, m.Method))
				continue
			}
			m.Params = renameSession(m.Params, s.agentID, s.id)
			g.editor.Write(m)
		}
	}
	s.link.Close()
	g.mu.Lock()
	delete(g.sessions, s.id)
	var orphaned []json.RawMessage
	for ours, p := range g.pending {
		if p.s == s {
			orphaned = append(orphaned, p.id)
			delete(g.pending, ours)
		}
	}
	for ours, p := range g.asked {
		if p.s == s {
			delete(g.asked, ours)
		}
	}
	g.mu.Unlock()
	for _, id := range orphaned {
		g.editor.Write(expired(id))
	}
	g.Logger.Info("session closed", "session", s.id, "delegation", s.delegation)
}

// refuse answers a request from the executor that the gateway does not
// pass on (nothing for a notification), logs it and records it.
func (g *Gateway) refuse(s *session, m *control.RPCMessage, err error) {
	method := ""
	if m != nil {
		method = m.Method
	}
	g.Logger.Warn("a message from the executor refused", "session", s.id, "delegation", s.delegation, "method", method, "err", err)
	g.event(s.delegation, "channel.refused", err.Error(), nil)
	if m != nil && m.IsRequest() {
		code := -32602
		if m.Method != "fs/read_text_file" && m.Method != "fs/write_text_file" {
			code = -32601
		}
		s.link.Send(control.RPCErrorResponse(m.ID, code, "refused by the delegator's gateway", err.Error()))
	}
}

// event records a channel event of delegation id, where the gateway has
// somewhere to record it.
func (g *Gateway) event(id, name, detail string, ch *lease.SessionChannel) {
	if g.Channel != nil {
		now := time.Now().UTC()
		if ch != nil {
			ch.LastSeenAt = now
		}
		g.Channel(id, lease.SessionEvent{At: now, Event: name, Detail: detail}, ch)
	}
}

// endedWith is the delegation as it ended, once ended says so: within
// 30 s, long enough for a loaded machine (the reason is worth the wait);
// nil without one.
func endedWith(ended <-chan *lease.Delegation) *lease.Delegation {
	if ended == nil {
		return nil
	}
	select {
	case del := <-ended:
		return del
	case <-time.After(30 * time.Second):
		return nil
	}
}
