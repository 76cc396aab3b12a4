// Package executor is the executor's role (spec §7): the HTTP service that
// takes delegations under its policy, sets each workspace up through a
// transport (the archive, or the FUSE mount of package fs), runs the agent
// and streams its events, and cleans up at the lease's end. It does not
// link the SSH server: that is the delegator's.
package executor

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/mountinfo"
	"github.com/awcp/awcp/internal/sandbox"
	"github.com/awcp/awcp/lease"
)

// Worker runs one task's agent in its work dir: agent.Shell for the
// agent-command contract, acp.Worker for an ACP agent.
type Worker interface {
	Run(ctx context.Context, t agent.Task, h agent.Hooks) (*agent.Result, error)
}

var _ Worker = agent.Shell{}

// Options configures an Executor. A zero field takes the default
// noted on it; the required ones have none.
type Options struct {
	// WorkRoot is the only directory work dirs are made in, as
	// {WorkRoot}/{delegationId}. Required, absolute.
	WorkRoot string
	// AgentCommand is the shell command run for every task (agent.Shell).
	// Required unless Worker is set.
	AgentCommand string
	// Worker runs each task's agent instead of AgentCommand: an ACP agent,
	// say (acp.Worker).
	Worker Worker
	// Sessions, if set, runs session delegations (session.go): the ACP
	// agent's relay. Without it the INVITEs asking for one are refused.
	Sessions SessionRunner
	// Permission decides the agent's permission requests: PermissionAuto
	// (the default) picks the first allow option, PermissionDeny the first
	// reject option, PermissionForward asks the delegator with a
	// "permission" event. Every decision is an event saying who made it.
	Permission string
	// PermissionTimeout cancels a forwarded request nobody answered.
	// Default 5m.
	PermissionTimeout time.Duration
	// Confine is the sandbox of every agent and of what it starts
	// (internal/sandbox): the system's directories and the operator's
	// grants; each task adds its work directory and a temporary
	// directory of its own. Nil: agents run unconfined (--sandbox off).
	Confine *sandbox.Policy
	// AgentEnv ("NAME=VALUE") is added to every agent's environment, which
	// holds nothing else of the daemon's than agent.BaseEnv: what the
	// operator named (--agent-env, --agent-env-file), an API key among it.
	AgentEnv []string
	// Sandbox is declared in ACCEPT. It must say what the worker enforces.
	// Default: what a shell agent gets — exec and network, not confined.
	Sandbox *control.SandboxProfile
	// Store holds assignments and events. Required.
	Store *lease.Store
	// StateDir holds summary files. Required.
	StateDir string
	// NoAgentCaches turns off the agents' build caches kept across
	// delegations (agentcache.go): every delegation's agent starts cold.
	NoAgentCaches bool
	// Transports offered, preferred first. Required.
	Transports []control.ExecutorTransport
	// Metrics receives refusals, agent exits, expiries and archive sizes.
	// Default: none.
	Metrics Metrics
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
	// AuthorizedDelegators are the identity keys (authorized_keys form)
	// of delegators admitted without a token: a delegator connecting over
	// TLS with one of them as its certificate's key is trusted as one that
	// shows a valid token. With Tokens, either is enough; with neither,
	// anyone who reaches the port is.
	AuthorizedDelegators []string
	// PlainHTTP accepts plain HTTP beside TLS (the reference
	// implementation's delegators speak nothing else). Without it, and
	// with an IdentityKey, a plain request is answered a refusal naming
	// the way to connect.
	PlainHTTP bool
	// RoundWait is how long a head delegation's workspace stays lent after
	// a round for the delegator's CONTINUE or CLOSE (rounds.go); past it,
	// the delegation ends as a one-round one does. Zero: no rounds, done
	// after the agent's task, as before rounds were spoken.
	RoundWait time.Duration
	// StartTimeout is how long an accepted INVITE waits for START before
	// its slot is freed. Default 2m.
	StartTimeout time.Duration
	// Retention is how long events are kept after the terminal one. Default 1h.
	Retention time.Duration
	// KeepAlive is the interval of SSE keep-alive comments. Default 15s.
	KeepAlive time.Duration
	// ProgressKept is how many progress events of a delegation are kept
	// for readers that come back (the older ones are dropped, and a
	// delegator that missed them records the gap). Default 10,000.
	ProgressKept int
	// MaxBodyBytes bounds a POST body; it must fit the largest archive
	// admission lets through (100 MB as base64). Default 256 MiB.
	MaxBodyBytes int64
	// KillGrace is the agent's time between SIGTERM and SIGKILL. Default 1s,
	// so that an expired lease is torn down within 2s of its end.
	KillGrace time.Duration
	// Name and Version appear in the agent card, the manifest and status.
	// Name default "awcp-fs" (the command's default is the host name).
	Name, Version string
	// AgentID is this agent's stable id (discovery.AgentID): the manifest
	// and mDNS name it, and an INVITE whose call chain holds it is refused
	// as circular. Empty: no loop protection, and no manifest id.
	AgentID string
	// IdentityKey is this executor's identity (discovery.IdentityKey): the
	// manifest shows it, and its TLS certificate is made of it. Nil: no
	// identity, and plain HTTP only.
	IdentityKey ed25519.PrivateKey
	// Description and Skills tell delegators (and the models choosing an
	// executor for them, spec §8.3) what this executor's agent is good at.
	// Default: a generic description and no skills.
	Description string
	Skills      []control.CardSkill
	// Logger default slog.Default().
	Logger *slog.Logger
}

func (o Options) validate() error {
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
		if m != control.AccessRO && m != control.AccessRW {
			errs = append(errs, fmt.Errorf("access mode %q is not ro or rw", m))
		}
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 5
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = time.Hour
	}
	if len(o.AccessModes) == 0 {
		o.AccessModes = []string{control.AccessRW, control.AccessRO}
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
	if o.ProgressKept <= 0 {
		o.ProgressKept = 10_000
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
		o.Sandbox = &control.SandboxProfile{CwdOnly: &no, AllowNetwork: &yes, AllowExec: &yes}
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
	opts  Options
	store *lease.Store
	log   *slog.Logger
	sched *lease.Scheduler

	mu     sync.Mutex               // guards tasks, notify and tunnelWaits
	tasks  map[string]*task         // running agents by delegation id
	notify map[string]chan struct{} // closed when a delegation gets events
	// tunnelWaits are the delegations with a tunnel request held until
	// their reverse mount waits (tunnel.go): one each.
	tunnelWaits map[string]bool

	acpAgent      json.RawMessage // the ACP agent's initialize answer (session.go); guarded by mu
	acpAgentError string          // or why it gave none; guarded by mu

	wg sync.WaitGroup // task goroutines

	probes chan struct{} // slots of the reachability probes in flight (probe.go)

	agentUsers agentUsers // the agents' uids (agentuser.go)

	// a2a is the A2A face mounted (MountA2A), which the agent card
	// declares; set before Serve.
	a2a *mountedFace
}

// mountedFace is another face of the executor, served beside AWCP's.
type mountedFace struct {
	path    string
	handler http.Handler
}

// task is one running agent.
type task struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the task goroutine has cleaned up
	// asks are the permission requests forwarded to the delegator and not
	// yet answered, by request id; guarded by Executor.mu.
	asks map[string]*ask
	// channel takes a session delegation's channels (session.go); nil
	// for a task.
	channel chan control.SessionChannel
	// rounds is a delegation's that takes rounds (rounds.go); nil else.
	rounds *roundWaiter
}

// New checks opts and builds an Executor.
func New(opts Options) (*Executor, error) {
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
		probes: make(chan struct{}, probeSlots), tunnelWaits: map[string]bool{},
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
			control.Errorf(control.CodeTaskFailed, "the executor shut down").WithHint("delegate again"))
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

func (e *Executor) transport(name string) control.ExecutorTransport {
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
		return e.end(ctx, id, lease.Expire, control.Errorf(control.CodeStartExpired, "no START arrived within %s of ACCEPT", e.opts.StartTimeout))
	}
	if !a.State.Terminal() {
		e.opts.Metrics.LeaseExpired()
	}
	return e.end(ctx, id, lease.Expire, control.Errorf(control.CodeExpired, "the lease expired at %s", control.Timestamp(a.ExpiresAt)).
		WithHint("delegate again with a longer --ttl"))
}

// end moves delegation id to a terminal state with an error event, stops its
// agent and removes its work dir. It is a no-op for a lease already ended.
func (e *Executor) end(ctx context.Context, id string, ev lease.Event, pe *control.ProtocolError) error {
	data := e.eventJSON(&control.Event{DelegationID: id, Type: control.EventError, Code: pe.Code, Message: pe.Message, Hint: pe.Hint})
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

// errMounted refuses to delete a work dir through a live mount.
var errMounted = errors.New("the work dir is still a mount point; refusing to delete through it")

func (e *Executor) removeWorkDir(ctx context.Context, a *lease.Assignment) error {
	if t := e.transport(a.Transport); t != nil {
		if _, err := t.Teardown(ctx, a.ID, a.WorkDir, nil); err != nil {
			return fmt.Errorf("teardown %s: %w", a.ID, err)
		}
	}
	// Never delete recursively through a live mount: that would delete
	// the delegator's files.
	if len(mountinfo.Under(a.WorkDir)) > 0 {
		return fmt.Errorf("work dir of %s: %w", a.ID, errMounted)
	}
	if err := os.RemoveAll(a.WorkDir); err != nil {
		return fmt.Errorf("remove work dir of %s: %w", a.ID, err)
	}
	os.Remove(e.summaryFile(a.ID))
	e.agentUsers.release(a.ID)
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
			e.end(ctx, a.ID, lease.SendError, control.Errorf(control.CodeSetupFailed, "the executor restarted during setup").
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
			e.end(ctx, a.ID, lease.SendError, control.Errorf(control.CodeTaskFailed, "the executor restarted and stopped the agent").
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
	e.forgetRounds(id)
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

func (e *Executor) eventJSON(ev *control.Event) []byte {
	ev.Timestamp = control.Timestamp(e.store.Now())
	data, err := control.Marshal(ev)
	if err != nil {
		panic(err) // Event has only marshalable fields
	}
	return data
}

// retention is how long a's events are kept after it ended.
func (e *Executor) retention(a *lease.Assignment) time.Duration {
	if a.Retention > 0 {
		return a.Retention
	}
	return e.opts.Retention
}

// openToAll reports whether the executor admits anyone who reaches its
// port: no token and no authorized delegator key.
func (e *Executor) openToAll() bool {
	return len(e.opts.Tokens) == 0 && len(e.opts.AuthorizedDelegators) == 0
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
	n, _ := e.store.ActiveAssignments()
	return n
}

func parseLastEventID(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}
