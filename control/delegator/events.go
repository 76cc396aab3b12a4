package delegator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// heldSnapshot is a snapshot event's ZIP, kept until done names it.
type heldSnapshot struct {
	id string // the executor's snapshotId
	control.Spooled
	checksum    string // resultChecksum, if the executor sent one
	recommended bool
}

// follow reads the event stream, reconnecting with Last-Event-ID, until the
// delegation is terminal or ctx is done. The last event id is kept here and
// stored with each transition, and once more whenever the stream breaks;
// progress lines are not written to the store one by one (after a crash of
// this process they may be shown again). Along the way its follower keeps
// the executor's channel (channel.go): unreachable since when, missing,
// idle, and events the executor could no longer replay.
func (d *Delegator) follow(ctx context.Context, id string, started <-chan struct{}) {
	defer d.storeProgress(id)
	del, err := d.store.Delegation(id)
	if err != nil {
		return
	}
	f := d.newFollower(del)
	backoff := 100 * time.Millisecond
	idleDone := make(chan struct{})
	idleCtx, stopIdle := context.WithCancel(ctx)
	go func() { defer close(idleDone); f.watchIdle(idleCtx) }()
	defer func() { stopIdle(); <-idleDone }()
	for {
		del, err := d.store.Delegation(id)
		if err != nil || del.State.Terminal() {
			return
		}
		f.last = max(f.last, del.LastEventID)
		resumed := f.last
		opened := func() {
			f.lastEvent.Store(time.Now().UnixNano())
			if !f.awaySince.IsZero() || f.state() == lease.ChannelMissing {
				d.log.Info("executor reachable again", "delegation", id, "resumed after event", resumed)
				f.backToLive()
			}
			f.awaySince = time.Time{}
		}
		events := func(fn func(seq uint64, ev *control.Event) error) error {
			pc := d.peer(del)
			pc.Opened = opened
			return pc.Events(ctx, id, f.last, fn)
		}
		if del.PeerProtocol == lease.PeerA2A && d.opts.A2A != nil {
			events = func(fn func(seq uint64, ev *control.Event) error) error {
				opened()
				return d.opts.A2A.Follow(ctx, del, f.last, d.recordA2ATask(id), fn)
			}
		}
		err = events(func(seq uint64, ev *control.Event) error {
			backoff = 100 * time.Millisecond
			if seq != 0 && seq <= f.last {
				return nil // seen before a reconnect
			}
			if seq != 0 && f.last != 0 && seq > f.last+1 {
				f.recordGap(f.last+1, seq-1)
			}
			f.lastEvent.Store(time.Now().UnixNano())
			if err := f.handle(ctx, seq, ev); err != nil {
				return err
			}
			f.last = max(f.last, seq)
			return nil
		})
		if ctx.Err() != nil {
			d.keepLastEvent(id, f.last, del.LastEventID)
			return
		}
		var pe *control.ProtocolError
		var away *unreachableError
		var refused *streamRefused
		switch {
		case del.PeerProtocol == lease.PeerA2A && errors.As(err, &pe):
			// An A2A peer's errors are its own: one it means ends the
			// delegation (A2APeer.Follow), whatever its code.
			d.fail(ctx, id, pe)
			return
		case !answered(started) && (errors.As(err, &refused) || errors.As(err, &away)):
			// START is out: the executor may not know the task yet.
			backoff = 100 * time.Millisecond
		case errors.As(err, &pe) && pe.Code == control.CodeAuthFailed:
			// The executor no longer takes the token (it restarted with
			// another): unreachable as much as a network error is.
			away = &unreachableError{err: fmt.Errorf("the executor refused the token: %s", pe.Message)}
			if f.away(ctx, away) {
				return
			}
		case errors.As(err, &refused) && errors.As(err, &pe) && pe.Code == control.CodeDeclined:
			// The executor answers and does not know the delegation.
			f.set(lease.ChannelMissing, "the executor does not know this delegation: "+refused.Error(), d.store.Now())
		case errors.As(err, &pe) && pe.Code != control.CodeDeclined:
			d.fail(ctx, id, pe)
			return
		case errors.As(err, &away):
			if f.away(ctx, away) {
				return
			}
		case err != nil && !errors.Is(err, control.ErrStreamEnded):
			d.log.Debug("event stream broke off; reconnecting", "delegation", id, "err", err)
		}
		d.keepLastEvent(id, f.last, del.LastEventID)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// away records that the executor cannot be reached (since awaySince,
// set now if zero), and fails the delegation once that has lasted the
// reconnect bound; it reports whether it did.
func (f *follower) away(ctx context.Context, away *unreachableError) bool {
	d, id := f.d, f.id
	if f.awaySince.IsZero() {
		f.awaySince = time.Now()
		d.log.Warn("executor unreachable; retrying", "delegation", id, "err", away.err)
	}
	if f.state() != lease.ChannelUnreachable {
		// The first error of an outage says why; the retries' errors
		// (a new port in each) would only fill the log.
		f.set(lease.ChannelUnreachable, shortError(away.err), f.awaySince)
	}
	if time.Since(f.awaySince) < d.opts.ReconnectBound {
		return false
	}
	d.fail(ctx, id, control.Errorf(control.CodeTaskFailed, "the executor has been unreachable since %s (%v)",
		f.awaySince.UTC().Format(time.RFC3339), away.err).
		WithHint("check that awcp-fs still runs on the executor; the delegation's access is closed"))
	return true
}

// keepLastEvent stores the last event id seen, progress lines included,
// so that a later follower resumes after it; nothing is written if it is
// stored already (an executor away, retried every few seconds, sends
// nothing new).
func (d *Delegator) keepLastEvent(id string, last, stored uint64) {
	if last <= stored {
		return
	}
	d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		if del.State.Terminal() || last <= del.LastEventID {
			return errUnchanged
		}
		del.LastEventID = last
		return nil
	})
}

// progressEvery is how often the progress lines held are stored.
const progressEvery = 250 * time.Millisecond

// watchIdle shows the channel idle once the executor has sent no event
// for IdleAfter while running, and stores the progress lines held, until
// ctx ends.
func (f *follower) watchIdle(ctx context.Context) {
	d := f.d
	t := time.NewTicker(min(d.opts.IdleAfter/4, progressEvery))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.storeProgress(f.id)
		quiet := time.Since(time.Unix(0, f.lastEvent.Load()))
		if quiet >= d.opts.IdleAfter && f.state() == lease.ChannelRunning {
			f.set(lease.ChannelIdle, fmt.Sprintf("no event from the executor for %s; the task has not finished", d.opts.IdleAfter),
				time.Unix(0, f.lastEvent.Load()))
		}
	}
}

// answered reports whether START was answered (started closed, or nil).
func answered(started <-chan struct{}) bool {
	if started == nil {
		return true
	}
	select {
	case <-started:
		return true
	default:
		return false
	}
}

// handle applies one new event: one read of the record, and one write —
// the channel's state is the follower's, written only when it changes.
// The event's id is stored in the same transaction as the transition it
// causes, so a restarted delegator never applies an event twice.
func (f *follower) handle(ctx context.Context, seq uint64, ev *control.Event) error {
	d, id := f.d, f.id
	if ev.Type == control.EventChannel {
		return nil // this delegator's own, never the executor's to send
	}
	if d.opts.Progress != nil {
		d.opts.Progress(id, ev)
	}
	if st := f.state(); st == lease.ChannelIdle || st == lease.ChannelMissing || st == lease.ChannelUnreachable {
		f.backToLive() // it spoke
	}
	if ev.Type == control.EventStatus && ev.Status == control.StatusProgress && strings.HasPrefix(ev.Message, control.TurnEndedPrefix) {
		// Every line before it, stored now; then the word that the turn
		// ended, which the session's driver waits for to record its end.
		d.storeProgress(id)
		_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
			if seq != 0 && seq <= del.LastEventID {
				return errUnchanged
			}
			del.TurnEndsSeen++
			del.LastEventID = seq
			return nil
		})
		if errors.Is(err, errUnchanged) {
			err = nil
		}
		return err
	}
	if ev.Type == control.EventStatus && ev.Status == control.StatusProgress {
		d.holdProgress(id, seq, ev)
		return nil // stored within progressEvery, not one write a line
	}
	d.storeProgress(id)
	seen := func(del *lease.Delegation) error { del.LastEventID = seq; return nil }
	del, err := d.store.Delegation(id)
	if err != nil {
		return err
	}
	if seq != 0 && seq <= del.LastEventID {
		return nil
	}
	switch ev.Type {
	case control.EventStatus:
		if del.State == lease.Started {
			running := func(del *lease.Delegation) error {
				// What confines the executor's agent, as it says.
				if _, how, ok := strings.Cut(ev.Message, "sandbox: "); ok && how != "" {
					del.Notes = append(del.Notes, "executor sandbox: "+how)
				}
				return seen(del)
			}
			if _, err = d.store.FireDelegation(id, lease.SetupComplete, "executor running", running); err == nil {
				f.mu.Lock()
				f.running = true
				f.mu.Unlock()
				f.backToLive()
			}
		} else {
			_, err = d.store.UpdateDelegation(id, seen)
		}
	case control.EventSnapshot:
		// Staged, every snapshot is kept for review; else the one that
		// will be the result.
		keep, after := d.stageSnapshot(del, ev)
		d.holdSnapshot(id, ev)
		_, err = d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
			if keep != nil {
				keep(del)
			}
			return seen(del)
		})
		after()
	case control.EventRoundDone:
		// An executor that works in rounds (the reference's development
		// line) ended one and holds the workspace for the next. A
		// delegation is one task: its first round's end is its end, and
		// CLOSE has the executor say done.
		// In a session of rounds, the round is the turn, and it ended.
		first := false
		now := d.store.Now()
		_, err = d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
			if del.Session == control.SessionRounds {
				endRoundTurn(del, ev, now)
			} else if !slices.Contains(del.Notes, roundsNote) {
				del.Notes, first = append(del.Notes, roundsNote), true
			}
			del.Summary, del.Highlights = ev.Summary, ev.Highlights
			return seen(del)
		})
		if err == nil && first {
			d.sendClose(ctx, del, "a task is one round") // failing, the executor ends it at its lease
		}
	case control.EventDone:
		if del.State.Terminal() {
			return nil
		}
		if (del.Dialect == control.DialectHead || ev.RecommendedSnapshotID != "") && ev.ResultFile == "" {
			release := d.headResult(ctx, del, ev)
			defer release()
		}
		if del.State == lease.Started {
			// The task ran and ended before a "running" status reached
			// us (a fast task, or an executor that sends none, as the
			// reference's may): it was set up, then it was done.
			if del, err = d.store.FireDelegation(id, lease.SetupComplete, "executor done before it said it was running", nil); err != nil {
				if errors.As(err, new(*lease.TransitionError)) {
					return nil // ended meanwhile; that ending stands
				}
				return err
			}
		}
		tr := d.transport(del)
		if tr == nil {
			return fmt.Errorf("delegation %s: transport %s is not available in this process", id, del.Transport)
		}
		kept := del.SnapshotMode == lease.SnapshotStaged || del.SnapshotMode == lease.SnapshotDiscard
		if del.Transport == control.TransportArchive && !kept { // a live mount's result is in place already
			f.set(lease.ChannelFinishing, "the executor finished; applying its result", d.store.Now())
		}
		var rep *archive.Report
		var ferr error
		var staged func(*lease.Delegation)
		if kept && del.AccessMode == control.AccessRW {
			rep = &archive.Report{}
			if p, ok := tr.(resultPacker); ok && ev.ResultFile == "" {
				// The git transport's result is its push: packed as an
				// archive's result, then kept as one.
				var drop func()
				if drop, ferr = p.PackResult(ctx, lent(del), ev); ferr == nil {
					defer drop()
				}
			}
			if ferr == nil {
				staged, ferr = d.finishStaged(del, ev)
			}
		} else {
			rep, ferr = tr.Finish(ctx, lent(del), ev)
		}
		if ferr != nil {
			d.log.Error("apply result", "delegation", id, "err", ferr)
			failure := &lease.Failure{Code: control.CodeTaskFailed, Message: "the result could not be applied: " + ferr.Error(),
				Hint: "nothing was lost: the executor's result is kept in the file named above"}
			var pe *control.ProtocolError
			if errors.As(ferr, &pe) { // a refusal that says its own why
				failure = failureOf(pe)
			}
			_, err = d.store.FireDelegation(id, lease.SendError, "result not applied", func(del *lease.Delegation) error {
				del.LastEventID = seq
				del.Failure = failure
				return nil
			})
		} else if failed := sessionFailure(d.store, id); failed != nil {
			// A driven session whose agent failed (its session did not
			// open, a turn ended in its error) ends failed: the
			// executor's done says only that the session is over.
			_, err = d.store.FireDelegation(id, lease.ReceiveError, "session failed: "+failed.Message, func(del *lease.Delegation) error {
				del.LastEventID = seq
				del.Failure = failed
				del.Summary, del.AgentStderr = ev.Summary, ev.AgentStderr
				return nil
			})
		} else {
			_, err = d.store.FireDelegation(id, lease.ReceiveDone, "done received", func(del *lease.Delegation) error {
				del.LastEventID = seq
				// After rounds, the last round's words are the agent's; the
				// done our CLOSE asked says only that it closed.
				rounds := slices.Contains(del.Notes, roundsNote) || del.Session == control.SessionRounds
				if !rounds || del.Summary == "" {
					del.Summary, del.Highlights = ev.Summary, ev.Highlights
				}
				if del.Session == control.SessionRounds {
					if t := del.LastTurn(); t != nil && !t.Ended() {
						// done with no round_done: an executor that knows
						// no rounds ran the task as one.
						t.State, t.StopReason, t.Reply, t.EndedAt = lease.TurnDone, "end_turn", lease.KeepReply(ev.Summary), d.store.Now()
						if t.N == 1 {
							del.Notes = append(del.Notes, "the executor knows no rounds: the session ended with its first turn")
						}
					}
				}
				del.AgentStderr, del.MountRefused = ev.AgentStderr, ev.MountRefused
				del.Changes, del.Conflicts = changesOf(rep), rep.Conflicts
				if del.Transport == control.TransportArchive {
					del.Audit = DiffSummary(rep)
				}
				if len(rep.Ignored) > 0 {
					del.Notes = append(del.Notes, fmt.Sprintf("the executor's result also held %v: not applied (outside the lent directory, or hidden)", rep.Ignored))
				}
				if staged != nil {
					staged(del)
				}
				return nil
			})
		}
	case control.EventPermission:
		_, err = d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
			del.LastEventID = seq
			if !del.SessionDriven { // a driven session's driver records its own, with who answered
				recordPermission(del, ev, d.store.Now())
			}
			return nil
		})
		if err == nil {
			f.permission(ev)
			f.backToLive() // waiting while one is pending
		}
	case control.EventError:
		lev := lease.ReceiveError
		switch {
		case ev.Code == control.CodeCancelled:
			lev = lease.Cancel
		case ev.Code == control.CodeExpired && lease.CanFire(del.State, lease.Expire):
			lev = lease.Expire
		}
		_, err = d.store.FireDelegation(id, lev, ev.Code+": "+ev.Message, func(del *lease.Delegation) error {
			del.LastEventID = seq
			del.Failure = &lease.Failure{Code: ev.Code, Message: ev.Message, Hint: ev.Hint}
			del.AgentStderr, del.MountRefused = ev.AgentStderr, ev.MountRefused
			return nil
		})
	}
	var te *lease.TransitionError
	if errors.As(err, &te) {
		err = nil // ended meanwhile; the first ending stands
	}
	if ev.Terminal() {
		if cur, gerr := d.store.Delegation(id); gerr == nil { // as it ended, whichever ending stood
			d.cleanup(ctx, cur)
			if cur.Dialect == control.DialectHead && cur.State.Terminal() {
				d.ack(cur)
			}
		}
		d.dropSnapshots(id)
	}
	return err
}

// roundsNote is a delegation's note once its executor says it works in
// rounds.
const roundsNote = "the executor works in rounds (round_done): its first round's end closed it (CLOSE)"

// holdSnapshot keeps a snapshot event's ZIP (which the stream reader
// would remove) until done says which snapshot is the result. One is kept
// per delegation — the last, unless an earlier one was recommended and
// the last is not — so that an executor sending snapshot after snapshot
// holds no more of this machine's disk than one result (MaxResultBytes);
// a result done names and that is not kept is fetched with GET /result.
func (d *Delegator) holdSnapshot(id string, ev *control.Event) {
	if ev.ResultFile == "" {
		return
	}
	// The spool file's name is unique already; the suffix only keeps the
	// reader from removing it.
	name := ev.ResultFile + ".snapshot.zip"
	if err := os.Rename(ev.ResultFile, name); err != nil {
		d.log.Warn("keep a snapshot", "delegation", id, "err", err)
		return
	}
	h := heldSnapshot{id: ev.SnapshotID, Spooled: control.Spooled{File: name, Sum: ev.ResultSum, Bad: ev.ResultErr},
		checksum: ev.ResultChecksum, recommended: ev.Recommended != nil && *ev.Recommended}
	d.mu.Lock()
	old, had := d.snapshots[id]
	if had && old.recommended && !h.recommended {
		old, h = h, old // the recommended one stays
	}
	d.snapshots[id] = h
	d.mu.Unlock()
	if had {
		os.Remove(old.File)
	}
}

// dropSnapshots removes what holdSnapshot kept for id.
func (d *Delegator) dropSnapshots(id string) {
	d.mu.Lock()
	h, had := d.snapshots[id]
	delete(d.snapshots, id)
	d.mu.Unlock()
	if had {
		os.Remove(h.File)
	}
}

// headResult finds the result a head done stands for and puts it in ev
// (as resultBase64 would be): the snapshot done recommends (or the last
// one) as it came in its event, if it is the one held, else — the stream that carried it was
// lost, and a head executor replays only done — as GET /result gives it.
// release removes what was fetched.
func (d *Delegator) headResult(ctx context.Context, del *lease.Delegation, ev *control.Event) (release func()) {
	want := ev.RecommendedSnapshotID
	if want == "" && len(ev.SnapshotIDs) > 0 {
		want = ev.SnapshotIDs[len(ev.SnapshotIDs)-1]
	}
	d.mu.Lock()
	h, held := d.snapshots[del.ID]
	d.mu.Unlock()
	if held && (want == "" || h.id == want) {
		ev.ResultFile, ev.ResultSum, ev.ResultErr, ev.ResultChecksum = h.File, h.Sum, h.Bad, h.checksum
		return func() {}
	}
	if del.Transport != control.TransportArchive || del.AccessMode != control.AccessRW {
		return func() {}
	}
	res, err := d.peer(del).Result(ctx, del.ID)
	if err != nil {
		d.log.Warn("fetch the result", "delegation", del.ID, "err", err)
		return func() {}
	}
	if res.ResultFile == "" {
		return func() {}
	}
	d.log.Info("result fetched with GET /result: its snapshot event was not received", "delegation", del.ID)
	ev.ResultFile, ev.ResultSum, ev.ResultErr, ev.ResultChecksum = res.ResultFile, res.ResultSum, res.ResultErr, res.ResultChecksum
	return func() { os.Remove(res.ResultFile) }
}

// ack tells a head executor the outcome is recorded, best effort and
// bounded: it then drops the delegation's events and result.
func (d *Delegator) ack(del *lease.Delegation) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.peer(del).Ack(ctx, del.ID); err != nil {
		d.log.Debug("acknowledge the result", "delegation", del.ID, "err", err)
	}
}

// recordPermission keeps a permission event in the delegation's record: a
// new request, or the decision on one already known. What the request is
// for (the agent's tool call, as the executor sent it, up to
// maxToolCallRecord) and who asked stay from the request; how it was
// decided, and when, come with the decision.
func recordPermission(del *lease.Delegation, ev *control.Event, now time.Time) {
	var p *lease.Permission
	for i := range del.Permissions {
		if del.Permissions[i].RequestID == ev.RequestID {
			p = &del.Permissions[i]
		}
	}
	if p == nil {
		asker := del.Peer
		if del.PeerName != "" {
			asker = del.PeerName + " (" + del.Peer + ")"
		}
		del.Permissions = append(del.Permissions, lease.Permission{RequestID: ev.RequestID, AskedBy: "the agent on " + asker, AskedAt: now})
		p = &del.Permissions[len(del.Permissions)-1]
	}
	if ev.Message != "" {
		p.Title = ev.Message
	}
	if len(ev.Options) > 0 {
		p.Options = ev.Options
	}
	p.Outcome, p.OptionID, p.DecidedBy, p.At = ev.Outcome, ev.OptionID, ev.DecidedBy, now
	if len(ev.ToolCall) > 0 && len(ev.ToolCall) <= maxToolCallRecord {
		p.ToolCall = ev.ToolCall
	}
	if ev.Outcome != control.PermissionPending {
		p.How, p.DecidedAt = decidedHow(ev.DecidedBy), now
	}
	if ev.Outcome == control.PermissionSelected {
		p.Holds = lease.HoldsFor(p.Options, p.OptionID)
	}
}

// maxToolCallRecord bounds the tool call kept with a permission request.
const maxToolCallRecord = 16 << 10

// decidedHow is how a decision was made, from the executor's decidedBy:
// user (an answer sent by a delegator), policy, timeout or task-end; ""
// for what another executor may say.
func decidedHow(decidedBy string) string {
	switch {
	case decidedBy == "delegator", decidedBy == "editor":
		return "user"
	case strings.HasPrefix(decidedBy, "executor policy"):
		return "policy"
	case decidedBy == "timeout":
		return "timeout"
	case decidedBy == "task ended":
		return "task-end"
	}
	return ""
}

// sessionFailure is why driven session id failed, as its driver recorded
// it; nil if it did not (or is no driven session).
func sessionFailure(store *lease.Store, id string) *lease.Failure {
	del, err := store.Delegation(id)
	if err != nil || !del.SessionDriven {
		return nil
	}
	return del.SessionFailure
}
