package executor

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/httpserve"
	"github.com/awcp/awcp/lease"
)

// The executor's half of a session delegation (control/session.go): the
// INVITE's session is granted when the agent speaks ACP, and the
// delegator's channel, once the delegation runs, is handed to the agent's
// relay (acp.Worker.Session) in place of a prompt.

// SessionRunner runs a session delegation's agent: it relays the first
// channel that arrives until the editor's session is over. *acp.Worker.
type SessionRunner interface {
	Session(ctx context.Context, t agent.Task, h agent.Hooks, channels <-chan control.SessionChannel, wait time.Duration) (*agent.Result, error)
}

// SetACPAgent records the ACP agent's answer to initialize, for the
// manifest (awcp.acp_agent): an editor's gateway tells the editor what
// the agent can do before any session exists.
func (e *Executor) SetACPAgent(init json.RawMessage) {
	e.mu.Lock()
	e.acpAgent = init
	e.mu.Unlock()
}

func (e *Executor) acpAgentInit() json.RawMessage {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.acpAgent
}

// SetACPAgentError records why the ACP agent did not answer initialize,
// for the manifest (awcp.acp_agent_error).
func (e *Executor) SetACPAgentError(why string) {
	e.mu.Lock()
	e.acpAgentError = why
	e.mu.Unlock()
}

func (e *Executor) acpAgentFailure() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.acpAgentError
}

// sessionProtocols is what the manifest offers.
func (e *Executor) sessionProtocols() []string {
	var ps []string
	if e.opts.Sessions != nil {
		ps = append(ps, control.SessionACP)
	}
	if e.opts.RoundWait > 0 {
		ps = append(ps, control.SessionRounds)
	}
	return ps
}

// admitSession checks an INVITE's session request: nil, or the refusal.
func (e *Executor) admitSession(inv *control.Invite) *control.ProtocolError {
	if inv.Session == nil {
		return nil
	}
	if err := inv.Session.Check(); err != nil {
		return control.Errorf(control.CodeDeclined, "INVITE's %v", err)
	}
	switch {
	case inv.Session.Protocol == control.SessionRounds && e.opts.RoundWait <= 0:
		return control.Errorf(control.CodeDepMissing, "this executor takes no rounds (--round-wait 0)").
			WithHint("delegate a task (awcp-ctl export)")
	case inv.Session.Protocol == control.SessionRounds && inv.Requirements != nil && inv.Requirements.Transport == control.TransportGit:
		return control.Errorf(control.CodeDepMissing, "rounds are taken over the archive or the live mount, not the git transport").
			WithHint("--transport archive, or live")
	case inv.Session.Protocol == control.SessionACP && e.opts.Sessions == nil:
		return control.Errorf(control.CodeDepMissing, "this executor's agent does not speak ACP: it runs tasks, not sessions").
			WithHint("delegate a task (awcp-ctl export), or use an executor started with --agent-acp")
	}
	return nil
}

// handleSession is GET /awcp/tasks/{id}/acp with Upgrade: awcp-acp: the
// delegator's channel to the session's agent. The key the INVITE carried
// is checked before anything is read; one channel at a time.
func (e *Executor) handleSession(w http.ResponseWriter, r *http.Request) {
	id, ok := e.pathID(w, r)
	if !ok {
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), control.SessionUpgrade) {
		w.Header().Set("Upgrade", control.SessionUpgrade)
		writeError(w, http.StatusUpgradeRequired, control.NewError(id, control.CodeDeclined, "the session endpoint needs Upgrade: "+control.SessionUpgrade, ""))
		return
	}
	a, err := e.store.Assignment(id)
	if err != nil || a.Session == "" {
		writeError(w, http.StatusNotFound, control.NewError(id, control.CodeDeclined, "no session delegation "+id+" here", ""))
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(control.SessionKeyHeader)), []byte(a.SessionKey)) != 1 {
		e.log.Warn("session channel refused: wrong key", "delegation", id, "remote", r.RemoteAddr)
		e.refuseAuth(w, id, "the session key is not this delegation's")
		return
	}
	var received uint64
	fresh := r.Header.Get(control.SessionReceivedHeader) == control.FreshReceived
	if h := r.Header.Get(control.SessionReceivedHeader); h != "" && !fresh {
		if received, err = strconv.ParseUint(h, 10, 64); err != nil {
			writeError(w, http.StatusBadRequest, control.NewError(id, control.CodeDeclined, control.SessionReceivedHeader+" must be a number", ""))
			return
		}
	}
	e.mu.Lock()
	t := e.tasks[id]
	e.mu.Unlock()
	if t == nil || t.channel == nil || a.State != lease.Running {
		writeError(w, http.StatusConflict, control.NewError(id, control.CodeDeclined, "the session is not running (not yet, or no more)", "open the channel once the delegation runs"))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, http.StatusInternalServerError, control.NewError(id, control.CodeDeclined, "the connection cannot be upgraded", "use HTTP/1.1"))
		return
	}
	conn.SetDeadline(time.Time{}) // the request's deadlines: the session has none
	if brw.Reader.Buffered() > 0 {
		conn.Close() // nothing may come before the switch
		return
	}
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + control.SessionUpgrade + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		return
	}
	// Handed over under the lock that the task's end takes to leave: a
	// channel given here is taken (a newer one replaces the live one: the
	// gateway reconnected), or closed by that end.
	sent := false
	e.mu.Lock()
	if e.tasks[id] == t {
		select {
		case t.channel <- control.SessionChannel{Conn: conn, Received: received, Fresh: fresh}:
			sent = true
		default: // one waits to be taken already
		}
	}
	e.mu.Unlock()
	if !sent {
		e.log.Warn("session channel refused: the session has ended, or another is being taken", "delegation", id)
		conn.Close()
		return
	}
	e.log.Info("session channel open", "delegation", id)
}

// handleRenew renews a running session's lease (control.RenewPath): to
// ttlSeconds from now, at most MaxTTL, with the mount's credential
// replaced for its next connections. A task's lease is not renewed.
func (e *Executor) handleRenew(w http.ResponseWriter, r *http.Request) {
	id, ok := e.pathID(w, r)
	if !ok {
		return
	}
	var req control.RenewRequest
	body := httpserve.LimitBody(w, r, 64<<10, httpserve.DefaultBodyGrace)
	err := json.NewDecoder(body).Decode(&req)
	body.Finished(w, err)
	if err != nil || req.TTLSeconds <= 0 {
		writeError(w, http.StatusBadRequest, control.NewError(id, control.CodeDeclined, "the body must be {sessionKey, ttlSeconds > 0, credential?}", ""))
		return
	}
	a, err := e.store.Assignment(id)
	if err != nil || a.Session == "" {
		writeError(w, http.StatusNotFound, control.NewError(id, control.CodeDeclined, "no session delegation "+id+" here", "only a session's lease is renewed"))
		return
	}
	if subtle.ConstantTimeCompare([]byte(req.SessionKey), []byte(a.SessionKey)) != 1 {
		e.log.Warn("lease renewal refused: wrong session key", "delegation", id, "remote", r.RemoteAddr)
		e.refuseAuth(w, id, "the session key is not this delegation's")
		return
	}
	if a.State != lease.Running {
		writeError(w, http.StatusConflict, control.NewError(id, control.CodeDeclined, "the session is not running", ""))
		return
	}
	if req.Credential != nil {
		taker, ok := e.transport(a.Transport).(control.CredentialTaker)
		if !ok {
			writeError(w, http.StatusBadRequest, control.NewError(id, control.CodeDeclined, "the "+a.Transport+" transport takes no credential", ""))
			return
		}
		if err := taker.TakeCredential(id, req.Credential); err != nil {
			writeError(w, http.StatusBadRequest, control.NewError(id, control.CodeDeclined, err.Error(), ""))
			return
		}
	}
	now := e.store.Now()
	granted := now.Add(min(control.Seconds(req.TTLSeconds), e.opts.MaxTTL))
	a, err = e.store.UpdateAssignment(id, func(a *lease.Assignment) error {
		if a.State != lease.Running {
			return fmt.Errorf("the session is no longer running (%s)", a.State)
		}
		if granted.After(a.ExpiresAt) {
			a.ExpiresAt = granted
		}
		return nil
	})
	if err != nil {
		writeError(w, http.StatusConflict, control.NewError(id, control.CodeDeclined, err.Error(), ""))
		return
	}
	e.sched.Kick()
	e.log.Info("session lease renewed", "delegation", id, "until", a.ExpiresAt)
	httpserve.WriteJSON(w, http.StatusOK, control.RenewResponse{OK: true, ExpiresAt: control.Timestamp(a.ExpiresAt)})
}
