package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/sandbox"
	"github.com/awcp/awcp/lease"
)

// admit handles INVITE.
func (e *Executor) admit(inv *control.Invite, peer string, byKey bool, delegator string) (*control.Accept, *control.ProtocolError) {
	if !e.openToAll() && !byKey && (inv.Auth == nil || !e.validToken(inv.Auth.Credential)) {
		hint := "pass the executor's token with --token-file FILE (or $AWCP_TOKEN; --token shows in ps)"
		if len(e.opts.AuthorizedDelegators) > 0 {
			hint = "pass the executor's token with --token-file FILE (or $AWCP_TOKEN), or have its operator add this delegator's key (`awcp-ctl peers self`) to its authorized delegators"
		}
		return nil, control.Errorf(control.CodeAuthFailed, "INVITE carries no valid credential").WithHint(hint)
	}
	if err := control.CheckCallChain(inv.CallChain); err != nil {
		return nil, control.Errorf(control.CodeDeclined, "INVITE's %v", err).
			WithHint(fmt.Sprintf("a call chain holds at most %d agent ids", control.MaxCallChain))
	}
	if pe := e.admitSession(inv); pe != nil {
		return nil, pe
	}
	if control.IsCircular(inv.CallChain, e.opts.AgentID) {
		e.log.Warn("circular call refused", "delegation", inv.DelegationID, "chain", control.FormatCallChain(inv.CallChain))
		return nil, control.CircularCall(e.opts.AgentID, inv.CallChain)
	}
	tname := ""
	if inv.Requirements != nil {
		tname = inv.Requirements.Transport
	}
	var tr control.ExecutorTransport
	if tname == "" {
		tr = e.opts.Transports[0]
		for _, t := range e.opts.Transports {
			if t.Available() == nil {
				tr = t
				break
			}
		}
	} else if tr = e.transport(tname); tr == nil {
		return nil, control.Errorf(control.CodeDeclined, "transport %q is not offered by this executor", tname).
			WithHint("use --transport " + e.opts.Transports[0].Name())
	}
	if err := tr.Available(); err != nil {
		return nil, control.AsProtocolError(err, control.CodeDepMissing)
	}

	mode := inv.Lease.AccessMode
	if !slices.Contains(e.opts.AccessModes, mode) {
		if mode == control.AccessRW && slices.Contains(e.opts.AccessModes, control.AccessRO) {
			mode = control.AccessRO
		} else {
			return nil, control.Errorf(control.CodeDeclined, "access mode %q is not allowed here", mode).
				WithHint("allowed: " + fmt.Sprint(e.opts.AccessModes))
		}
	}
	ttl := min(control.Seconds(inv.Lease.TTLSeconds), e.opts.MaxTTL)

	wd := e.workDir(inv.DelegationID)
	if err := checkWorkDir(wd); err != nil {
		return nil, err
	}
	now := e.store.Now()
	a := &lease.Assignment{
		Lease: lease.Lease{ID: inv.DelegationID, AccessMode: mode, Transport: tr.Name(),
			TTLSeconds: int64(ttl / time.Second), Dialect: inv.Dialect()},
		WorkDir: wd, Description: inv.Task.Description, Prompt: inv.Task.Prompt, Peer: peer, DelegatorKey: delegator,
		StartBy: now.Add(e.opts.StartTimeout), CallChain: inv.CallChain,
	}
	if delegator == "" && inv.Auth != nil && e.validToken(inv.Auth.Credential) {
		a.DelegatorToken = TokenDigest(inv.Auth.Credential)
	}
	if inv.Session != nil {
		a.Session, a.SessionKey = inv.Session.Protocol, inv.Session.Key
	}
	var retentionMs *int64
	if a.Dialect == control.DialectHead {
		for _, r := range inv.Environment.Resources {
			a.Resources = append(a.Resources, lease.Resource{Name: r.Name, Mode: r.Mode})
		}
		if inv.RetentionMs != nil && time.Duration(*inv.RetentionMs)*time.Millisecond < e.opts.Retention {
			a.Retention = max(time.Duration(*inv.RetentionMs)*time.Millisecond, time.Millisecond)
		}
		ms := int64(e.retention(a) / time.Millisecond)
		retentionMs = &ms
	}
	switch err := e.store.CreateAssignment(a, e.opts.MaxConcurrent); {
	case errors.Is(err, lease.ErrBusy):
		return nil, control.Errorf(control.CodeDeclined, "Maximum concurrent delegations reached (%d)", e.opts.MaxConcurrent).
			WithHint("Try again later when current tasks complete")
	case errors.Is(err, lease.ErrExists):
		return nil, control.Errorf(control.CodeDeclined, "delegation %s was already invited here", inv.DelegationID).
			WithHint("use a new delegation id")
	case err != nil:
		e.log.Error("store assignment", "delegation", inv.DelegationID, "err", err)
		return nil, control.Errorf(control.CodeDeclined, "the executor cannot record the delegation")
	}
	e.sched.Kick()
	acc := &control.Accept{
		BaseMessage:     control.Header(control.TypeAccept, inv.DelegationID),
		RetentionMs:     retentionMs,
		ExecutorWorkDir: control.ExecutorWorkDir{Path: wd},
		ExecutorConstraints: &control.ExecutorConstraints{
			AcceptedAccessMode: mode,
			MaxTTLSeconds:      int64(e.opts.MaxTTL / time.Second),
			SandboxProfile:     e.opts.Sandbox,
			Session:            a.Session,
		},
	}
	if _, reverse := tr.(TunnelHost); reverse && inv.Requirements != nil && inv.Requirements.Connect == control.ConnectReverse {
		// The delegator will open the mount's connections to this port.
		acc.ExecutorConstraints.Connect = control.ConnectReverse
	}
	return acc, nil
}

// checkWorkDir refuses a work dir that exists and is not an empty directory.
func checkWorkDir(wd string) *control.ProtocolError {
	info, err := os.Lstat(wd)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || !info.IsDir() {
		return control.Errorf(control.CodeWorkdirDenied, "the work directory for this delegation is not usable")
	}
	f, err := os.Open(wd)
	if err != nil {
		return control.Errorf(control.CodeWorkdirDenied, "the work directory for this delegation is not usable")
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); !errors.Is(err, io.EOF) {
		return control.Errorf(control.CodeWorkdirDenied, "the work directory for this delegation is not empty").
			WithHint("use a new delegation id, or clear the executor's work root")
	}
	return nil
}

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

// doneEvent collects the result and returns the events that end the
// task: done, and before it in the head dialect the snapshot that holds
// the result (nil if there is none).
func (e *Executor) doneEvent(ctx context.Context, a *lease.Assignment, before archive.Manifest, summary string, extra func(*control.Event)) (snapshot, done []byte, err error) {
	// Before the teardown: that ends the mount, and its log with it.
	highlights, after, err := e.highlights(a, before)
	if err != nil {
		return nil, nil, err
	}
	tr := e.transport(a.Transport)
	var checksum string
	if a.AccessMode == control.AccessRW {
		checksum, err = e.packResult(ctx, tr, a)
	} else {
		_, err = tr.Teardown(ctx, a.ID, a.WorkDir, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	if summary == "" {
		summary = "The agent finished without output."
	}
	// A result is not part of the stored event: the event stream appends
	// it from the file (see handleEvents).
	ev := &control.Event{DelegationID: a.ID, Type: control.EventDone, Summary: summary, Highlights: highlights}
	extra(ev)
	if a.Dialect != control.DialectHead || checksum == "" {
		ev.ResultChecksum = checksum
		return nil, e.eventJSON(ev), nil
	}
	// The head dialect's result is a snapshot of the environment, named
	// in done. The checksum rides along as in our done (an extension).
	if after == nil { // a mount's log, which counts no files
		if after, err = highlightScan(a.Transport)(agentDir(a)); err != nil {
			return nil, nil, err
		}
	}
	snapID := "snap_" + checksum[:12]
	recommended := true
	snapshot = e.eventJSON(&control.Event{DelegationID: a.ID, Type: control.EventSnapshot, SnapshotID: snapID, Summary: summary,
		Highlights: ev.Highlights, Recommended: &recommended, ResultChecksum: checksum, Metadata: snapshotMetadata(after, ev.Highlights)})
	ev.SnapshotIDs, ev.RecommendedSnapshotID = []string{snapID}, snapID
	return snapshot, e.eventJSON(ev), nil
}

// resultFile is where a delegation's result ZIP is kept until its events
// are past retention.
func (e *Executor) resultFile(id string) string {
	return filepath.Join(e.opts.StateDir, "results", id+".zip")
}

// packResult has the transport write its result into the result file and
// returns the result's SHA-256 (hex); none is left, and the checksum is
// empty, if it has no result.
func (e *Executor) packResult(ctx context.Context, tr control.ExecutorTransport, a *lease.Assignment) (string, error) {
	name := e.resultFile(a.ID)
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return "", err
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	wrote, err := tr.Teardown(ctx, a.ID, a.WorkDir, io.MultiWriter(f, sum))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || !wrote {
		os.Remove(name)
		return "", err
	}
	if fi, err := os.Stat(name); err == nil {
		e.opts.Metrics.Archive("result_sent", fi.Size())
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
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

// deniedLine finds what a refused access looks like in an agent's
// output: the shell's "Permission denied", Node's EACCES, Python's
// PermissionError, a refused exec's status 126 — and, in a root of its
// own where what is not granted is not there at all, what a missing
// path looks like (ENOENT, a module or package not found).
var deniedLine = regexp.MustCompile(`(?i)permission denied|eacces|eperm|operation not permitted|status 126|no such file|enoent|cannot find (module|package)|module not found|not found`)

// deniedPath is an absolute path on such a line: one that starts a word
// (not the "/claude-agent-sdk" of a package name "@anthropic-ai/claude-agent-sdk").
var deniedPath = regexp.MustCompile(`(?:^|[\s'"(\[=])(/[^\s:'"()\[\],]+)`)

// loginLine is a line of an agent's words that says it has no credential:
// Claude Code's "Authentication required" and "Not logged in", Gemini
// CLI's "GEMINI_API_KEY", a 401 from a model API.
var loginLine = regexp.MustCompile(`(?i)auth(entication)? required|not logged in|/login|api[_ ]?key|unauthori[sz]ed|\b401\b|invalid x-api-key|credentials`)

// agentHint is the hint of a failed agent: what it lacks where its words
// say (credentials first, the sandbox's refusals after), "" where they say
// nothing this executor's operator can act on.
func agentHint(confine *sandbox.Policy, failed, stderr string) string {
	if h := LoginHint(failed, stderr); h != "" {
		return h
	}
	return sandboxHint(confine, failed+"\n"+stderr)
}

// LoginHint is the hint of an agent whose words (failed, or the telling
// line of its stderr) say it lacks a login: how its operator gives it
// one. "" where they do not.
func LoginHint(failed, stderr string) string {
	if !loginLine.MatchString(failed) && !loginLine.MatchString(lease.TellingLine(stderr)) {
		return ""
	}
	return "the agent has no credentials here: its operator passes its API key with awcp-fs serve --agent-env NAME " +
		"(ANTHROPIC_API_KEY for Claude Code, GEMINI_API_KEY for Gemini CLI, OPENAI_API_KEY for Codex), " +
		"or grants the login made as the daemon's user with --sandbox-allow ~/.claude:rw (~/.gemini, ~/.codex)"
}

// sandboxHint is the hint of a failed agent whose output says something
// was refused while the sandbox was on: the paths it names, and how to
// grant them. "" otherwise.
func sandboxHint(confine *sandbox.Policy, output string) string {
	if confine == nil {
		return ""
	}
	var paths []string
	denied := false
	for _, line := range strings.Split(output, "\n") {
		if !deniedLine.MatchString(line) {
			continue
		}
		denied = true
		for _, m := range deniedPath.FindAllStringSubmatch(line, -1) {
			p := m[1]
			if !slices.Contains(paths, p) && len(paths) < 5 {
				paths = append(paths, p)
			}
		}
	}
	if !denied {
		return ""
	}
	hint := "the agent's sandbox may have refused it"
	if len(paths) > 0 {
		hint += " " + strings.Join(paths, ", ")
	}
	return hint + ": the executor's operator grants a path with awcp-fs serve --sandbox-allow PATH[:rw]; awcp-fs doctor starts the agent in its sandbox and shows what it says"
}

// SandboxNote starts what the "running" event says of the agent's
// sandbox.
const SandboxNote = "sandbox: "

// confine has task at's agent, and what it starts, run in base's sandbox
// with at's work directory and a temporary directory of its own (TMPDIR,
// its summary file), which the caller removes after the task. Its caches
// are cache's (agentcache.go), or in that temporary directory without
// one. Its HOME is a fresh one in there too, unless the operator granted
// the daemon's (and the agent is the daemon's user): tools that read
// their configuration from HOME (git, which fails on a home it may not
// read) find none, rather than a refusal; a fresh one holds a git
// identity, so that the agent's plain `git commit` works. With user, the
// agent's own uid, the temporary directory and the home are that user's,
// and the cache is lent to it as its own (idmapped: Policy.Yours).
func confine(at *agent.Task, base sandbox.Policy, user *control.LocalUser, cache, executorName string) (*sandbox.Policy, string, error) {
	tmp, err := os.MkdirTemp("", "awcp-agent-")
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*sandbox.Policy, string, error) {
		os.RemoveAll(tmp)
		return nil, "", err
	}
	p := base
	p.RW = append(slices.Clone(base.RW), at.WorkDir, tmp)
	at.SummaryFile = filepath.Join(tmp, "summary")
	at.Env = append(at.Env, "TMPDIR="+tmp)
	if cache == "" {
		// A cache of its own, in its temporary directory: it starts cold
		// and leaves nothing for the next agent.
		cache = filepath.Join(tmp, "cache")
	} else {
		p.RW = append(p.RW, cache)
		p.Yours = append(slices.Clone(p.Yours), cache)
	}
	for _, c := range cacheEnv {
		at.Env = append(at.Env, c.name+"="+filepath.Join(cache, c.sub))
	}
	home, _ := os.UserHomeDir()
	if user != nil || home == "" || !(slices.Contains(p.RO, home) || slices.Contains(p.RW, home)) {
		home = filepath.Join(tmp, "home")
		if err := os.Mkdir(home, 0o700); err != nil {
			return fail(err)
		}
		if executorName == "" {
			executorName = "executor"
		}
		gitconfig := fmt.Sprintf("[user]\n\tname = awcp agent\n\temail = agent@%s.awcp.invalid\n", strings.Map(func(r rune) rune {
			if r == '.' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, executorName))
		if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(gitconfig), 0o600); err != nil {
			return fail(err)
		}
		if err := linkHomeGrants(home, p); err != nil {
			return fail(err)
		}
		at.Env = append(at.Env, "HOME="+home)
	}
	if user != nil {
		p.User = &sandbox.User{UID: user.UID, GID: user.GID, Home: home}
		at.Owner = &agent.Owner{UID: int(user.UID), GID: int(user.GID)}
		// Its temporary directory and all it holds (the home, its
		// .gitconfig and the links to the grants) are the agent's.
		if err := filepath.WalkDir(tmp, func(d string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(d, int(user.UID), int(user.GID))
		}); err != nil {
			return fail(err)
		}
	}
	at.Confine = p.Wrap
	return &p, tmp, nil
}

// linkHomeGrants makes the operator's grants that lie in the daemon's
// home (--sandbox-allow ~/.claude:rw, ~/.gemini, a ~/.codex/auth.json)
// show at the same place in the agent's fresh home, as symlinks to where
// the sandbox binds them: an agent finds its credentials at ~/.claude
// whatever HOME it has. A grant inside another is covered by it.
func linkHomeGrants(home string, p sandbox.Policy) error {
	daemonHome, err := os.UserHomeDir()
	if err != nil || daemonHome == "" || daemonHome == "/" {
		return nil
	}
	grants := append(slices.Clone(p.RW), p.RO...)
	slices.Sort(grants)
	var linked []string
	for _, g := range grants {
		rel, err := filepath.Rel(daemonHome, g)
		if err != nil || rel == "." || !filepath.IsLocal(rel) || rel == ".gitconfig" {
			continue
		}
		if slices.ContainsFunc(linked, func(l string) bool { return strings.HasPrefix(g, l+"/") }) {
			continue
		}
		at := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(at), 0o700); err != nil {
			return err
		}
		if err := os.Symlink(g, at); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		linked = append(linked, g)
	}
	return nil
}

// snapshotMetadata is a snapshot event's metadata as the reference's
// delegator keeps it with a staged snapshot (SnapshotMetadata): the files
// of the workspace the snapshot holds, their bytes, and those changed.
func snapshotMetadata(after archive.Manifest, changed []string) json.RawMessage {
	m := struct {
		FileCount    int      `json:"fileCount"`
		TotalBytes   int64    `json:"totalBytes"`
		ChangedFiles []string `json:"changedFiles"`
	}{ChangedFiles: changed}
	if m.ChangedFiles == nil {
		m.ChangedFiles = []string{}
	}
	for _, e := range after {
		if e.Kind == archive.KindFile {
			m.FileCount++
			m.TotalBytes += e.Size
		}
	}
	raw, _ := json.Marshal(m)
	return raw
}
