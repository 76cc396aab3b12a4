package executor

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// Rounds are the reference's multi-round delegation (its development
// line, SII-Holos/awcp 8d66b97), spoken in the head dialect: after the
// agent's task the executor sends the round's snapshot and round_done,
// and the workspace stays lent; the delegator's CONTINUE runs the agent
// again on it with a new task (a command agent is run again with the new
// prompt), its CLOSE ends the delegation with done. Nothing in an INVITE
// says whether its delegator knows rounds, and a head delegator that
// does not (the reference's release, b10e261) waits for done: past
// Options.RoundWait without CONTINUE or CLOSE the delegation ends as a
// one-round one does, done naming the last round's snapshot.

// roundWaiter is what a task's goroutine waits on between rounds:
// CONTINUE's message, or nil for CLOSE.
type roundWaiter struct {
	next chan *control.Continue // buffered: handed over under Executor.mu
	// awaiting is the round that ended and waits (0 while one runs);
	// guarded by Executor.mu.
	awaiting int
}

// takesRounds says whether a's task runs in rounds: a head delegation,
// or a session of rounds our delegator asked for, on a transport that
// leaves the workspace where it is between rounds (the archive's copy,
// the live mount), with rounds on.
func (e *Executor) takesRounds(a *lease.Assignment, t *task) bool {
	return e.opts.RoundWait > 0 && (a.Dialect == control.DialectHead || a.Session == control.SessionRounds) && t.channel == nil &&
		(a.Transport == control.TransportArchive || a.Transport == control.TransportSSHFS)
}

// roundSnapID is what a round's snapshot id is (roundSnapshot's).
var roundSnapID = regexp.MustCompile(`^snap_r[0-9]+_[0-9a-f]{12}$`)

// roundFile is where a round's snapshot is kept until the delegation's
// events are dropped.
func (e *Executor) roundFile(id, snapID string) string {
	return filepath.Join(e.opts.StateDir, "results", id+"."+snapID+".zip")
}

// roundSnapshot writes round n's snapshot of a's workspace, for an rw
// archive delegation (a live mount writes through: none), and returns its
// id and the event that carries it.
func (e *Executor) roundSnapshot(a *lease.Assignment, n int, summary string, highlights []string, after archive.Manifest) (snapID string, ev []byte, err error) {
	if a.AccessMode != control.AccessRW || a.Transport != control.TransportArchive {
		return "", nil, nil
	}
	tmp, checksum, err := e.packSummed(a.ID, func(w io.Writer) (bool, error) {
		_, err := archive.PackTo(w, a.WorkDir)
		return err == nil, err
	})
	if err != nil {
		return "", nil, err
	}
	snapID = fmt.Sprintf("snap_r%d_%s", n, checksum[:12])
	if err := os.Rename(tmp, e.roundFile(a.ID, snapID)); err != nil {
		os.Remove(tmp)
		return "", nil, err
	}
	return snapID, e.snapshotEvent(a.ID, snapID, checksum, summary, highlights, after), nil
}

// endRound tells the delegator round n ended — its snapshot, then
// round_done (with code TASK_FAILED if its agent failed: a session of
// rounds goes on) — and waits for what comes next: CONTINUE's message, or nil
// for CLOSE, for the wait past, or for the delegation's end (ctx).
// snapIDs gains the round's snapshot.
func (e *Executor) endRound(ctx context.Context, t *task, a *lease.Assignment, n int, summary string, failed bool, highlights []string, after archive.Manifest, snapIDs *[]string) (*control.Continue, error) {
	snapID, snapshot, err := e.roundSnapshot(a, n, summary, highlights, after)
	if err != nil {
		return nil, fmt.Errorf("round %d's snapshot: %w", n, err)
	}
	done := &control.Event{DelegationID: a.ID, Type: control.EventRoundDone, Round: n, Summary: summary, Highlights: highlights}
	if failed {
		// Ours: the round's agent failed (summary says how); the
		// session goes on.
		done.Code = control.CodeTaskFailed
	}
	if snapID != "" {
		*snapIDs = append(*snapIDs, snapID)
		done.SnapshotIDs, done.RecommendedSnapshotID = []string{snapID}, snapID
	}
	evs := [][]byte{e.eventJSON(done)}
	if snapshot != nil {
		evs = [][]byte{snapshot, evs[0]}
	}
	e.mu.Lock()
	t.rounds.awaiting = n
	e.mu.Unlock()
	if _, err := e.store.AppendEvents(a.ID, evs); err != nil {
		return nil, err
	}
	e.publish(a.ID)
	e.log.Info("round done; the workspace stays lent for CONTINUE or CLOSE", "delegation", a.ID, "round", n, "wait", e.opts.RoundWait)
	// A session of rounds, asked for as one, waits for its delegator
	// until the lease ends (the delegator renews it and ends the session
	// when it is idle); the reference's rounds, for RoundWait.
	var waited <-chan time.Time
	if a.Session != control.SessionRounds {
		wait := time.NewTimer(e.opts.RoundWait)
		defer wait.Stop()
		waited = wait.C
	}
	select {
	case next := <-t.rounds.next:
		return next, nil
	case <-waited:
		e.mu.Lock()
		late := t.rounds.awaiting == 0 // a CONTINUE or CLOSE was handed over as the wait ran out
		t.rounds.awaiting = 0
		e.mu.Unlock()
		if late {
			return <-t.rounds.next, nil
		}
		e.log.Info("no CONTINUE or CLOSE within the wait: the delegation ends after its last round", "delegation", a.ID, "round", n)
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// nextRound hands CONTINUE's message (nil for CLOSE) to id's task, which
// must be between rounds; else the HTTP status and error to answer.
func (e *Executor) nextRound(id string, next *control.Continue) (int, *control.ProtocolError) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.tasks[id]
	switch {
	case t == nil:
		return http.StatusNotFound, control.Errorf(control.CodeDeclined, "delegation %s is not running here", id)
	case t.rounds == nil:
		return http.StatusConflict, control.Errorf(control.CodeDeclined, "delegation %s takes no rounds (only a head delegation over the archive or the live mount does)", id).
			WithHint("delegate again with the next task")
	case t.rounds.awaiting == 0:
		return http.StatusConflict, control.Errorf(control.CodeDeclined, "delegation %s is in the middle of a round", id).
			WithHint("send CONTINUE or CLOSE after its round_done")
	case next != nil && next.Round != t.rounds.awaiting+1:
		return http.StatusConflict, control.Errorf(control.CodeDeclined, "round %d does not follow round %d", next.Round, t.rounds.awaiting)
	}
	t.rounds.awaiting = 0
	t.rounds.next <- next // buffered, and only one is handed over per wait
	return http.StatusOK, nil
}

// continueLease is the lease CONTINUE asks, within what the delegation
// was admitted to.
func (e *Executor) continueLease(a *lease.Assignment, l *control.StartLease) {
	if l == nil {
		return
	}
	at, err := control.ParseTimestamp(l.ExpiresAt)
	if err != nil {
		return
	}
	// The TTL admitted is already within the executor's longest lease.
	at = minTime(at, a.AcceptedAt.Add(control.Seconds(a.TTLSeconds)+time.Minute))
	if _, err := e.store.UpdateAssignment(a.ID, func(a *lease.Assignment) error { a.ExpiresAt = at; return nil }); err == nil {
		e.sched.Kick()
	}
}

// lastRoundResult makes the last round's snapshot the delegation's result
// (GET /result, the local result), for the done after the last round.
func (e *Executor) lastRoundResult(id, snapID string) error {
	return os.Rename(e.roundFile(id, snapID), e.resultFile(id))
}

// forgetRounds removes id's round snapshots, and a result left half
// packed by a run that stopped.
func (e *Executor) forgetRounds(id string) {
	files, _ := filepath.Glob(filepath.Join(e.opts.StateDir, "results", id+".*.zip"))
	for _, f := range files {
		os.Remove(f)
	}
}

// roundsEnd is the last round's words, for the done that ends the rounds.
type roundsEnd struct {
	summary    string
	highlights []string
}

// roundsDone ends a delegation's rounds: the transport let go of (its
// workspace was sent with each round), the last round's snapshot made
// the result, and the done event naming every round's snapshot.
func (e *Executor) roundsDone(ctx context.Context, a *lease.Assignment, last *roundsEnd, snapIDs []string, extra func(*control.Event)) ([]byte, error) {
	if _, err := e.transport(a.Transport).Teardown(ctx, a.ID, a.WorkDir, nil); err != nil {
		return nil, err
	}
	ev := &control.Event{DelegationID: a.ID, Type: control.EventDone, Summary: last.summary, Highlights: last.highlights}
	extra(ev)
	if len(snapIDs) > 0 {
		rec := snapIDs[len(snapIDs)-1]
		if err := e.lastRoundResult(a.ID, rec); err != nil {
			return nil, err
		}
		ev.SnapshotIDs, ev.RecommendedSnapshotID = snapIDs, rec
	}
	return e.eventJSON(ev), nil
}

// roundStarted tells the delegator round n began, with its task's first
// line.
func (e *Executor) roundStarted(id string, n int, prompt string) {
	first, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n")
	if len(first) > 200 {
		first = strings.ToValidUTF8(first[:200], "") + "…"
	}
	data := e.eventJSON(&control.Event{DelegationID: id, Type: control.EventStatus, Status: control.StatusProgress,
		Message: fmt.Sprintf("round %d: %s", n, first)})
	if _, err := e.store.AppendProgress(id, [][]byte{data}, e.opts.ProgressKept); err != nil {
		e.log.Warn("record a round's start", "delegation", id, "err", err)
	}
	e.publish(id)
}
