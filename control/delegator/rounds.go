package delegator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/untrusted"
	"github.com/awcp/awcp/lease"
)

// A driven session (export --session, MCP's delegate with a session)
// with an executor whose agent is not an ACP agent is a session of
// rounds: its first turn is the task, each next one a CONTINUE on the
// still-lent workspace, its end a CLOSE (the reference's rounds,
// docs/interop.md). Our executor grants it as one (session "rounds");
// the reference's development line, which reads no session request,
// shows it only by its round_done — its release, which knows no rounds,
// ends the session after its first turn, and the delegation says so.

// PreferRounds says whether driven session id goes as rounds: its
// executor does not say it holds ACP sessions (its manifest; the
// reference has none). The record is then made a session of rounds.
func (d *Delegator) PreferRounds(ctx context.Context, id string) (bool, error) {
	del, err := d.store.Delegation(id)
	if err != nil || !del.SessionDriven || del.Session != control.SessionACP || del.State != lease.Created {
		return err == nil && del.Session == control.SessionRounds, err
	}
	if del.PeerProtocol != "" {
		return false, nil // an A2A agent's session is refused at Create
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	m, merr := d.peer(del).Manifest(mctx)
	cancel()
	if merr == nil && m.AWCP != nil && slices.Contains(m.AWCP.Sessions, control.SessionACP) {
		return false, nil
	}
	_, err = d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		del.Session = control.SessionRounds
		del.Notes = append(del.Notes, "the executor's agent holds no ACP session: the session's turns are its rounds (CONTINUE), its end a CLOSE")
		return nil
	})
	return err == nil, err
}

// DriveRounds runs session of rounds id until it ends: the delegation
// (handshake, START, its events) and, from its record, each queued turn
// after the first as CONTINUE, and CLOSE when the record asks it or no
// turn came for idle (0: never).
func (d *Delegator) DriveRounds(ctx context.Context, id string, idle, poll time.Duration) error {
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		if _, err := d.Run(ctx, id); err != nil {
			d.log.Warn("session of rounds", "delegation", id, "err", err)
		}
	}()
	closing := false
	for {
		select {
		case <-ran:
			return nil
		case <-ctx.Done():
			<-ran
			return nil
		case <-time.After(poll):
		}
		del, err := d.store.Delegation(id)
		if err != nil {
			<-ran
			return err
		}
		if del.State != lease.Running || closing {
			continue
		}
		t := del.LastTurn()
		switch {
		case t != nil && t.N == 1 && t.State == lease.TurnQueued:
			// The task the INVITE carried: it runs now.
			d.setTurn(id, 1, func(t *lease.Turn) { t.State = lease.TurnRunning })
		case del.SessionClose && (t == nil || t.Ended()):
			closing = d.sendClose(ctx, del, "as asked")
		case t != nil && t.Ended() && idle > 0 && d.store.Now().Sub(t.EndedAt) > idle:
			closing = d.sendClose(ctx, del, fmt.Sprintf("idle for %s", idle))
		case t != nil && t.State == lease.TurnQueued:
			d.sendRound(ctx, del, t)
		case del.ExpiresAt.Sub(d.store.Now()) < control.Seconds(del.TTLSeconds)/2:
			// In use, by the rounds it waits for: its lease runs on.
			if _, err := d.RenewSession(ctx, id); err != nil {
				d.log.Debug("renew a session of rounds", "delegation", id, "err", err)
			}
		}
	}
}

// sendRound sends queued turn t as round t.N: it runs, or it failed.
func (d *Delegator) sendRound(ctx context.Context, del *lease.Delegation, t *lease.Turn) {
	first, _, _ := strings.Cut(strings.TrimSpace(t.Prompt), "\n")
	m := &control.Continue{BaseMessage: control.BaseMessage{Version: control.Version, Type: control.TypeContinue, DelegationID: del.ID},
		Task: control.Task{Description: first, Prompt: t.Prompt}, Round: t.N}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := d.peer(del).Continue(cctx, m)
	cancel()
	now := d.store.Now()
	d.setTurn(del.ID, t.N, func(t *lease.Turn) {
		if err != nil {
			t.State, t.Error, t.EndedAt = lease.TurnFailed, "the executor did not take the round: "+err.Error(), now
			return
		}
		t.State = lease.TurnRunning
	})
	if err == nil {
		d.log.Info("round sent", "delegation", del.ID, "round", t.N)
	}
}

// sendClose sends CLOSE, bounded, and reports whether the executor took
// it; its done ends the delegation.
func (d *Delegator) sendClose(ctx context.Context, del *lease.Delegation, why string) bool {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := d.peer(del).Close(cctx, del.ID); err != nil {
		d.log.Warn("CLOSE a session of rounds", "delegation", del.ID, "err", err)
		return false
	}
	d.log.Info("session of rounds closed", "delegation", del.ID, "why", why)
	return true
}

// setTurn changes turn n of id's record.
func (d *Delegator) setTurn(id string, n int, fn func(*lease.Turn)) {
	_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		for i := range del.Turns {
			if del.Turns[i].N == n {
				fn(&del.Turns[i])
				return nil
			}
		}
		return errUnchanged
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		d.log.Warn("record a round", "delegation", id, "turn", n, "err", err)
	}
}

// endRoundTurn records round n's end in a session of rounds: its turn is
// done, the round's words its reply — or failed, with why, where the
// executor says its agent failed (the session goes on).
func endRoundTurn(del *lease.Delegation, ev *control.Event, now time.Time) {
	for i := range del.Turns {
		t := &del.Turns[i]
		if t.N != ev.Round || t.Ended() {
			continue
		}
		if ev.Code != "" {
			t.State, t.Error, t.EndedAt = lease.TurnFailed, untrusted.Clip(ev.Summary, 4096), now
			continue
		}
		t.State, t.StopReason, t.Reply, t.EndedAt = lease.TurnDone, "end_turn", lease.KeepReply(ev.Summary), now
	}
}
