// Package delegator is the delegator's role (spec §6): admission of a
// directory, the lease, the INVITE → ACCEPT → START handshake with an
// executor, following its events, applying an archive result, and lending
// the directory over the embedded SSH server (package sshd) for the live
// mount. It does not link the FUSE mount: that is the executor's.
package delegator

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// Options configures a Delegator.
type Options struct {
	// Store is the delegator's lease store, normally opened Shared so the
	// CLI and a daemon can both use it. Required.
	Store *lease.Store
	// Transports by wire name. Required: at least archive.
	Transports map[string]control.DelegatorTransport
	// Replayers, by transport name, record a staged result's own commits
	// on a new branch for `apply --branch` (the git transport's): no
	// transport need run for that. Default: none (the result is applied
	// to the branch as one commit).
	Replayers map[string]BranchReplayer
	// A2A speaks to A2A agents (--peer a2a:URL); nil: this process
	// delegates to AWCP executors only.
	A2A A2APeer
	// Admission limits; zero fields take the spec's defaults.
	Admission AdmissionLimits
	// HTTP is the client for executors. Default http.DefaultClient.
	HTTP *http.Client
	// SpoolDir is where results of the archive transport are decoded to as
	// they arrive, before they are applied. Default: the system's
	// temporary directory.
	SpoolDir string
	// StagedDir is where staged results are kept for review, a directory
	// per delegation (staged.go). Empty: no snapshot mode but auto.
	StagedDir string
	// StagedRetention is how long a staged result waits for a decision.
	// Default DefaultStagedRetention.
	StagedRetention time.Duration
	// MaxResultBytes bounds an executor's result as base64; one over it
	// fails the delegation with TASK_FAILED, nothing applied. Default
	// DefaultMaxResultBytes.
	MaxResultBytes int64
	// Progress, if set, receives every event of the delegations this
	// Delegator follows, as they arrive.
	Progress func(id string, ev *control.Event)
	// Transfer, if set, is told how the archives of the delegations this
	// process drives move (PeerClient.Transfer), by delegation id.
	Transfer func(id, what string, done, total int64)
	// ReconnectBound is how long the executor of a delegation may stay
	// unreachable (no connection to its event stream) before the
	// delegation fails with TASK_FAILED and its access is closed. Default
	// 30s, the executor's own bound for its mounts.
	ReconnectBound time.Duration
	// IdleAfter is how long a running executor may send no event before
	// its channel shows idle. Default DefaultIdleAfter.
	IdleAfter time.Duration
	// AgentID is this agent's id (discovery.AgentID): the INVITE's call
	// chain ends with it. Empty: the chain is handed on as it came.
	AgentID string
	// Identity is this delegator's identity key (discovery.IdentityKey):
	// its TLS certificate toward executors, which may admit it by key.
	// Nil: none is shown.
	Identity ed25519.PrivateKey
	// Daemon says this process is the daemon (`awcp-ctl serve`): the
	// delegations it follows wait for it should it crash, where those of
	// a command that died are ended by the next command (orphans.go).
	Daemon bool
	// MCP says this process is an MCP server: the delegations it follows
	// that a daemon could follow wait SessionTakeOverGrace, once it is
	// gone, for its restart to recover them (delegate_recover).
	MCP bool
	// Metrics receives admission's refusals and lease expiries. Default:
	// none.
	Metrics Metrics
	// Logger default slog.Default().
	Logger *slog.Logger
}

// Delegator drives delegations from the delegator's side: admission, INVITE
// → ACCEPT → START, the event stream, the result, cancel and expiry. Each
// transition is committed to the store before it takes effect.
type Delegator struct {
	opts  Options
	store *lease.Store
	log   *slog.Logger
	sched *lease.Scheduler

	mu        sync.Mutex                    // guards following, snapshots, reach, progress and cleaning
	following map[string]context.CancelFunc // delegations this process drives
	cleaning  map[string]chan struct{}      // clean-ups under way, closed at their end
	// snapshots are the head dialect's results received and not yet
	// applied, one per delegation id (holdSnapshot).
	snapshots map[string]heldSnapshot
	// reach is what the reachability probe found of each executor, by
	// URL, for a while (reachBack).
	reach map[string]reachResult
	// progress is each delegation's progress lines not yet stored
	// (progress.go).
	progress map[string]*heldLines
}

// New builds a Delegator.
func New(opts Options) (*Delegator, error) {
	if opts.Store == nil || opts.Transports[control.TransportArchive] == nil {
		return nil, errors.New("delegator: store and archive transport are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = noMetrics{}
	}
	if opts.ReconnectBound <= 0 {
		opts.ReconnectBound = 30 * time.Second
	}
	if opts.IdleAfter <= 0 {
		opts.IdleAfter = DefaultIdleAfter
	}
	d := &Delegator{opts: opts, store: opts.Store, log: opts.Logger,
		following: map[string]context.CancelFunc{}, cleaning: map[string]chan struct{}{}, snapshots: map[string]heldSnapshot{}, reach: map[string]reachResult{},
		progress: map[string]*heldLines{}}
	d.sched = lease.NewScheduler(lease.Scheduler{List: d.due, Expire: d.Expire, Logger: opts.Logger})
	return d, nil
}

// headRetention is how long a head executor is asked to keep a result: the
// delegator acknowledges it as soon as it is applied.
const headRetention = time.Hour

// Create runs admission and records a new delegation in state created.
func (d *Delegator) Create(req ExportRequest) (*lease.Delegation, error) {
	del, err := d.create(req)
	var pe *control.ProtocolError
	if errors.As(err, &pe) {
		d.opts.Metrics.Refused(pe.Code)
	}
	return del, err
}

func (d *Delegator) create(req ExportRequest) (*lease.Delegation, error) {
	if req.Prompt == "" {
		return nil, control.Errorf(control.CodeUsage, "a prompt is required").WithHint("pass --prompt TEXT")
	}
	if req.Peer == "" {
		return nil, control.Errorf(control.CodeUsage, "no executor given").WithHint("pass --peer URL of an `awcp-fs serve`")
	}
	if req.Access == "" {
		req.Access = control.AccessRW
	}
	if req.Access != control.AccessRW && req.Access != control.AccessRO {
		return nil, control.Errorf(control.CodeUsage, "access must be rw or ro, not %q", req.Access)
	}
	if req.TTL <= 0 {
		req.TTL = time.Hour
	}
	if req.TTL < time.Second {
		return nil, control.Errorf(control.CodeUsage, "ttl must be at least 1s")
	}
	var notes []string
	auto, connect := false, ""
	protocol := ""
	if strings.HasPrefix(req.Peer, PeerPrefixA2A) {
		u, err := a2aPeerURL(req.Peer, req.PlainHTTP)
		if err != nil {
			return nil, err
		}
		switch {
		case req.Session || req.Driven:
			return nil, control.Errorf(control.CodeUsage, "an A2A agent takes tasks, not ACP sessions").WithHint("delegate a task: --prompt TEXT")
		case req.Transport != "" && req.Transport != "auto" && req.Transport != control.TransportArchive:
			return nil, control.Errorf(control.CodeUsage, "an A2A agent takes the workspace as a ZIP in its message: --transport %s cannot be", req.Transport).
				WithHint("leave --transport out (auto), or say archive")
		}
		req.Peer, req.Transport, protocol = u, control.TransportArchive, lease.PeerA2A
		notes = append(notes, "an A2A agent at "+u+": the task and the workspace (a ZIP) go in one message; its artifacts come back through the same review")
	}
	if strings.HasPrefix(req.Peer, "http://") && !req.PlainHTTP && req.PeerKey == "" { // with a key it is TLS (PeerClient.base)
		return nil, plainHTTPRefused(req.Peer) // before anything is recorded
	}
	// live and live-reverse are what the transport is: a live mount. The
	// wire name, sshfs, is the spec's (no sshfs program is used).
	switch req.Transport {
	case TransportLive:
		req.Transport = control.TransportSSHFS
	case TransportLiveReverse:
		req.Transport = TransportSSHFSReverse
	}
	switch req.Transport {
	case "", "auto":
		auto = true
		if d.opts.Transports[control.TransportSSHFS] != nil {
			req.Transport = control.TransportSSHFS
		} else {
			req.Transport = control.TransportArchive
			notes = append(notes, "transport auto: no SSH server runs here for a live mount; using archive")
		}
	case control.TransportArchive:
	case control.TransportGit:
		if d.opts.Transports[control.TransportGit] == nil {
			return nil, control.Errorf(control.CodeDepMissing, "the git transport needs this delegator's SSH server, which does not run here").
				WithHint("run it from awcp-ctl export or the awcp-ctl serve daemon, or use --transport archive")
		}
	case control.TransportSSHFS, TransportSSHFSReverse:
		if d.opts.Transports[control.TransportSSHFS] == nil {
			return nil, control.Errorf(control.CodeDepMissing, "the sshfs transport is not available in this build").
				WithHint("use --transport archive")
		}
		if req.Transport == TransportSSHFSReverse {
			req.Transport, connect = control.TransportSSHFS, control.ConnectReverse
		}
	default:
		return nil, control.Errorf(control.CodeWorkspaceInvalid, "unknown transport %q", req.Transport).
			WithHint("use auto, live (sshfs), live-reverse (sshfs-reverse), archive or git")
	}
	switch req.Dialect {
	case "", "auto":
		req.Dialect = "auto"
	case control.DialectSeed, control.DialectHead:
	default:
		return nil, control.Errorf(control.CodeWorkspaceInvalid, "unknown dialect %q", req.Dialect).
			WithHint("use auto, seed or head")
	}
	chain, err := req.callChain(d.opts.AgentID)
	if err != nil {
		return nil, err
	}
	policy, err := req.policy()
	if err != nil {
		return nil, err
	}
	if policy.WriteScope != "" {
		// The agent is told its scope: what it writes elsewhere is
		// refused, and better not tried.
		req.Prompt += "\n\n(Change only files under " + policy.WriteScope + "/: the rest of the directory is read-only to you.)"
	}
	mode, err := d.snapshotMode(req)
	if err != nil {
		return nil, err
	}
	phys, stats, err := Admit(req.Dir, req.limits(d.opts.Admission, req.Transport), policy.Hide)
	if err != nil {
		return nil, err
	}
	if note := hiddenNote(stats); note != "" {
		notes = append(notes, note)
	}
	if req.GitHistory != 0 {
		if req.Transport != control.TransportGit {
			return nil, control.Errorf(control.CodeWorkspaceInvalid, "--git-history goes with --transport git")
		}
		if err := admitLentHistory(context.Background(), phys, req.GitHistory, policy.Hide); err != nil {
			return nil, err
		}
	}
	// The archive carries no .git; a live mount lends it, objects and all.
	if req.Transport == control.TransportSSHFS && !req.LendHiddenHistory {
		note, err := admitGitHistory(context.Background(), phys, stats.Repos, policy.Hide)
		if err != nil {
			return nil, err
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	if req.PeerChoice != "" {
		notes = append(notes, fmt.Sprintf("executor %s (%s) at %s, %s", req.PeerName, req.PeerAgentID, req.Peer, req.PeerChoice))
	}
	if req.PeerKey == "" && strings.HasPrefix(req.Peer, "http://") && req.PlainHTTP {
		// Said on each use: the user asked for it, and it is what it is.
		notes = append(notes, "plain HTTP to "+req.Peer+" (--plain-http): the token, the workspace and the session travel in clear")
		d.log.Warn("plain HTTP to the executor (--plain-http): the token, the workspace and the session travel in clear", "peer", req.Peer)
	}
	if req.Description == "" {
		req.Description = firstLine(req.Prompt, 80)
	}
	id := control.NewDelegationID()
	del := &lease.Delegation{
		Lease: lease.Lease{ID: id, AccessMode: req.Access, Transport: req.Transport,
			TTLSeconds: int64((req.TTL + time.Second - 1) / time.Second), Dialect: req.Dialect},
		Peer: req.Peer, LocalDir: phys, ExportName: "awcp/" + id,
		Description: req.Description, Prompt: req.Prompt, Token: req.Token, Notes: notes,
		AutoTransport: auto, Connect: connect, Policy: policy,
		CallChain: chain, PeerAgentID: req.PeerAgentID, PeerName: req.PeerName, PeerKey: req.PeerKey, PlainHTTP: req.PlainHTTP, PeerFallbacks: req.PeerFallbacks,
		Limits:       [3]int64{req.Limits.MaxTotalBytes, req.Limits.MaxFileCount, req.Limits.MaxFileBytes},
		SnapshotMode: mode, Group: req.Group, GitHistory: req.GitHistory, PeerProtocol: protocol,
	}
	if mode != lease.SnapshotAuto {
		// Discarded too: a live mount's changes must go somewhere that
		// is not the directory; the area is removed at the end.
		del.Staged = &lease.Staged{Dir: d.stagedDir(id), State: lease.StagedPending}
	}
	if req.Session || req.Driven {
		sr := control.NewSessionRequest()
		del.Session, del.SessionKey = sr.Protocol, sr.Key
	}
	if req.Driven {
		del.SessionDriven = true
		del.QueueTurn(req.Prompt, "", d.store.Now())
	}
	d.own(del) // from now: a Run of this process follows it
	// A provisional end, so that a handshake the executor never answers
	// expires too; ACCEPT sets the granted one.
	del.ExpiresAt = d.store.Now().Add(control.Seconds(del.TTLSeconds))
	var busy *lease.DirBusyError
	if err := d.store.CreateDelegation(del); errors.As(err, &busy) {
		return nil, control.Errorf(control.CodeDeclined, "%s", busy.Error()).
			WithHint(fmt.Sprintf("only one rw delegation per directory at a time: wait for it, or `awcp-ctl cancel %s`", busy.ID))
	} else if err != nil {
		return nil, err
	}
	return del, nil
}

func firstLine(s string, n int) string {
	for i, r := range s {
		if r == '\n' || i >= n {
			return s[:i]
		}
	}
	return s
}

// RunScheduler expires this store's leases until ctx is done.
func (d *Delegator) RunScheduler(ctx context.Context) { d.sched.Run(ctx) }

func (d *Delegator) due() ([]lease.Due, error) {
	ds, err := d.store.Delegations()
	out := make([]lease.Due, 0, len(ds))
	for _, del := range ds {
		out = append(out, lease.Due{ID: del.ID, State: del.State, ExpiresAt: del.ExpiresAt})
	}
	return out, err
}

func (d *Delegator) transport(del *lease.Delegation) control.DelegatorTransport {
	return d.opts.Transports[del.Transport]
}

// EventNote is the type of the events Options.Progress gets for what
// this delegator itself has to say of a delegation as it happens (a
// transport chosen or fallen back from); never an executor's.
const EventNote = "note"

// Run drives delegation id until it ends or ctx is done, and returns the
// final record. If ctx ends first the delegation is left as it is, for a
// later Run (by a daemon, say) to pick up.
func (d *Delegator) Run(ctx context.Context, id string) (*lease.Delegation, error) {
	return d.run(ctx, id, func() {})
}

// TakeOver is Run for a delegation this process takes over (its own,
// from before a restart, or a dead command's): setUp is called once what
// the transport keeps in memory — the live mount's grant — is set up
// again, or once Run knows there is nothing to set up.
func (d *Delegator) TakeOver(ctx context.Context, id string, setUp func()) (*lease.Delegation, error) {
	return d.run(ctx, id, sync.OnceFunc(setUp))
}

func (d *Delegator) run(ctx context.Context, id string, setUp func()) (*lease.Delegation, error) {
	defer setUp()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.mu.Lock()
	if _, dup := d.following[id]; dup {
		d.mu.Unlock()
		return nil, fmt.Errorf("delegation %s is already being followed", id)
	}
	d.following[id] = cancel
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.following, id)
		d.mu.Unlock()
	}()

	del, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error { d.own(del); return nil })
	if err != nil {
		return nil, err
	}
	var events *stream
	switch del.State {
	case lease.Created:
		setUp() // nothing was lent yet
		handshake := d.handshake
		if del.PeerProtocol == lease.PeerA2A {
			handshake = d.handshakeA2A
		}
		if events, err = handshake(ctx, del); err != nil {
			events.stop()
			cur, gerr := d.store.Delegation(id)
			if gerr == nil && cur.State.Terminal() {
				// Cancelled or expired during the handshake. The executor may
				// have accepted after it was told: tell it again, so that
				// its reservation goes now and not at its START deadline.
				if cur.Failure != nil {
					d.notifyPeer(cur, control.NewError(id, cur.Failure.Code, cur.Failure.Message, cur.Failure.Hint))
				}
				d.cleanup(ctx, cur)
				return cur, nil
			}
			if ctx.Err() != nil {
				return d.store.Delegation(id)
			}
			return d.fail(ctx, id, err)
		}
	case lease.Invited, lease.Accepted:
		setUp()
		// A previous owner died mid-handshake: whether the executor holds a
		// slot is unknown, so release it and end here.
		d.notifyPeer(del, control.NewError(id, control.CodeDeclined, "the delegator restarted during the handshake", ""))
		return d.fail(ctx, id, control.Errorf(control.CodeSetupFailed, "the delegator restarted during the handshake").WithHint("delegate again"))
	default:
		// Started or running, and followed anew (by a restarted daemon,
		// say): whatever the transport keeps in memory is set up again.
		if r, ok := d.transport(del).(resumer); ok && !del.State.Terminal() {
			r.Resume(ctx, lent(del))
		}
		setUp()
		events = d.startFollowing(ctx, id, nil)
	}
	events.wait()
	return d.store.Delegation(id)
}

// resumer is a transport that keeps something of a running delegation in
// this process's memory, to set up again when the delegation is followed
// anew (the live mount's grant, lendlive).
type resumer interface {
	Resume(ctx context.Context, d control.Lent)
}

// A delegation's event stream is opened while START is still out: a task
// that ends before START's answer arrives would otherwise have its events
// — its result — kept by the executor only for a subscriber that is
// already there (the seed's executor answers a later one NOT_FOUND).
// Until START is answered, the stream's failures are retried, not fatal.

// startFollowing follows id's events in a goroutine; started is closed
// once START is answered (nil: it was).
func (d *Delegator) startFollowing(ctx context.Context, id string, started <-chan struct{}) *stream {
	ctx, cancel := context.WithCancel(ctx)
	st := &stream{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(st.done)
		d.follow(ctx, id, started)
	}()
	return st
}

// stream is an event stream followed in a goroutine of its own.
type stream struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// wait waits for the stream to end by itself (the delegation ended, or
// the context that started it is done).
func (s *stream) wait() {
	<-s.done
	s.cancel()
}

// stop ends the stream, if there is one, and waits for it.
func (s *stream) stop() {
	if s != nil {
		s.cancel()
		<-s.done
	}
}

// fail ends delegation id in error with err's code, tells the executor if
// it may hold anything, and cleans up.
func (d *Delegator) fail(ctx context.Context, id string, err error) (*lease.Delegation, error) {
	pe := control.AsProtocolError(err, control.CodeSetupFailed)
	ev := lease.ReceiveError
	if errors.Is(err, context.Canceled) {
		ev = lease.SendError
	}
	del, ferr := d.store.FireDelegation(id, ev, pe.Code+": "+pe.Message, func(del *lease.Delegation) error {
		del.Failure = failureOf(pe)
		return nil
	})
	if ferr != nil {
		// Ended meanwhile (cancel, expiry): that outcome stands.
		return d.store.Delegation(id)
	}
	// Whatever the executor answered, an ERROR lets it free the slot.
	d.notifyPeer(del, pe.ToMessage(id))
	d.cleanup(ctx, del)
	return del, nil
}

// Permit answers a pending permission request of delegation id, as the
// delegator's user; answerer says who answered ("awcp-ctl permit by
// USER", "MCP client NAME"), for the record.
func (d *Delegator) Permit(ctx context.Context, id, requestID, optionID, answerer string) error {
	del, err := d.store.Delegation(id)
	if err != nil {
		return err
	}
	if del.State.Terminal() {
		return control.Errorf(control.CodeUsage, "delegation %s already ended (%s)", id, del.State)
	}
	// A driven session's requests wait in the record for their driver.
	if here, err := d.decideHere(id, requestID, optionID, answerer); here || err != nil {
		return err
	}
	permit := d.peer(del).Permit
	if del.PeerProtocol == lease.PeerA2A && d.opts.A2A != nil {
		permit = func(ctx context.Context, _, requestID, optionID string) error {
			return d.opts.A2A.Permit(ctx, del, requestID, optionID)
		}
	}
	if err := permit(ctx, id, requestID, optionID); err != nil {
		return err
	}
	d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		for i := range del.Permissions {
			if del.Permissions[i].RequestID == requestID {
				del.Permissions[i].Answerer = answerer
				return nil
			}
		}
		return errUnchanged
	})
	return nil
}
