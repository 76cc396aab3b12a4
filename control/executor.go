package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control/agent"
	awcpfs "github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/lease"
)

// Worker runs one task's agent in its work dir: agent.Shell for the
// agent-command contract, acp.Worker for an ACP agent.
type Worker interface {
	Run(ctx context.Context, t agent.Task, h agent.Hooks) (*agent.Result, error)
}

var _ Worker = agent.Shell{}

// ExecutorOptions configures an Executor. A zero field takes the default
// noted on it; the required ones have none.
type ExecutorOptions struct {
	// WorkRoot is the only directory work dirs are made in, as
	// {WorkRoot}/{delegationId}. Required, absolute.
	WorkRoot string
	// AgentCommand is the shell command run for every task (agent.Shell).
	// Required unless Worker is set.
	AgentCommand string
	// Worker runs each task's agent instead of AgentCommand: an ACP agent,
	// say (acp.Worker).
	Worker Worker
	// Permission decides the agent's permission requests: PermissionAuto
	// (the default) picks the first allow option, PermissionDeny the first
	// reject option, PermissionForward asks the delegator with a
	// "permission" event. Every decision is an event saying who made it.
	Permission string
	// PermissionTimeout cancels a forwarded request nobody answered.
	// Default 5m.
	PermissionTimeout time.Duration
	// Sandbox is declared in ACCEPT. It must say what the worker enforces.
	// Default: what a shell agent gets — exec and network, not confined.
	Sandbox *SandboxProfile
	// Store holds assignments and events. Required.
	Store *lease.Store
	// StateDir holds summary files. Required.
	StateDir string
	// Transports offered, preferred first. Required.
	Transports []ExecutorTransport
	// MaxConcurrent is how many delegations may be active. Default 5.
	MaxConcurrent int
	// MaxTTL caps a lease. Default 1h.
	MaxTTL time.Duration
	// AccessModes are the modes allowed. Default rw and ro. When rw is asked
	// and only ro allowed, the lease is downgraded and ACCEPT says so.
	AccessModes []string
	// Tokens, if any, are the credentials an INVITE's auth must carry; every
	// other request must then send one as "Authorization: Bearer". Secret.
	Tokens []string
	// StartTimeout is how long an accepted INVITE waits for START before
	// its slot is freed. Default 2m.
	StartTimeout time.Duration
	// Retention is how long events are kept after the terminal one. Default 1h.
	Retention time.Duration
	// KeepAlive is the interval of SSE keep-alive comments. Default 15s.
	KeepAlive time.Duration
	// MaxBodyBytes bounds a POST body; it must fit the largest archive
	// admission lets through (100 MB as base64). Default 256 MiB.
	MaxBodyBytes int64
	// KillGrace is the agent's time between SIGTERM and SIGKILL. Default 1s,
	// so that an expired lease is torn down within 2s of its end.
	KillGrace time.Duration
	// Name and Version appear in the agent card and status. Name default
	// "awcp-fs".
	Name, Version string
	// Description and Skills tell delegators (and the models choosing an
	// executor for them, spec §8.3) what this executor's agent is good at.
	// Default: a generic description and no skills.
	Description string
	Skills      []CardSkill
	// Logger default slog.Default().
	Logger *slog.Logger
}

func (o ExecutorOptions) validate() error {
	var errs []error
	if !filepath.IsAbs(o.WorkRoot) {
		errs = append(errs, errors.New("work root must be an absolute path"))
	}
	if o.AgentCommand == "" && o.Worker == nil {
		errs = append(errs, errors.New("an agent command or worker is required"))
	}
	switch o.Permission {
	case "", PermissionAuto, PermissionDeny, PermissionForward:
	default:
		errs = append(errs, fmt.Errorf("permission policy %q is not auto, deny or forward", o.Permission))
	}
	if o.Store == nil || o.StateDir == "" {
		errs = append(errs, errors.New("store and state dir are required"))
	}
	if len(o.Transports) == 0 {
		errs = append(errs, errors.New("at least one transport is required"))
	}
	for _, m := range o.AccessModes {
		if m != AccessRO && m != AccessRW {
			errs = append(errs, fmt.Errorf("access mode %q is not ro or rw", m))
		}
	}
	return errors.Join(errs...)
}

func (o ExecutorOptions) withDefaults() ExecutorOptions {
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 5
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = time.Hour
	}
	if len(o.AccessModes) == 0 {
		o.AccessModes = []string{AccessRW, AccessRO}
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.Retention <= 0 {
		o.Retention = time.Hour
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 15 * time.Second
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 256 << 20
	}
	if o.KillGrace <= 0 {
		o.KillGrace = time.Second
	}
	if o.Name == "" {
		o.Name = "awcp-fs"
	}
	if o.Worker == nil {
		o.Worker = agent.Shell{Command: o.AgentCommand, KillGrace: o.KillGrace}
	}
	if o.Permission == "" {
		o.Permission = PermissionAuto
	}
	if o.PermissionTimeout <= 0 {
		o.PermissionTimeout = 5 * time.Minute
	}
	if o.Sandbox == nil {
		yes, no := true, false
		o.Sandbox = &SandboxProfile{CwdOnly: &no, AllowNetwork: &yes, AllowExec: &yes}
	}
	if o.Description == "" {
		o.Description = "AWCP executor: works on delegated workspaces with its own tools"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Executor is the executor daemon of spec §7: policy, transports, the task
// runner and the event streams. Serve its Handler and call Run.
type Executor struct {
	opts  ExecutorOptions
	store *lease.Store
	log   *slog.Logger
	sched *lease.Scheduler

	mu     sync.Mutex               // guards tasks and notify
	tasks  map[string]*task         // running agents by delegation id
	notify map[string]chan struct{} // closed when a delegation gets events

	wg sync.WaitGroup // task goroutines
}

// task is one running agent.
type task struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the task goroutine has cleaned up
	// asks are the permission requests forwarded to the delegator and not
	// yet answered, by request id; guarded by Executor.mu.
	asks map[string]*ask
}

// NewExecutor checks opts and builds an Executor.
func NewExecutor(opts ExecutorOptions) (*Executor, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(opts.WorkRoot, 0o700); err != nil {
		return nil, fmt.Errorf("work root: %w", err)
	}
	e := &Executor{
		opts: opts, store: opts.Store, log: opts.Logger,
		tasks: map[string]*task{}, notify: map[string]chan struct{}{},
	}
	// Workspaces being received when a previous run stopped are of no use.
	if err := os.RemoveAll(e.incomingDir()); err != nil {
		return nil, fmt.Errorf("incoming workspaces: %w", err)
	}
	if err := os.MkdirAll(e.incomingDir(), 0o700); err != nil {
		return nil, fmt.Errorf("incoming workspaces: %w", err)
	}
	e.sched = lease.NewScheduler(lease.Scheduler{
		List:   e.due,
		Expire: e.expire,
		Logger: opts.Logger,
	})
	return e, nil
}

// Run recovers what a previous run left, then expires leases and drops old
// event streams until ctx is done. On return every task has been stopped
// and cleaned up.
func (e *Executor) Run(ctx context.Context) {
	e.recover(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.sched.Run(ctx) }()
	janitor := time.NewTicker(min(e.opts.Retention/4+time.Second, time.Minute))
	defer janitor.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-janitor.C:
			e.dropExpiredStreams()
		}
	}
	wg.Wait()
	e.stopAll()
}

// stopAll ends every running task on shutdown with TASK_FAILED, so that a
// delegator still connected hears of it now rather than at expiry.
func (e *Executor) stopAll() {
	e.mu.Lock()
	ids := make([]string, 0, len(e.tasks))
	for id := range e.tasks {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	for _, id := range ids {
		err := e.end(context.Background(), id, lease.SendError,
			Errorf(CodeTaskFailed, "the executor shut down").WithHint("delegate again"))
		if err != nil {
			e.log.Warn("stop task", "delegation", id, "err", err)
		}
	}
	e.wg.Wait()
}

func (e *Executor) workDir(id string) string { return filepath.Join(e.opts.WorkRoot, id) }

// incomingDir holds workspaces of the archive transport while START is
// read and set up.
func (e *Executor) incomingDir() string { return filepath.Join(e.opts.StateDir, "incoming") }

func (e *Executor) summaryFile(id string) string {
	return filepath.Join(e.opts.StateDir, "summaries", id)
}

func (e *Executor) transport(name string) ExecutorTransport {
	for _, t := range e.opts.Transports {
		if t.Name() == name {
			return t
		}
	}
	return nil
}

// due lists the leases the scheduler watches: an accepted INVITE is due at
// its START deadline, a running task at its lease's expiry.
func (e *Executor) due() ([]lease.Due, error) {
	as, err := e.store.Assignments()
	out := make([]lease.Due, 0, len(as))
	for _, a := range as {
		at := a.ExpiresAt
		if a.State == lease.Accepted {
			at = a.StartBy
		}
		out = append(out, lease.Due{ID: a.ID, State: a.State, ExpiresAt: at})
	}
	return out, err
}

func (e *Executor) expire(ctx context.Context, id string) error {
	a, err := e.store.Assignment(id)
	if err != nil {
		return err
	}
	if a.State == lease.Accepted {
		return e.end(ctx, id, lease.Expire, Errorf(CodeStartExpired, "no START arrived within %s of ACCEPT", e.opts.StartTimeout))
	}
	return e.end(ctx, id, lease.Expire, Errorf(CodeExpired, "the lease expired at %s", Timestamp(a.ExpiresAt)).
		WithHint("delegate again with a longer --ttl"))
}

// end moves delegation id to a terminal state with an error event, stops its
// agent and removes its work dir. It is a no-op for a lease already ended.
func (e *Executor) end(ctx context.Context, id string, ev lease.Event, pe *ProtocolError) error {
	data := e.eventJSON(&Event{DelegationID: id, Type: EventError, Code: pe.Code, Message: pe.Message, Hint: pe.Hint})
	a, _, err := e.store.FireAssignment(id, ev, pe.Code+": "+pe.Message, func(a *lease.Assignment) error {
		a.Failure = &lease.Failure{Code: pe.Code, Message: pe.Message, Hint: pe.Hint}
		return nil
	}, data)
	var te *lease.TransitionError
	if errors.As(err, &te) && te.From.Terminal() {
		return nil
	}
	if err != nil {
		return err
	}
	// Subscribers hear of the end once the agent is stopped and the work dir
	// is gone (a subscriber connecting meanwhile may read it sooner).
	defer e.publish(id)
	e.log.Info("delegation ended", "delegation", id, "state", a.State, "code", pe.Code)
	e.mu.Lock()
	t := e.tasks[id]
	e.mu.Unlock()
	if t != nil {
		t.cancel()
		select {
		case <-t.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	// No task. If setup was under way, START finds the lease ended and
	// cleans up itself; otherwise whatever exists goes now.
	if prev := a.Transitions[len(a.Transitions)-1].From; prev != lease.Started {
		return e.removeWorkDir(ctx, a)
	}
	return nil
}

func (e *Executor) removeWorkDir(ctx context.Context, a *lease.Assignment) error {
	if t := e.transport(a.Transport); t != nil {
		if _, err := t.Teardown(ctx, a.ID, transportDir(a), nil); err != nil {
			return fmt.Errorf("teardown %s: %w", a.ID, err)
		}
	}
	// Never delete recursively through a live mount: that would delete
	// the delegator's files.
	if awcpfs.IsMountpoint(a.WorkDir) || awcpfs.IsMountpoint(transportDir(a)) {
		return fmt.Errorf("work dir of %s: %w", a.ID, errMounted)
	}
	if err := os.RemoveAll(a.WorkDir); err != nil {
		return fmt.Errorf("remove work dir of %s: %w", a.ID, err)
	}
	os.Remove(e.summaryFile(a.ID))
	return nil
}

// recover settles what a previous run left: an interrupted setup failed, an
// agent that lost its daemon is stopped (its lease expired if overdue).
func (e *Executor) recover(ctx context.Context) {
	as, err := e.store.Assignments()
	if err != nil {
		e.log.Error("recover: list assignments", "err", err)
		return
	}
	for _, a := range as {
		switch a.State {
		case lease.Started:
			// No START handler survives a restart to clean up after it.
			e.end(ctx, a.ID, lease.SendError, Errorf(CodeSetupFailed, "the executor restarted during setup").
				WithHint("delegate again"))
			if err := e.removeWorkDir(ctx, a); err != nil {
				e.log.Warn("recover: clean up", "delegation", a.ID, "err", err)
			}
		case lease.Running:
			agent.KillGroup(a.AgentPID)
			if !a.ExpiresAt.IsZero() && !e.store.Now().Before(a.ExpiresAt) {
				e.expire(ctx, a.ID)
				continue
			}
			e.end(ctx, a.ID, lease.SendError, Errorf(CodeTaskFailed, "the executor restarted and stopped the agent").
				WithHint("delegate again"))
		}
		if a.State.Terminal() {
			if _, err := os.Lstat(a.WorkDir); err == nil {
				e.removeWorkDir(ctx, a)
			}
		}
	}
}

// dropExpiredStreams deletes ended assignments whose retention is over.
func (e *Executor) dropExpiredStreams() {
	as, err := e.store.Assignments()
	if err != nil {
		e.log.Warn("retention: list assignments", "err", err)
		return
	}
	now := e.store.Now()
	for _, a := range as {
		if a.State.Terminal() && now.Sub(a.EndedAt) > e.retention(a) {
			if err := e.forget(a.ID); err != nil {
				e.log.Warn("retention: delete", "delegation", a.ID, "err", err)
			}
		}
	}
}

// forget deletes an ended assignment, its events and its result.
func (e *Executor) forget(id string) error {
	if err := e.store.DeleteAssignment(id); err != nil {
		return err
	}
	os.Remove(e.resultFile(id))
	e.mu.Lock()
	delete(e.notify, id)
	e.mu.Unlock()
	return nil
}

// publish wakes the subscribers of id.
func (e *Executor) publish(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch, ok := e.notify[id]; ok {
		close(ch)
		delete(e.notify, id)
	}
}

// watch returns a channel closed at id's next event. Take it before reading
// the store, so an event between the read and the wait is not missed.
func (e *Executor) watch(id string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.notify[id]
	if !ok {
		ch = make(chan struct{})
		e.notify[id] = ch
	}
	return ch
}

func (e *Executor) eventJSON(ev *Event) []byte {
	ev.Timestamp = Timestamp(e.store.Now())
	data, err := Marshal(ev)
	if err != nil {
		panic(err) // Event has only marshalable fields
	}
	return data
}

// admit handles INVITE.
func (e *Executor) admit(inv *Invite, peer string) (*Accept, *ProtocolError) {
	if len(e.opts.Tokens) > 0 && (inv.Auth == nil || !e.validToken(inv.Auth.Credential)) {
		return nil, Errorf(CodeAuthFailed, "INVITE carries no valid credential").
			WithHint("pass the executor's token with --token")
	}
	tname := ""
	if inv.Requirements != nil {
		tname = inv.Requirements.Transport
	}
	var tr ExecutorTransport
	if tname == "" {
		tr = e.opts.Transports[0]
		for _, t := range e.opts.Transports {
			if t.Available() == nil {
				tr = t
				break
			}
		}
	} else if tr = e.transport(tname); tr == nil {
		return nil, Errorf(CodeDeclined, "transport %q is not offered by this executor", tname).
			WithHint("use --transport " + e.opts.Transports[0].Name())
	}
	if err := tr.Available(); err != nil {
		return nil, AsProtocolError(err, CodeDepMissing)
	}

	mode := inv.Lease.AccessMode
	if !slices.Contains(e.opts.AccessModes, mode) {
		if mode == AccessRW && slices.Contains(e.opts.AccessModes, AccessRO) {
			mode = AccessRO
		} else {
			return nil, Errorf(CodeDeclined, "access mode %q is not allowed here", mode).
				WithHint("allowed: " + fmt.Sprint(e.opts.AccessModes))
		}
	}
	ttl := min(time.Duration(inv.Lease.TTLSeconds)*time.Second, e.opts.MaxTTL)

	wd := e.workDir(inv.DelegationID)
	if err := checkWorkDir(wd); err != nil {
		return nil, err
	}
	now := e.store.Now()
	a := &lease.Assignment{
		Lease: lease.Lease{ID: inv.DelegationID, AccessMode: mode, Transport: tr.Name(),
			TTLSeconds: int64(ttl / time.Second), Dialect: inv.Dialect()},
		WorkDir: wd, Description: inv.Task.Description, Prompt: inv.Task.Prompt, Peer: peer,
		StartBy: now.Add(e.opts.StartTimeout),
	}
	var retentionMs *int64
	if a.Dialect == DialectHead {
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
		return nil, Errorf(CodeDeclined, "Maximum concurrent delegations reached (%d)", e.opts.MaxConcurrent).
			WithHint("Try again later when current tasks complete")
	case errors.Is(err, lease.ErrExists):
		return nil, Errorf(CodeDeclined, "delegation %s was already invited here", inv.DelegationID).
			WithHint("use a new delegation id")
	case err != nil:
		e.log.Error("store assignment", "delegation", inv.DelegationID, "err", err)
		return nil, Errorf(CodeDeclined, "the executor cannot record the delegation")
	}
	e.sched.Kick()
	return &Accept{
		BaseMessage:     header(TypeAccept, inv.DelegationID),
		RetentionMs:     retentionMs,
		ExecutorWorkDir: ExecutorWorkDir{Path: wd},
		ExecutorConstraints: &ExecutorConstraints{
			AcceptedAccessMode: mode,
			MaxTTLSeconds:      int64(e.opts.MaxTTL / time.Second),
			SandboxProfile:     e.opts.Sandbox,
		},
	}, nil
}

// checkWorkDir refuses a work dir that exists and is not an empty directory.
func checkWorkDir(wd string) *ProtocolError {
	info, err := os.Lstat(wd)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || !info.IsDir() {
		return Errorf(CodeWorkdirDenied, "the work directory for this delegation is not usable")
	}
	f, err := os.Open(wd)
	if err != nil {
		return Errorf(CodeWorkdirDenied, "the work directory for this delegation is not usable")
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); !errors.Is(err, io.EOF) {
		return Errorf(CodeWorkdirDenied, "the work directory for this delegation is not empty").
			WithHint("use a new delegation id, or clear the executor's work root")
	}
	return nil
}

// start handles START: it sets the workspace up and launches the agent.
// It returns only after setup, so {ok:true} means the workspace is there.
func (e *Executor) start(ctx context.Context, st *Start) *ProtocolError {
	id := st.DelegationID
	a, err := e.store.Assignment(id)
	if errors.Is(err, lease.ErrNotFound) {
		return Errorf(CodeDeclined, "no INVITE was accepted for delegation %s", id).WithHint("send INVITE first")
	}
	if err != nil {
		return Errorf(CodeSetupFailed, "the executor cannot read the delegation")
	}
	now := e.store.Now()
	expiresAt, _ := ParseTimestamp(st.Lease.ExpiresAt)
	switch {
	case a.State == lease.Expired && a.Failure != nil && a.Failure.Code == CodeStartExpired,
		a.State == lease.Accepted && !now.Before(a.StartBy):
		return Errorf(CodeStartExpired, "START came too late: the accepted INVITE lapsed").WithHint("delegate again")
	case a.State != lease.Accepted:
		return Errorf(CodeDeclined, "delegation %s is %s; START is not expected", id, a.State)
	case !now.Before(expiresAt):
		return e.refuseStart(ctx, id, lease.Expire,
			Errorf(CodeStartExpired, "the lease in START expired at %s", st.Lease.ExpiresAt).WithHint("delegate again"))
	}
	tr := e.transport(st.WorkDir.Transport)
	if tr == nil {
		return e.refuseStart(ctx, id, lease.SendError,
			Errorf(CodeDeclined, "transport %q is not offered by this executor", st.WorkDir.Transport))
	}
	if err := tr.Available(); err != nil {
		return e.refuseStart(ctx, id, lease.SendError, AsProtocolError(err, CodeDepMissing))
	}
	// The executor's own caps win over what START says.
	expiresAt = minTime(expiresAt, a.AcceptedAt.Add(time.Duration(a.TTLSeconds)*time.Second+time.Minute), now.Add(e.opts.MaxTTL))
	mode := a.AccessMode
	if st.Lease.AccessMode == AccessRO {
		mode = AccessRO
	}
	a, _, err = e.store.FireAssignment(id, lease.SendStart, "START received", func(a *lease.Assignment) error {
		a.ExpiresAt, a.AccessMode, a.Transport = expiresAt, mode, tr.Name()
		return nil
	}, nil)
	if err != nil {
		return Errorf(CodeDeclined, "delegation %s cannot start: %v", id, err)
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
	e.mu.Lock()
	e.tasks[id] = t
	e.mu.Unlock()
	running := e.eventJSON(&Event{DelegationID: id, Type: EventStatus, Status: StatusRunning, Message: "workspace ready; agent starting"})
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
			return &ProtocolError{Code: cur.Failure.Code, Message: cur.Failure.Message, Hint: cur.Failure.Hint}
		}
		return Errorf(CodeSetupFailed, "delegation %s ended during setup", id)
	}
	e.publish(id)
	e.wg.Add(1)
	go e.run(tctx, t, a)
	e.sched.Kick()
	return nil
}

// refuseStart ends an accepted delegation whose START cannot be honoured,
// freeing its slot at once rather than at the START deadline.
func (e *Executor) refuseStart(ctx context.Context, id string, ev lease.Event, pe *ProtocolError) *ProtocolError {
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

func (e *Executor) setup(ctx context.Context, a *lease.Assignment, tr ExecutorTransport, info *WorkDirInfo) *ProtocolError {
	if pe := checkWorkDir(a.WorkDir); pe != nil {
		return pe
	}
	if err := os.Mkdir(a.WorkDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		e.log.Error("create work dir", "delegation", a.ID, "err", err)
		return Errorf(CodeSetupFailed, "cannot create the work directory")
	}
	p := SetupParams{ID: a.ID, Info: info, WorkDir: a.WorkDir, AccessMode: a.AccessMode}
	if a.Dialect == DialectHead && tr.Name() == TransportSSHFS {
		// A head delegator's locator is the environment root, which
		// holds each resource under its name (the reference's as a
		// symlink its server resolves). The mount is of the resource
		// itself, so that nothing else the root holds is reachable.
		if len(a.Resources) != 1 {
			return Errorf(CodeSetupFailed, "this executor mounts one resource per delegation; the INVITE named %d", len(a.Resources)).
				WithHint("lend one directory, or use the archive transport")
		}
		r := a.Resources[0]
		cp := *info
		cp.ExportLocator = path.Join(info.ExportLocator, r.Name)
		p.Info, p.WorkDir = &cp, transportDir(a)
		if r.Mode == AccessRO {
			p.AccessMode = AccessRO
		}
		if err := os.Mkdir(p.WorkDir, 0o700); err != nil {
			e.log.Error("create resource dir", "delegation", a.ID, "err", err)
			return Errorf(CodeSetupFailed, "cannot create the work directory")
		}
	}
	if err := tr.Setup(ctx, p); err != nil {
		e.log.Warn("setup failed", "delegation", a.ID, "err", err)
		return AsProtocolError(err, CodeSetupFailed)
	}
	// An archive from a head delegator has a folder per resource; one it
	// left out (an empty directory) is made, so the agent finds it.
	for _, r := range a.Resources {
		if err := os.MkdirAll(filepath.Join(a.WorkDir, r.Name), 0o700); err != nil {
			return Errorf(CodeSetupFailed, "the workspace has no usable folder %q", r.Name)
		}
	}
	return nil
}

// transportDir is where a's transport set its workspace up: the work dir,
// or for a head live mount the one resource's folder in it.
func transportDir(a *lease.Assignment) string {
	if a.Dialect == DialectHead && a.Transport == TransportSSHFS && len(a.Resources) == 1 {
		return filepath.Join(a.WorkDir, a.Resources[0].Name)
	}
	return a.WorkDir
}

// agentDir is where a's agent runs: the work dir, or in the head dialect
// the resource the reference would run it in (see PrimaryResource).
func agentDir(a *lease.Assignment) string {
	if a.Dialect != DialectHead {
		return a.WorkDir
	}
	env := Environment{}
	for _, r := range a.Resources {
		env.Resources = append(env.Resources, Resource{Name: r.Name, Mode: r.Mode})
	}
	return filepath.Join(a.WorkDir, env.PrimaryResource())
}

// retention is how long a's events are kept after it ended.
func (e *Executor) retention(a *lease.Assignment) time.Duration {
	if a.Retention > 0 {
		return a.Retention
	}
	return e.opts.Retention
}

// run is a task's goroutine: the agent, then the result, then clean-up.
func (e *Executor) run(ctx context.Context, t *task, a *lease.Assignment) {
	defer e.wg.Done()
	defer close(t.done)
	defer func() {
		e.mu.Lock()
		delete(e.tasks, a.ID)
		e.mu.Unlock()
		if err := e.removeWorkDir(context.Background(), a); err != nil {
			e.log.Warn("clean up", "delegation", a.ID, "err", err)
		}
	}()
	log := e.log.With("delegation", a.ID)
	before, err := highlightScan(a.Transport)(agentDir(a))
	if err != nil {
		log.Warn("scan work dir before the task", "err", err)
	}

	updates := make(chan agent.Update, 256)
	var pumpDone sync.WaitGroup
	pumpDone.Add(1)
	go func() { defer pumpDone.Done(); e.pumpProgress(a.ID, updates) }()

	os.MkdirAll(filepath.Dir(e.summaryFile(a.ID)), 0o700)
	res, err := e.opts.Worker.Run(ctx, agent.Task{
		DelegationID: a.ID, Prompt: a.Prompt, Description: a.Description,
		WorkDir: agentDir(a), AccessMode: a.AccessMode, SummaryFile: e.summaryFile(a.ID),
	}, agent.Hooks{
		Started: func(pid int) {
			if _, err := e.store.UpdateAssignment(a.ID, func(a *lease.Assignment) error { a.AgentPID = pid; return nil }); err != nil {
				log.Warn("record agent pid", "err", err)
			}
		},
		Update: func(u agent.Update) { updates <- u },
		Permission: func(ctx context.Context, req agent.PermissionRequest) agent.Decision {
			return e.decide(ctx, a.ID, t, req)
		},
	})
	close(updates)
	pumpDone.Wait()
	if errors.Is(err, agent.ErrKilled) {
		return // cancel, expiry or shutdown: the one who ended it reported it
	}

	var final, snapshot []byte
	var ev lease.Event
	switch {
	case err != nil:
		ev = lease.SendError
		final = e.eventJSON(&Event{DelegationID: a.ID, Type: EventError, Code: CodeTaskFailed, Message: "the agent could not run: " + err.Error()})
	case res.Failed != "":
		ev = lease.SendError
		final = e.eventJSON(&Event{DelegationID: a.ID, Type: EventError, Code: CodeTaskFailed, Message: res.Failed})
	default:
		ev = lease.ReceiveDone
		snapshot, final, err = e.doneEvent(ctx, a, before, res.Summary)
		if err != nil {
			log.Error("collect result", "err", err)
			ev = lease.SendError
			final = e.eventJSON(&Event{DelegationID: a.ID, Type: EventError, Code: CodeTaskFailed, Message: "the result could not be collected"})
		}
	}
	// Clean up before the terminal event: whoever hears "done" may count on
	// the executor having let go of the workspace.
	if err := e.removeWorkDir(ctx, a); err != nil {
		log.Warn("clean up", "err", err)
	}
	var decoded Event
	json.Unmarshal(final, &decoded)
	_, _, err = e.store.FireAssignment(a.ID, ev, "agent finished", func(a *lease.Assignment) error {
		if decoded.Type == EventError {
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

// highlightScan is how a task's work dir is scanned for its highlights,
// before and after the task. On a live mount, by size, mode and mtime:
// hashing would read every file twice more over the network, and a task's
// writes always move the mtime. An archive's copy is on this machine's
// disk: there by content, so that a file rewritten the same (sed -i that
// matched nothing, a formatter with nothing to do) is not reported as
// changed — as the delegator's apply does not report it either.
func highlightScan(transport string) func(dir string) (archive.Manifest, error) {
	if transport == TransportArchive {
		return archive.Scan
	}
	return archive.ScanMeta
}

// doneEvent collects the result and returns the events that end the
// task: done, and before it in the head dialect the snapshot that holds
// the result (nil if there is none).
func (e *Executor) doneEvent(ctx context.Context, a *lease.Assignment, before archive.Manifest, summary string) (snapshot, done []byte, err error) {
	after, err := highlightScan(a.Transport)(agentDir(a))
	if err != nil {
		return nil, nil, err
	}
	tr := e.transport(a.Transport)
	var checksum string
	if a.AccessMode == AccessRW {
		checksum, err = e.packResult(ctx, tr, a)
	} else {
		_, err = tr.Teardown(ctx, a.ID, transportDir(a), nil)
	}
	if err != nil {
		return nil, nil, err
	}
	if summary == "" {
		summary = "The agent finished without output."
	}
	// A result is not part of the stored event: the event stream appends
	// it from the file (see handleEvents).
	ev := &Event{DelegationID: a.ID, Type: EventDone, Summary: summary, Highlights: archive.Changed(before, after)}
	if a.Dialect != DialectHead || checksum == "" {
		ev.ResultChecksum = checksum
		return nil, e.eventJSON(ev), nil
	}
	// The head dialect's result is a snapshot of the environment, named
	// in done. The checksum rides along as in our done (an extension).
	snapID := "snap_" + checksum[:12]
	recommended := true
	snapshot = e.eventJSON(&Event{DelegationID: a.ID, Type: EventSnapshot, SnapshotID: snapID, Summary: summary,
		Highlights: ev.Highlights, Recommended: &recommended, ResultChecksum: checksum})
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
func (e *Executor) packResult(ctx context.Context, tr ExecutorTransport, a *lease.Assignment) (string, error) {
	name := e.resultFile(a.ID)
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return "", err
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	wrote, err := tr.Teardown(ctx, a.ID, transportDir(a), io.MultiWriter(f, sum))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || !wrote {
		os.Remove(name)
		return "", err
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
		if _, err := e.store.AppendEvents(id, batch); err != nil {
			continue // the lease ended; drain the rest
		}
		e.publish(id)
	}
}

func (e *Executor) progress(id string, u agent.Update) []byte {
	return e.eventJSON(&Event{DelegationID: id, Type: EventStatus, Status: StatusProgress, Message: u.Message, Progress: u.Progress})
}

func (e *Executor) validToken(tok string) bool {
	for _, t := range e.opts.Tokens {
		if constantTimeEqual(t, tok) {
			return true
		}
	}
	return false
}

// Active counts delegations holding a slot.
func (e *Executor) Active() int {
	as, _ := e.store.Assignments()
	n := 0
	for _, a := range as {
		if a.Active() {
			n++
		}
	}
	return n
}

func parseLastEventID(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}
