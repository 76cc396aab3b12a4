package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/sandbox"
	"github.com/awcp/awcp/lease"
)

// start handles START: it sets the workspace up and launches the agent.
// It returns only after setup, so {ok:true} means the workspace is there.
func (e *Executor) start(ctx context.Context, st *control.Start) *control.ProtocolError {
	id := st.DelegationID
	a, err := e.store.Assignment(id)
	if errors.Is(err, lease.ErrNotFound) {
		return control.Errorf(control.CodeDeclined, "no INVITE was accepted for delegation %s", id).WithHint("send INVITE first")
	}
	if err != nil {
		return control.Errorf(control.CodeSetupFailed, "the executor cannot read the delegation")
	}
	now := e.store.Now()
	expiresAt, _ := control.ParseTimestamp(st.Lease.ExpiresAt)
	switch {
	case a.State == lease.Expired && a.Failure != nil && a.Failure.Code == control.CodeStartExpired,
		a.State == lease.Accepted && !now.Before(a.StartBy):
		return control.Errorf(control.CodeStartExpired, "START came too late: the accepted INVITE lapsed").WithHint("delegate again")
	case a.State != lease.Accepted:
		return control.Errorf(control.CodeDeclined, "delegation %s is %s; START is not expected", id, a.State)
	case !now.Before(expiresAt):
		return e.refuseStart(ctx, id, lease.Expire,
			control.Errorf(control.CodeStartExpired, "the lease in START expired at %s", st.Lease.ExpiresAt).WithHint("delegate again"))
	}
	tr := e.transport(st.WorkDir.Transport)
	if tr == nil {
		return e.refuseStart(ctx, id, lease.SendError,
			control.Errorf(control.CodeDeclined, "transport %q is not offered by this executor", st.WorkDir.Transport))
	}
	if err := tr.Available(); err != nil {
		return e.refuseStart(ctx, id, lease.SendError, control.AsProtocolError(err, control.CodeDepMissing))
	}
	// The executor's own caps win over what START says.
	expiresAt = minTime(expiresAt, a.AcceptedAt.Add(control.Seconds(a.TTLSeconds)+time.Minute), now.Add(e.opts.MaxTTL))
	mode := a.AccessMode
	if st.Lease.AccessMode == control.AccessRO {
		mode = control.AccessRO
	}
	a, _, err = e.store.FireAssignment(id, lease.SendStart, "START received", func(a *lease.Assignment) error {
		a.ExpiresAt, a.AccessMode, a.Transport = expiresAt, mode, tr.Name()
		return nil
	}, nil)
	if err != nil {
		return control.Errorf(control.CodeDeclined, "delegation %s cannot start: %v", id, err)
	}

	if pe := e.setup(ctx, a, tr, &st.WorkDir); pe != nil {
		if err := e.end(ctx, id, lease.SendError, pe); err != nil {
			e.log.Warn("record setup failure", "delegation", id, "err", err)
		}
		if err := e.removeWorkDir(ctx, a); err != nil {
			e.log.Warn("clean failed setup", "delegation", id, "err", err)
		}
		return pe
	}

	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t := &task{cancel: cancel, done: make(chan struct{}), asks: map[string]*ask{}}
	if a.Session == control.SessionACP {
		t.channel = make(chan control.SessionChannel, 1)
	}
	if e.takesRounds(a, t) {
		t.rounds = &roundWaiter{next: make(chan *control.Continue, 1)}
	}
	e.mu.Lock()
	e.tasks[id] = t
	e.mu.Unlock()
	// What confines the agent is said with "running": the delegator keeps
	// it in the delegation's notes.
	running := e.eventJSON(&control.Event{DelegationID: id, Type: control.EventStatus, Status: control.StatusRunning,
		Message: "workspace ready; agent starting; " + SandboxNote + sandbox.Describe(e.opts.Confine)})
	started := a
	a, _, err = e.store.FireAssignment(id, lease.SetupComplete, "workspace ready", nil, running)
	if err != nil {
		// Cancelled or failed while setting up: whoever ended it recorded
		// the terminal event; only the clean-up is left.
		e.mu.Lock()
		delete(e.tasks, id)
		e.mu.Unlock()
		cancel()
		close(t.done)
		e.removeWorkDir(ctx, started)
		if cur, gerr := e.store.Assignment(id); gerr == nil && cur.Failure != nil {
			return &control.ProtocolError{Code: cur.Failure.Code, Message: cur.Failure.Message, Hint: cur.Failure.Hint}
		}
		return control.Errorf(control.CodeSetupFailed, "delegation %s ended during setup", id)
	}
	e.publish(id)
	e.wg.Add(1)
	go e.run(tctx, t, a)
	e.sched.Kick()
	return nil
}

// refuseStart ends an accepted delegation whose START cannot be honoured,
// freeing its slot at once rather than at the START deadline.
func (e *Executor) refuseStart(ctx context.Context, id string, ev lease.Event, pe *control.ProtocolError) *control.ProtocolError {
	if err := e.end(ctx, id, ev, pe); err != nil {
		e.log.Warn("refuse START", "delegation", id, "err", err)
	}
	return pe
}

func minTime(t time.Time, others ...time.Time) time.Time {
	for _, o := range others {
		if o.Before(t) {
			t = o
		}
	}
	return t
}

func (e *Executor) setup(ctx context.Context, a *lease.Assignment, tr control.ExecutorTransport, info *control.WorkDirInfo) *control.ProtocolError {
	if pe := checkWorkDir(a.WorkDir); pe != nil {
		return pe
	}
	if err := os.Mkdir(a.WorkDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		e.log.Error("create work dir", "delegation", a.ID, "err", err)
		return control.Errorf(control.CodeSetupFailed, "cannot create the work directory")
	}
	p := control.SetupParams{ID: a.ID, Info: info, WorkDir: a.WorkDir, AccessMode: a.AccessMode}
	if c := e.opts.Confine; c != nil && c.Isolated {
		if p.Agent = e.agentUsers.take(a.ID); p.Agent == nil {
			return control.Errorf(control.CodeDeclined, "every agent uid is in use")
		}
	}
	for _, r := range a.Resources {
		p.Resources = append(p.Resources, control.Resource{Name: r.Name, Type: "fs", Mode: r.Mode})
	}
	if err := tr.Setup(ctx, p); err != nil {
		e.log.Warn("setup failed", "delegation", a.ID, "err", err)
		return control.AsProtocolError(err, control.CodeSetupFailed)
	}
	if info != nil && info.Received != nil {
		if fi, err := os.Stat(info.Received.File); err == nil {
			e.opts.Metrics.Archive("workspace_received", fi.Size())
		}
	}
	return nil
}

// agentDir is where a's agent runs: the work dir, or in the head dialect
// the resource the reference would run it in (see PrimaryResource).
func agentDir(a *lease.Assignment) string {
	if a.Dialect != control.DialectHead {
		return a.WorkDir
	}
	env := control.Environment{}
	for _, r := range a.Resources {
		env.Resources = append(env.Resources, control.Resource{Name: r.Name, Mode: r.Mode})
	}
	return filepath.Join(a.WorkDir, env.PrimaryResource())
}

// run is a task's goroutine: the agent, then the result, then clean-up.
func (e *Executor) run(ctx context.Context, t *task, a *lease.Assignment) {
	defer e.wg.Done()
	defer close(t.done)
	defer func() {
		e.mu.Lock()
		delete(e.tasks, a.ID)
		e.mu.Unlock()
		if t.channel != nil {
			select {
			case late := <-t.channel: // opened as the session ended: never taken
				late.Conn.Close()
			default:
			}
		}
		if err := e.removeWorkDir(context.Background(), a); err != nil {
			e.log.Warn("clean up", "delegation", a.ID, "err", err)
		}
	}()
	log := e.log.With("delegation", a.ID)
	before, err := e.highlightsBefore(a)
	if err != nil {
		log.Warn("scan work dir before the task", "err", err)
	}

	// Each run of the agent (a round, where the delegation takes rounds)
	// has its progress pumped into events, all written before it ends.
	var updates chan agent.Update

	os.MkdirAll(filepath.Dir(e.summaryFile(a.ID)), 0o700)
	at := agent.Task{
		DelegationID: a.ID, Prompt: a.Prompt, Description: a.Description,
		WorkDir: agentDir(a), AccessMode: a.AccessMode, SummaryFile: e.summaryFile(a.ID),
		// What the operator names, then the call chain: set even when
		// empty, so that a chain the operator named never stands.
		Env: append(slices.Clone(e.opts.AgentEnv), control.CallChainEnv+"="+strings.Join(control.ExtendCallChain(a.CallChain, e.opts.AgentID), ",")),
	}
	var confineErr error // the agent does not run unconfined by mistake
	if base := e.opts.Confine; base != nil {
		p, tmp, err := confine(&at, *base, e.agentUsers.of(a.ID), e.agentCache(a), e.opts.Name)
		if err != nil {
			confineErr = fmt.Errorf("its sandbox: %w", err)
		} else {
			defer os.RemoveAll(tmp)
			log.Info("agent confined", "sandbox", sandbox.Describe(p), "tmp", tmp)
		}
	}
	hooks := agent.Hooks{
		Started: func(pid int) {
			if _, err := e.store.UpdateAssignment(a.ID, func(a *lease.Assignment) error { a.AgentPID = pid; return nil }); err != nil {
				log.Warn("record agent pid", "err", err)
			}
		},
		Update: func(u agent.Update) { updates <- u },
		Permission: func(ctx context.Context, req agent.PermissionRequest) agent.Decision {
			return e.decide(ctx, a.ID, t, req)
		},
		Decided: func(req agent.PermissionRequest, outcome string, d agent.Decision) {
			e.permissionEvent(a.ID, req, outcome, d)
			if outcome != control.PermissionPending {
				log.Info("permission decided", "request", req.ID, "outcome", outcome, "option", d.OptionID, "by", d.By)
			}
		},
	}
	runAgent := func(at agent.Task) (*agent.Result, error) {
		updates = make(chan agent.Update, 256)
		var pumpDone sync.WaitGroup
		pumpDone.Add(1)
		go func() { defer pumpDone.Done(); e.pumpProgress(a.ID, updates) }()
		defer pumpDone.Wait()
		defer close(updates)
		switch {
		case confineErr != nil:
			return nil, confineErr
		case t.channel != nil:
			// A session: the editor's prompts come over its channel, which
			// the delegator opens once it hears the delegation runs.
			return e.opts.Sessions.Session(ctx, at, hooks, t.channel, e.opts.StartTimeout)
		default:
			return e.opts.Worker.Run(ctx, at, hooks)
		}
	}
	res, err := runAgent(at)
	// A delegation that takes rounds (rounds.go) runs the agent again for
	// each CONTINUE, until CLOSE, the wait's end, or a failure.
	var snapIDs []string
	var closed *roundsEnd // the last round's, once CLOSE or the wait ended the rounds
	// In a session of rounds a round whose agent failed is that turn's
	// failure, not the session's: the rounds before it stay.
	for round := 1; t.rounds != nil && err == nil && (res.Failed == "" || a.Session == control.SessionRounds); {
		summary := res.Summary
		if summary == "" {
			summary = "The agent finished without output."
		}
		if res.Failed != "" {
			summary = res.Failed
		}
		highlights, after, herr := e.highlights(a, before)
		if herr != nil {
			err = fmt.Errorf("round %d's changes: %w", round, herr)
			break
		}
		next, rerr := e.endRound(ctx, t, a, round, summary, res.Failed != "", highlights, after, &snapIDs)
		if ctx.Err() != nil {
			err = agent.ErrKilled // cancelled or expired while it waited: reported by who ended it
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
		if next == nil {
			closed = &roundsEnd{summary: summary, highlights: highlights}
			break
		}
		round, before = next.Round, after
		if before == nil && e.changeLog(a) == nil {
			before, _ = e.highlightsBefore(a)
		}
		at.Prompt, at.Description = next.Task.Prompt, next.Task.Description
		if at.Prompt == "" {
			at.Prompt = at.Description
		}
		e.roundStarted(a.ID, round, at.Prompt)
		res, err = runAgent(at)
	}
	var refused *control.MountRefused // before the mount goes with its count
	if m, ok := e.transport(a.Transport).(refusalCounter); ok {
		refused = m.Refused(a.ID)
	}
	if errors.Is(err, agent.ErrKilled) {
		e.opts.Metrics.AgentExited("killed")
		return // cancel, expiry or shutdown: the one who ended it reported it
	}

	var final, snapshot []byte
	var ev lease.Event
	switch {
	case err != nil:
		e.opts.Metrics.AgentExited("error")
		ev = lease.SendError
		final = e.eventJSON(&control.Event{DelegationID: a.ID, Type: control.EventError, Code: control.CodeTaskFailed, Message: "the agent could not run: " + err.Error(),
			Hint: sandboxHint(e.opts.Confine, err.Error())})
	case closed != nil:
		e.opts.Metrics.AgentExited("completed")
		ev = lease.ReceiveDone
		final, err = e.roundsDone(ctx, a, closed, snapIDs, func(ev *control.Event) {
			ev.AgentStderr, ev.MountRefused = res.StderrTail, refused
		})
		if err != nil {
			log.Error("end the rounds", "err", err)
			ev = lease.SendError
			final = e.eventJSON(&control.Event{DelegationID: a.ID, Type: control.EventError, Code: control.CodeTaskFailed, Message: "the result could not be collected"})
		}
	case res.Failed != "":
		e.opts.Metrics.AgentExited("failed")
		ev = lease.SendError
		final = e.eventJSON(&control.Event{DelegationID: a.ID, Type: control.EventError, Code: control.CodeTaskFailed, Message: res.Failed,
			Hint: agentHint(e.opts.Confine, res.Failed, res.StderrTail), AgentStderr: res.StderrTail, MountRefused: refused})
	default:
		e.opts.Metrics.AgentExited("completed")
		ev = lease.ReceiveDone
		snapshot, final, err = e.doneEvent(ctx, a, before, res.Summary, func(ev *control.Event) {
			ev.AgentStderr, ev.MountRefused = res.StderrTail, refused
		})
		if err != nil {
			log.Error("collect result", "err", err)
			ev = lease.SendError
			final = e.eventJSON(&control.Event{DelegationID: a.ID, Type: control.EventError, Code: control.CodeTaskFailed, Message: "the result could not be collected"})
		}
	}
	// Clean up before the terminal event: whoever hears "done" may count on
	// the executor having let go of the workspace.
	if err := e.removeWorkDir(ctx, a); err != nil {
		log.Warn("clean up", "err", err)
	}
	var decoded control.Event
	json.Unmarshal(final, &decoded)
	_, _, err = e.store.FireAssignment(a.ID, ev, "agent finished", func(a *lease.Assignment) error {
		if decoded.Type == control.EventError {
			a.Failure = &lease.Failure{Code: decoded.Code, Message: decoded.Message}
		}
		return nil
	}, snapshot, final)
	if err != nil {
		log.Info("task outcome not recorded", "err", err) // ended meanwhile
		return
	}
	e.publish(a.ID)
	log.Info("delegation finished", "event", decoded.Type)
}

// refusalCounter is a transport whose read-only mounts count the writes
// they refuse (SSHFSExecutor).
type refusalCounter interface {
	Refused(id string) *control.MountRefused
}

// pumpProgress turns the worker's updates into status events, writing all
// that queued up meanwhile in one transaction.
func (e *Executor) pumpProgress(id string, updates <-chan agent.Update) {
	for u := range updates {
		batch := [][]byte{e.progress(id, u)}
	drain:
		for len(batch) < 512 {
			select {
			case u, ok := <-updates:
				if !ok {
					break drain
				}
				batch = append(batch, e.progress(id, u))
			default:
				break drain
			}
		}
		if _, err := e.store.AppendProgress(id, batch, e.opts.ProgressKept); err != nil {
			continue // the lease ended; drain the rest
		}
		e.publish(id)
	}
}

func (e *Executor) progress(id string, u agent.Update) []byte {
	return e.eventJSON(&control.Event{DelegationID: id, Type: control.EventStatus, Status: control.StatusProgress, Message: u.Message, Progress: u.Progress})
}
