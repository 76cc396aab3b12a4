package delegator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// OpenSession opens a connection of session delegation id's channel,
// once it runs: to the executor's agent relay, over which an editor's ACP
// session goes (control/session.go). received is how many messages of
// the session this end has received (0 at first; more when it reconnects:
// control/sessionlink.go).
func (d *Delegator) OpenSession(ctx context.Context, id string, received uint64) (net.Conn, error) {
	return d.openSession(ctx, id, strconv.FormatUint(received, 10))
}

func (d *Delegator) openSession(ctx context.Context, id, received string) (net.Conn, error) {
	del, err := d.store.Delegation(id)
	if err != nil {
		return nil, err
	}
	if del.Session == "" {
		return nil, control.Errorf(control.CodeUsage, "delegation %s is a task, not a session", id)
	}
	return d.peer(del).upgrade(ctx, "/awcp/tasks/"+id+"/acp", control.SessionUpgrade, map[string]string{
		control.SessionKeyHeader: del.SessionKey, control.SessionReceivedHeader: received})
}

// FindSession is the live editor's session delegation of ACP session
// sessionID in dir, whose gateway is gone: what a restarted editor's
// session/load takes over. One another gateway still holds is refused.
func (d *Delegator) FindSession(sessionID, dir string) (*lease.Delegation, error) {
	ds, err := d.store.Delegations()
	if err != nil {
		return nil, err
	}
	phys, _ := filepath.EvalSymlinks(dir)
	for _, del := range ds {
		ch := del.SessionChannel
		if del.State.Terminal() || del.Session == "" || del.SessionDriven || ch == nil || ch.SessionID != sessionID ||
			(del.LocalDir != dir && del.LocalDir != phys) {
			continue
		}
		if del.OwnerPID != os.Getpid() && ownerAlive(del) {
			return nil, control.Errorf(control.CodeUsage, "session %s is held by a running gateway (pid %d)", sessionID, del.OwnerPID).
				WithHint("a session is taken over only once its gateway has ended")
		}
		return del, nil
	}
	return nil, lease.ErrNotFound
}

// TakeOverSession connects link, new, to session delegation id's channel
// in place of a gateway that is gone: the executor sends again all it
// keeps, and link counts on from there (control.SessionLink.Rebase).
func (d *Delegator) TakeOverSession(ctx context.Context, id string, link *control.SessionLink) error {
	conn, err := d.openSession(ctx, id, control.FreshReceived)
	if err != nil {
		return err
	}
	r, rc, err := control.ReadResumeLine(conn)
	if err == nil {
		link.Rebase(r.Received, r.From)
		err = link.Attach(conn, rc, r.Received, false)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("the session's channel: %w", err)
	}
	return nil
}

// AttachSession connects link to session delegation id's channel: at
// first (first) once the delegation runs, waiting up to two minutes for
// that; later again after a drop, for as long as the delegation lives.
// The link sends again what the executor has not received.
func (d *Delegator) AttachSession(ctx context.Context, id string, link *control.SessionLink, first bool) error {
	for deadline := time.Now().Add(2 * time.Minute); ; {
		del, err := d.store.Delegation(id)
		if err != nil {
			return err
		}
		switch {
		case del.State == lease.Running:
			conn, err := d.OpenSession(ctx, id, link.Received())
			if err != nil {
				if first {
					return err
				}
				d.log.Debug("session channel not back yet", "delegation", id, "err", err)
				break
			}
			received, rc, err := control.ReadResume(conn)
			if err == nil {
				err = link.Attach(conn, rc, received, false)
			}
			if err != nil {
				conn.Close()
				return fmt.Errorf("the session's channel: %w", err)
			}
			return nil
		case del.State.Terminal():
			if f := del.Failure; f != nil {
				return &control.ProtocolError{Code: f.Code, Message: f.Message, Hint: f.Hint}
			}
			return fmt.Errorf("delegation %s ended %s", id, del.State)
		}
		if first && time.Now().After(deadline) {
			return fmt.Errorf("delegation %s: no channel within 2 minutes", id)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("delegation %s: %w", id, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Say queues prompt as the next turn of driven session id (its driver,
// in whichever process holds the session, sends it); by says who, for
// the record. It returns the turn's number.
func (d *Delegator) Say(id, prompt, by string) (int, error) {
	if prompt == "" {
		return 0, control.Errorf(control.CodeUsage, "the prompt is empty").WithHint("say what the agent should do next")
	}
	var n int
	_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		if err := sessionOpen(del); err != nil {
			return err
		}
		var err error
		n, err = del.QueueTurn(prompt, by, d.store.Now())
		if errors.Is(err, lease.ErrTurnBusy) {
			hint := "wait for it to end (awcp-ctl output ID --block), then say the next"
			if p := del.PendingPermission(); p != nil {
				hint = fmt.Sprintf("it waits for a permission decision: answer %s with one of %s", p.RequestID, lease.Choices(p.Options))
			}
			return control.Errorf(control.CodeUsage, "%s", err.Error()).WithHint(hint)
		}
		return err
	})
	return n, err
}

// EndSession asks the driver of session id to close it: the agent's
// session ends, then the delegation, done, with today's clean-up.
func (d *Delegator) EndSession(id string) error {
	_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		if err := sessionOpen(del); err != nil {
			return err
		}
		del.SessionClose = true
		return nil
	})
	return err
}

// sessionOpen refuses what is not a live session driven from the store;
// one that ended says session_expired (seed 003 §6.4).
func sessionOpen(del *lease.Delegation) error {
	switch {
	case !del.SessionDriven:
		return control.Errorf(control.CodeUsage, "delegation %s is not a session", del.ID).
			WithHint("start one with a session: export --session new, or delegate with session: true")
	case del.State.Terminal() || del.SessionClose:
		pe := control.Errorf(control.CodeDeclined, "session_expired: session %s is over (its delegation is %s)", del.ID, del.State).
			WithHint("start a new session")
		pe.Reason = ReasonSessionExpired
		return pe
	}
	return nil
}

// ReasonSessionExpired is why a turn or an answer for a session that has
// ended is refused.
const ReasonSessionExpired = "session_expired"

// decideHere records the user's answer to a permission request of a
// driven session's turn: its driver gives it to the agent. It reports
// whether requestID is such a request.
func (d *Delegator) decideHere(id, requestID, optionID, answerer string) (bool, error) {
	found := false
	_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		if !del.SessionDriven {
			return errUnchanged
		}
		for i := range del.Permissions {
			p := &del.Permissions[i]
			if p.RequestID != requestID {
				continue
			}
			found = true
			if p.Outcome != control.PermissionPending {
				return control.Errorf(control.CodeUsage, "request %s was already decided (%s)", requestID, p.Outcome)
			}
			for _, o := range p.Options {
				if o.OptionID == optionID {
					now := d.store.Now()
					p.Outcome, p.OptionID, p.How, p.Answerer, p.DecidedBy, p.At, p.DecidedAt =
						control.PermissionSelected, optionID, "user", answerer, answerer, now, now
					p.Holds = lease.HoldsFor(p.Options, optionID)
					return nil
				}
			}
			return control.Errorf(control.CodeUsage, "request %s has no option %q", requestID, optionID).
				WithHint("choose one of " + lease.Choices(p.Options))
		}
		return errUnchanged
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return found, err
}

// RecordChannel records a channel event of session delegation id (seed
// 002), with the channel's identity when ch is set.
func (d *Delegator) RecordChannel(id string, ev lease.SessionEvent, ch *lease.SessionChannel) {
	_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		if ch != nil {
			del.SessionChannel = ch
		}
		del.AddSessionEvent(ev)
		return nil
	})
	if err != nil {
		d.log.Warn("record a session's channel event", "delegation", id, "err", err)
	}
}

// RenewSession keeps session id's lease running while the session is
// used: once less than half of its TTL is left, the lease is asked to run
// a whole TTL from now — the transport's access first (a live mount's
// grant and a new certificate), then the executor, which may grant less —
// and the record takes the end granted. It returns the lease's end.
func (d *Delegator) RenewSession(ctx context.Context, id string) (time.Time, error) {
	del, err := d.store.Delegation(id)
	if err != nil {
		return time.Time{}, err
	}
	if del.Session == "" || del.State != lease.Running {
		return del.ExpiresAt, fmt.Errorf("delegation %s is not a running session (%s)", id, del.State)
	}
	ttl := control.Seconds(del.TTLSeconds)
	now := d.store.Now()
	if del.ExpiresAt.Sub(now) > ttl/2 {
		return del.ExpiresAt, nil
	}
	l := lent(del)
	l.ExpiresAt = now.Add(ttl)
	req := control.RenewRequest{SessionKey: del.SessionKey, TTLSeconds: del.TTLSeconds}
	if r, ok := d.opts.Transports[del.Transport].(control.Renewer); ok {
		if req.Credential, err = r.Renew(ctx, l); err != nil {
			return del.ExpiresAt, err
		}
	}
	granted, err := d.peer(del).Renew(ctx, id, req)
	if err != nil {
		return del.ExpiresAt, fmt.Errorf("renew the lease at the executor: %w", err)
	}
	if granted.After(l.ExpiresAt) {
		granted = l.ExpiresAt // never beyond what this side lends
	}
	_, err = d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		if del.State.Terminal() {
			return errUnchanged
		}
		if granted.After(del.ExpiresAt) {
			del.ExpiresAt = granted
		}
		del.AddSessionEvent(lease.SessionEvent{At: now, Event: "lease.renewed", Detail: "until " + control.Timestamp(granted)})
		return nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return del.ExpiresAt, err
	}
	d.sched.Kick()
	d.log.Info("session lease renewed", "delegation", id, "until", granted)
	return granted, nil
}
