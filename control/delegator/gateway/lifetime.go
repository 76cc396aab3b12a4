package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/awcp/awcp/control"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// A session's life at the gateway: held while the editor uses it (its idle
// TTL, its lease), and taken over from a gateway that died.

// hold keeps s open — its idle TTL, its lease — and relays its channel
// until it ends.
func (g *Gateway) hold(s *session) {
	if g.IdleTTL > 0 {
		g.wg.Add(1)
		go func() { defer g.wg.Done(); g.expireIdle(s) }()
	}
	g.wg.Add(1)
	go func() { defer g.wg.Done(); g.keepLease(s) }()
	g.fromChannel(s)
}

// loadSession is a restarted editor's session/load (or session/resume) of a session its
// previous gateway held: the delegation is followed from this process,
// its channel connected anew, and the session goes on — a turn that was
// running runs on, and what the agent sends from here reaches this
// editor.
func (g *Gateway) loadSession(ctx, runCtx context.Context, m *control.RPCMessage) {
	var p struct {
		SessionID string `json:"sessionId"`
		Cwd       string `json:"cwd"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || p.SessionID == "" || !filepath.IsAbs(p.Cwd) {
		g.editor.Write(control.RPCErrorResponse(m.ID, -32602, "Invalid params", "session/load needs a sessionId and an absolute cwd"))
		return
	}
	del, err := g.Delegator.FindSession(p.SessionID, p.Cwd)
	if err != nil {
		var pe *control.ProtocolError
		if errors.As(err, &pe) {
			g.editor.Write(control.RPCErrorResponse(m.ID, -32603, pe.Code+": "+pe.Message, map[string]any{"code": pe.Code, "hint": pe.Hint}))
			return
		}
		g.editor.Write(expired(m.ID))
		return
	}
	g.wg.Add(1)
	go func() { defer g.wg.Done(); g.Delegator.Run(runCtx, del.ID) }()
	link := control.NewSessionLink()
	if err := g.Delegator.TakeOverSession(ctx, del.ID, link); err != nil {
		g.Logger.Warn("session not taken over", "session", p.SessionID, "delegation", del.ID, "err", err)
		g.editor.Write(expired(m.ID))
		return
	}
	s := &session{id: p.SessionID, agentID: del.SessionChannel.AgentSessionID, delegation: del.ID, cwd: del.LocalDir,
		hide: wire.NewMatcher(del.Policy.Hide), link: link, ended: make(chan struct{})}
	if s.agentID == "" {
		s.agentID = s.id
	}
	s.touch()
	if !g.register(s) {
		return
	}
	g.Logger.Info("session taken over", "session", s.id, "delegation", del.ID, "previous gateway", del.OwnerPID)
	g.editor.Write(&control.RPCMessage{ID: m.ID, Result: json.RawMessage(`{}`)})
	ch := *del.SessionChannel
	g.event(del.ID, "channel.resumed", fmt.Sprintf("session %s taken over by a new gateway (pid %d; the previous one, pid %d, had ended)", s.id, os.Getpid(), del.OwnerPID), &ch)
	g.hold(s)
}

// expireIdle closes s once it has been idle for IdleTTL: nothing went
// through it, and no request of the editor's waits on it.
func (g *Gateway) expireIdle(s *session) {
	t := time.NewTicker(max(min(g.IdleTTL/4, time.Minute), 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.ended:
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, s.last.Load())) < g.IdleTTL || g.inFlight(s) {
			continue
		}
		g.Logger.Info("session idle; ending it", "session", s.id, "delegation", s.delegation, "idle", g.IdleTTL)
		s.link.Close()
		return
	}
}

// keepLease renews s's lease for as long as s is open — the editor is
// connected, and the session in use within IdleTTL — checking again at
// a quarter of what is left, and at least every minute.
func (g *Gateway) keepLease(s *session) {
	wait := time.Duration(0)
	for {
		select {
		case <-s.ended:
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		end, err := g.Delegator.RenewSession(ctx, s.delegation)
		cancel()
		wait = min(max(time.Until(end)/4, time.Second), time.Minute)
		if err != nil {
			g.Logger.Warn("the session's lease was not renewed", "session", s.id, "delegation", s.delegation, "err", err)
			wait = min(wait, 5*time.Second)
		}
	}
}

// inFlight reports whether a request of the editor's waits on s.
func (g *Gateway) inFlight(s *session) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.pending {
		if p.s == s {
			return true
		}
	}
	return false
}
