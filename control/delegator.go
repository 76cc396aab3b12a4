package control

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/awcp/awcp/lease"
)

// DelegatorOptions configures a Delegator.
type DelegatorOptions struct {
	// Store is the delegator's lease store, normally opened Shared so the
	// CLI and a daemon can both use it. Required.
	Store *lease.Store
	// Transports by wire name. Required: at least archive.
	Transports map[string]DelegatorTransport
	// Admission limits; zero fields take the spec's defaults.
	Admission AdmissionLimits
	// HTTP is the client for executors. Default http.DefaultClient.
	HTTP *http.Client
	// SpoolDir is where results of the archive transport are decoded to as
	// they arrive, before they are applied. Default: the system's
	// temporary directory.
	SpoolDir string
	// Progress, if set, receives every event of the delegations this
	// Delegator follows, as they arrive.
	Progress func(id string, ev *Event)
	// ReconnectBound is how long the executor of a delegation may stay
	// unreachable (no connection to its event stream) before the
	// delegation fails with TASK_FAILED and its access is closed. Default
	// 30s, the executor's own bound for its mounts.
	ReconnectBound time.Duration
	// Logger default slog.Default().
	Logger *slog.Logger
}

// Delegator drives delegations from the delegator's side: admission, INVITE
// → ACCEPT → START, the event stream, the result, cancel and expiry. Each
// transition is committed to the store before it takes effect.
type Delegator struct {
	opts  DelegatorOptions
	store *lease.Store
	log   *slog.Logger
	sched *lease.Scheduler

	mu        sync.Mutex                    // guards following and snapshots
	following map[string]context.CancelFunc // delegations this process drives
	// snapshots are the head dialect's results received and not yet
	// applied, by delegation id: done names the one to apply.
	snapshots map[string][]heldSnapshot
}

// heldSnapshot is a snapshot event's ZIP, kept until done names it.
type heldSnapshot struct {
	id       string // the executor's snapshotId
	file     string
	sum      string // the file's SHA-256 (hex)
	bad      error  // not base64
	checksum string // resultChecksum, if the executor sent one
}

// NewDelegator builds a Delegator.
func NewDelegator(opts DelegatorOptions) (*Delegator, error) {
	if opts.Store == nil || opts.Transports[TransportArchive] == nil {
		return nil, errors.New("delegator: store and archive transport are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReconnectBound <= 0 {
		opts.ReconnectBound = 30 * time.Second
	}
	d := &Delegator{opts: opts, store: opts.Store, log: opts.Logger,
		following: map[string]context.CancelFunc{}, snapshots: map[string][]heldSnapshot{}}
	d.sched = lease.NewScheduler(lease.Scheduler{List: d.due, Expire: d.Expire, Logger: opts.Logger})
	return d, nil
}

// ExportRequest is what `awcp-ctl export` and MCP's delegate ask for.
type ExportRequest struct {
	Dir         string        `json:"dir"`
	Peer        string        `json:"peer"`
	Prompt      string        `json:"prompt"`
	Description string        `json:"description"`
	TTL         time.Duration `json:"ttl"`       // default 1h
	Access      string        `json:"access"`    // default rw
	Transport   string        `json:"transport"` // auto, sshfs or archive; default auto
	Token       string        `json:"token,omitempty"`
	// Dialect is the AWCP dialect to speak: seed (the specification's),
	// head (the reference implementation's later wire), or auto (the
	// default): an INVITE both read, then the dialect the ACCEPT is in.
	Dialect string `json:"dialect,omitempty"`
}

// headRetention is how long a head executor is asked to keep a result: the
// delegator acknowledges it as soon as it is applied.
const headRetention = time.Hour

// NewDelegationID returns a random (v4) UUID.
func NewDelegationID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Create runs admission and records a new delegation in state created.
func (d *Delegator) Create(req ExportRequest) (*lease.Delegation, error) {
	if req.Prompt == "" {
		return nil, Errorf(CodeWorkspaceInvalid, "a prompt is required").WithHint("pass --prompt TEXT")
	}
	if req.Peer == "" {
		return nil, Errorf(CodeDeclined, "no executor given").WithHint("pass --peer URL of an `awcp-fs serve`")
	}
	if req.Access == "" {
		req.Access = AccessRW
	}
	if req.Access != AccessRW && req.Access != AccessRO {
		return nil, Errorf(CodeWorkspaceInvalid, "access must be rw or ro, not %q", req.Access)
	}
	if req.TTL <= 0 {
		req.TTL = time.Hour
	}
	if req.TTL < time.Second {
		return nil, Errorf(CodeWorkspaceInvalid, "ttl must be at least 1s")
	}
	var notes []string
	auto := false
	switch req.Transport {
	case "", "auto":
		auto = true
		if d.opts.Transports[TransportSSHFS] != nil {
			req.Transport = TransportSSHFS
		} else {
			req.Transport = TransportArchive
			notes = append(notes, "transport auto: no SSH server runs here for a live mount; using archive")
		}
	case TransportArchive:
	case TransportSSHFS:
		if d.opts.Transports[TransportSSHFS] == nil {
			return nil, Errorf(CodeDepMissing, "the sshfs transport is not available in this build").
				WithHint("use --transport archive")
		}
	default:
		return nil, Errorf(CodeWorkspaceInvalid, "unknown transport %q", req.Transport).
			WithHint("use auto, sshfs or archive")
	}
	switch req.Dialect {
	case "", "auto":
		req.Dialect = "auto"
	case DialectSeed, DialectHead:
	default:
		return nil, Errorf(CodeWorkspaceInvalid, "unknown dialect %q", req.Dialect).
			WithHint("use auto, seed or head")
	}
	phys, _, err := Admit(req.Dir, d.opts.Admission)
	if err != nil {
		return nil, err
	}
	if req.Description == "" {
		req.Description = firstLine(req.Prompt, 80)
	}
	id := NewDelegationID()
	del := &lease.Delegation{
		Lease: lease.Lease{ID: id, AccessMode: req.Access, Transport: req.Transport,
			TTLSeconds: int64((req.TTL + time.Second - 1) / time.Second), Dialect: req.Dialect},
		Peer: req.Peer, LocalDir: phys, ExportName: "awcp/" + id,
		Description: req.Description, Prompt: req.Prompt, Token: req.Token, Notes: notes,
		AutoTransport: auto,
	}
	// A provisional end, so that a handshake the executor never answers
	// expires too; ACCEPT sets the granted one.
	del.ExpiresAt = d.store.Now().Add(time.Duration(del.TTLSeconds) * time.Second)
	var busy *lease.DirBusyError
	if err := d.store.CreateDelegation(del); errors.As(err, &busy) {
		return nil, Errorf(CodeDeclined, "%s", busy.Error()).
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

func (d *Delegator) peer(del *lease.Delegation) *PeerClient {
	return &PeerClient{BaseURL: del.Peer, Token: del.Token, HTTP: d.opts.HTTP, SpoolDir: d.opts.SpoolDir}
}

func (d *Delegator) transport(del *lease.Delegation) DelegatorTransport {
	return d.opts.Transports[del.Transport]
}

func lent(del *lease.Delegation) Lent {
	return Lent{ID: del.ID, LocalDir: del.LocalDir, AccessMode: del.AccessMode, ExpiresAt: del.ExpiresAt, Peer: del.Peer,
		Dialect: del.Dialect}
}

// Run drives delegation id until it ends or ctx is done, and returns the
// final record. If ctx ends first the delegation is left as it is, for a
// later Run (by a daemon, say) to pick up.
func (d *Delegator) Run(ctx context.Context, id string) (*lease.Delegation, error) {
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

	del, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error { del.OwnerPID = os.Getpid(); return nil })
	if err != nil {
		return nil, err
	}
	var events *stream
	switch del.State {
	case lease.Created:
		if events, err = d.handshake(ctx, del); err != nil {
			events.stop()
			cur, gerr := d.store.Delegation(id)
			if gerr == nil && cur.State.Terminal() {
				// Cancelled or expired during the handshake. The executor may
				// have accepted after it was told: tell it again, so that
				// its reservation goes now and not at its START deadline.
				if cur.Failure != nil {
					d.notifyPeer(cur, NewError(id, cur.Failure.Code, cur.Failure.Message, cur.Failure.Hint))
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
		// A previous owner died mid-handshake: whether the executor holds a
		// slot is unknown, so release it and end here.
		d.notifyPeer(del, NewError(id, CodeDeclined, "the delegator restarted during the handshake", ""))
		return d.fail(ctx, id, Errorf(CodeSetupFailed, "the delegator restarted during the handshake").WithHint("delegate again"))
	default:
		events = d.startFollowing(ctx, id, nil)
	}
	events.wait()
	return d.store.Delegation(id)
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

// handshake does INVITE → ACCEPT → START, and returns the delegation's
// event stream, followed from the moment START is sent (nil if it never
// was).
func (d *Delegator) handshake(ctx context.Context, del *lease.Delegation) (*stream, error) {
	id, pc := del.ID, d.peer(del)
	inv := &Invite{
		BaseMessage:  header(TypeInvite, id),
		Task:         Task{Description: del.Description, Prompt: del.Prompt},
		Lease:        InviteLease{TTLSeconds: del.TTLSeconds, AccessMode: del.AccessMode},
		Requirements: &Requirements{Transport: del.Transport},
	}
	// In auto, the INVITE carries both dialects' members; each executor
	// reads its own and ignores the others.
	want := del.Dialect
	if want != DialectHead {
		inv.Workspace = &Workspace{ExportName: del.ExportName}
	}
	if want != DialectSeed {
		ms := int64(headRetention / time.Millisecond)
		inv.RetentionMs = &ms
		inv.Environment = &Environment{Resources: []Resource{{Name: ResourceWorkspace, Type: "fs", Mode: del.AccessMode}}}
	}
	if _, err := d.store.FireDelegation(id, lease.SendInvite, "INVITE sent", nil); err != nil {
		return nil, err
	}
	acc, err := pc.Invite(ctx, inv)
	var pe *ProtocolError
	if errors.As(err, &pe) && pe.Code == CodeDepMissing && del.AutoTransport && del.Transport == TransportSSHFS {
		// The executor cannot mount: fall back to archive, and say so.
		note := fmt.Sprintf("transport auto: the executor cannot mount (%s); fell back to archive", pe.Message)
		_, err = d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
			del.Transport = TransportArchive
			del.Notes = append(del.Notes, note)
			return nil
		})
		if err != nil {
			return nil, err
		}
		inv.Requirements.Transport = TransportArchive
		acc, err = pc.Invite(ctx, inv)
	}
	if err != nil {
		return nil, err
	}
	// A head executor says how long it keeps the result; a seed one
	// has no such member.
	dialect := DialectSeed
	if acc.RetentionMs != nil || want == DialectHead {
		dialect = DialectHead
	}
	d.log.Info("executor accepted", "delegation", id, "dialect", dialect)
	now := d.store.Now()
	del, err = d.store.FireDelegation(id, lease.ReceiveAccept, "ACCEPT received", func(del *lease.Delegation) error {
		if dialect == DialectHead && want != DialectHead {
			del.Notes = append(del.Notes, "the executor speaks the head dialect (the reference implementation's later wire): spoke it")
		}
		del.Dialect = dialect
		del.ExecutorWorkDir = acc.ExecutorWorkDir.Path
		if c := acc.ExecutorConstraints; c != nil {
			if c.AcceptedAccessMode != "" && c.AcceptedAccessMode != del.AccessMode {
				del.Notes = append(del.Notes, fmt.Sprintf("the executor downgraded access from %s to %s", del.AccessMode, c.AcceptedAccessMode))
				del.AccessMode = c.AcceptedAccessMode
			}
			if c.MaxTTLSeconds > 0 && c.MaxTTLSeconds < del.TTLSeconds {
				del.Notes = append(del.Notes, fmt.Sprintf("the executor capped the lease at %ds", c.MaxTTLSeconds))
				del.TTLSeconds = c.MaxTTLSeconds
			}
		}
		del.ExpiresAt = now.Add(time.Duration(del.TTLSeconds) * time.Second)
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.sched.Kick()

	tr := d.transport(del)
	if tr == nil {
		return nil, Errorf(CodeDepMissing, "the %s transport is not available in this process", del.Transport)
	}
	info, err := tr.Prepare(ctx, lent(del))
	if err != nil {
		return nil, err
	}
	st := &Start{
		BaseMessage: header(TypeStart, id),
		Lease:       StartLease{ExpiresAt: Timestamp(del.ExpiresAt), AccessMode: del.AccessMode},
		WorkDir:     *info,
		Dialect:     del.Dialect,
	}
	if info.WorkspaceFile != "" {
		// Sent once: the packed workspace is of no use after START.
		defer os.Remove(info.WorkspaceFile)
	}
	if _, err := d.store.FireDelegation(id, lease.SendStart, "START sent", nil); err != nil {
		return nil, err
	}
	started := make(chan struct{})
	events := d.startFollowing(ctx, id, started)
	err = pc.Start(ctx, st)
	close(started)
	return events, err
}

// fail ends delegation id in error with err's code, tells the executor if
// it may hold anything, and cleans up.
func (d *Delegator) fail(ctx context.Context, id string, err error) (*lease.Delegation, error) {
	pe := AsProtocolError(err, CodeSetupFailed)
	ev := lease.ReceiveError
	if errors.Is(err, context.Canceled) {
		ev = lease.SendError
	}
	del, ferr := d.store.FireDelegation(id, ev, pe.Code+": "+pe.Message, func(del *lease.Delegation) error {
		del.Failure = &lease.Failure{Code: pe.Code, Message: pe.Message, Hint: pe.Hint}
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

// notifyPeer sends an ERROR to the executor, best effort and bounded.
func (d *Delegator) notifyPeer(del *lease.Delegation, m *Error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.peer(del).SendError(ctx, m); err != nil {
		d.log.Debug("tell executor", "delegation", del.ID, "err", err)
	}
}

func (d *Delegator) cleanup(ctx context.Context, del *lease.Delegation) {
	if t := d.transport(del); t != nil {
		if err := t.Cleanup(context.WithoutCancel(ctx), lent(del)); err != nil {
			d.log.Warn("transport clean-up", "delegation", del.ID, "err", err)
		}
	}
}

// follow reads the event stream, reconnecting with Last-Event-ID, until the
// delegation is terminal or ctx is done. The last event id is kept here and
// stored with each transition; progress lines are not written to the store
// one by one (after a crash of this process they may be shown again).
func (d *Delegator) follow(ctx context.Context, id string, started <-chan struct{}) {
	backoff := 100 * time.Millisecond
	var last uint64
	var awaySince time.Time // since when the executor cannot be reached; zero while it can
	for {
		del, err := d.store.Delegation(id)
		if err != nil || del.State.Terminal() {
			return
		}
		last = max(last, del.LastEventID)
		err = d.peer(del).Events(ctx, id, last, func(seq uint64, ev *Event) error {
			backoff = 100 * time.Millisecond
			if seq != 0 && seq <= last {
				return nil // seen before a reconnect
			}
			last = seq
			return d.handleEvent(ctx, id, seq, ev)
		})
		if ctx.Err() != nil {
			return
		}
		var pe *ProtocolError
		var away *unreachableError
		switch {
		case !answered(started) && (errors.As(err, new(*streamRefused)) || errors.As(err, &away)):
			// START is out: the executor may not know the task yet.
			backoff = 100 * time.Millisecond
		case errors.As(err, &pe) && pe.Code != CodeDeclined:
			d.fail(ctx, id, pe)
			return
		case errors.As(err, &away):
			if awaySince.IsZero() {
				awaySince = time.Now()
				d.log.Warn("executor unreachable; retrying", "delegation", id, "err", away.err)
			}
			if time.Since(awaySince) >= d.opts.ReconnectBound {
				d.fail(ctx, id, Errorf(CodeTaskFailed, "the executor has been unreachable since %s (%v)",
					awaySince.UTC().Format(time.RFC3339), away.err).
					WithHint("check that awcp-fs still runs on the executor; the delegation's access is closed"))
				return
			}
		case err != nil && !errors.Is(err, errStreamEnded):
			awaySince = time.Time{}
			d.log.Debug("event stream broke off; reconnecting", "delegation", id, "err", err)
		default:
			awaySince = time.Time{}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
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

// handleEvent applies one new event. Its id is stored in the same
// transaction as the transition it causes, so a restarted delegator never
// applies an event twice.
func (d *Delegator) handleEvent(ctx context.Context, id string, seq uint64, ev *Event) error {
	if d.opts.Progress != nil {
		d.opts.Progress(id, ev)
	}
	if ev.Type == EventStatus && ev.Status == StatusProgress {
		return nil // nothing to record
	}
	seen := func(del *lease.Delegation) error { del.LastEventID = seq; return nil }
	del, err := d.store.Delegation(id)
	if err != nil {
		return err
	}
	if seq != 0 && seq <= del.LastEventID {
		return nil
	}
	switch ev.Type {
	case EventStatus:
		if del.State == lease.Started {
			_, err = d.store.FireDelegation(id, lease.SetupComplete, "executor running", seen)
		} else {
			_, err = d.store.UpdateDelegation(id, seen)
		}
	case EventSnapshot:
		d.holdSnapshot(id, ev)
		_, err = d.store.UpdateDelegation(id, seen)
	case EventDone:
		if del.State.Terminal() {
			return nil
		}
		if del.Dialect == DialectHead && ev.ResultFile == "" {
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
		rep, ferr := tr.Finish(ctx, lent(del), ev)
		if ferr != nil {
			d.log.Error("apply result", "delegation", id, "err", ferr)
			failure := &lease.Failure{Code: CodeTaskFailed, Message: "the result could not be applied: " + ferr.Error(),
				Hint: "nothing was lost: the executor's result is kept in the file named above"}
			var pe *ProtocolError
			if errors.As(ferr, &pe) { // a refusal that says its own why
				failure = &lease.Failure{Code: pe.Code, Message: pe.Message, Hint: pe.Hint}
			}
			_, err = d.store.FireDelegation(id, lease.SendError, "result not applied", func(del *lease.Delegation) error {
				del.LastEventID = seq
				del.Failure = failure
				return nil
			})
		} else {
			_, err = d.store.FireDelegation(id, lease.ReceiveDone, "done received", func(del *lease.Delegation) error {
				del.LastEventID = seq
				del.Summary, del.Highlights = ev.Summary, ev.Highlights
				for _, p := range rep.Created {
					del.Changes = append(del.Changes, "+ "+p)
				}
				for _, p := range rep.Modified {
					del.Changes = append(del.Changes, "~ "+p)
				}
				for _, p := range rep.Deleted {
					del.Changes = append(del.Changes, "- "+p)
				}
				del.Conflicts = rep.Conflicts
				if len(rep.Ignored) > 0 {
					del.Notes = append(del.Notes, fmt.Sprintf("the executor's snapshot also held %v, outside the lent directory: not applied", rep.Ignored))
				}
				return nil
			})
		}
	case EventPermission:
		_, err = d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
			del.LastEventID = seq
			recordPermission(del, ev, d.store.Now())
			return nil
		})
	case EventError:
		lev := lease.ReceiveError
		switch {
		case ev.Code == CodeCancelled:
			lev = lease.Cancel
		case ev.Code == CodeExpired && lease.CanFire(del.State, lease.Expire):
			lev = lease.Expire
		}
		_, err = d.store.FireDelegation(id, lev, ev.Code+": "+ev.Message, func(del *lease.Delegation) error {
			del.LastEventID = seq
			del.Failure = &lease.Failure{Code: ev.Code, Message: ev.Message, Hint: ev.Hint}
			return nil
		})
	}
	var te *lease.TransitionError
	if errors.As(err, &te) {
		err = nil // ended meanwhile; the first ending stands
	}
	if ev.Terminal() {
		if cur, gerr := d.store.Delegation(id); gerr == nil {
			d.cleanup(ctx, cur)
			if cur.Dialect == DialectHead && cur.State.Terminal() {
				d.ack(cur)
			}
		}
		d.dropSnapshots(id)
	}
	return err
}

// holdSnapshot keeps a snapshot event's ZIP (which the stream reader
// would remove) until done says which snapshot is the result.
func (d *Delegator) holdSnapshot(id string, ev *Event) {
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
	d.mu.Lock()
	defer d.mu.Unlock()
	d.snapshots[id] = append(d.snapshots[id], heldSnapshot{id: ev.SnapshotID, file: name, sum: ev.resultSum,
		bad: ev.resultErr, checksum: ev.ResultChecksum})
}

// dropSnapshots removes what holdSnapshot kept for id.
func (d *Delegator) dropSnapshots(id string) {
	d.mu.Lock()
	held := d.snapshots[id]
	delete(d.snapshots, id)
	d.mu.Unlock()
	for _, h := range held {
		os.Remove(h.file)
	}
}

// headResult finds the result a head done stands for and puts it in ev
// (as resultBase64 would be): the snapshot done recommends (or the last
// one) as it came in its event, else — the stream that carried it was
// lost, and a head executor replays only done — as GET /result gives it.
// release removes what was fetched.
func (d *Delegator) headResult(ctx context.Context, del *lease.Delegation, ev *Event) (release func()) {
	want := ev.RecommendedSnapshotID
	if want == "" && len(ev.SnapshotIDs) > 0 {
		want = ev.SnapshotIDs[len(ev.SnapshotIDs)-1]
	}
	d.mu.Lock()
	held := d.snapshots[del.ID]
	d.mu.Unlock()
	for i := len(held) - 1; i >= 0; i-- {
		if h := held[i]; want == "" || h.id == want {
			ev.ResultFile, ev.resultSum, ev.resultErr, ev.ResultChecksum = h.file, h.sum, h.bad, h.checksum
			return func() {}
		}
	}
	if del.Transport != TransportArchive || del.AccessMode != AccessRW {
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
	ev.ResultFile, ev.resultSum, ev.resultErr, ev.ResultChecksum = res.ResultFile, res.resultSum, res.resultErr, res.ResultChecksum
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

// Expire ends a delegation whose lease ran out: the transition first, then
// the executor is told and this process stops following it.
func (d *Delegator) Expire(ctx context.Context, id string) error {
	return d.end(id, lease.Expire, Errorf(CodeExpired, "the lease expired").WithHint("delegate again with a longer --ttl"))
}

// Cancel ends a delegation on the user's request.
func (d *Delegator) Cancel(ctx context.Context, id string) (*lease.Delegation, error) {
	if err := d.end(id, lease.Cancel, Errorf(CodeCancelled, "cancelled by the delegator")); err != nil {
		return nil, err
	}
	return d.store.Delegation(id)
}

func (d *Delegator) end(id string, ev lease.Event, pe *ProtocolError) error {
	del, err := d.store.FireDelegation(id, ev, pe.Code+": "+pe.Message, func(del *lease.Delegation) error {
		del.Failure = &lease.Failure{Code: pe.Code, Message: pe.Message, Hint: pe.Hint}
		return nil
	})
	if err != nil {
		return err
	}
	d.log.Info("delegation ended", "delegation", id, "state", del.State)
	if len(del.Transitions) > 1 { // it was invited: the executor may hold it
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if ev == lease.Cancel {
			err = d.peer(del).Cancel(ctx, id)
		} else {
			err = d.peer(del).SendError(ctx, pe.ToMessage(id))
		}
		cancel()
		if err != nil {
			d.log.Debug("tell executor", "delegation", id, "err", err)
		}
	}
	d.mu.Lock()
	if stop, ok := d.following[id]; ok {
		stop()
	}
	d.mu.Unlock()
	d.cleanup(context.Background(), del)
	return nil
}

// ExpireOverdue expires the overdue delegations no live process follows.
// Commands that open the store call it, so a lease that ran out while
// nothing ran ends as soon as anything looks at it.
func (d *Delegator) ExpireOverdue(ctx context.Context) {
	ds, err := d.store.Delegations()
	if err != nil {
		return
	}
	now := d.store.Now()
	for _, del := range ds {
		if !del.ExpiresAt.IsZero() && !now.Before(del.ExpiresAt) && lease.CanFire(del.State, lease.Expire) && !processAlive(del.OwnerPID) {
			if err := d.Expire(ctx, del.ID); err != nil {
				d.log.Debug("expire overdue", "delegation", del.ID, "err", err)
			}
		}
	}
}

// Orphans lists live delegations whose owning process is gone: a daemon
// adopts them with Run.
func (d *Delegator) Orphans() ([]string, error) {
	ds, err := d.store.Delegations()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, del := range ds {
		if !del.State.Terminal() && !processAlive(del.OwnerPID) {
			out = append(out, del.ID)
		}
	}
	return out, nil
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return true
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// recordPermission keeps a permission event in the delegation's record: a
// new request, or the decision on one already known.
func recordPermission(del *lease.Delegation, ev *Event, now time.Time) {
	p := lease.Permission{RequestID: ev.RequestID, Title: ev.Message, Options: ev.Options, Outcome: ev.Outcome,
		OptionID: ev.OptionID, DecidedBy: ev.DecidedBy, At: now}
	for i := range del.Permissions {
		if del.Permissions[i].RequestID == p.RequestID {
			del.Permissions[i] = p
			return
		}
	}
	del.Permissions = append(del.Permissions, p)
}

// Permit answers a pending permission request of delegation id, as the
// delegator's user.
func (d *Delegator) Permit(ctx context.Context, id, requestID, optionID string) error {
	del, err := d.store.Delegation(id)
	if err != nil {
		return err
	}
	if del.State.Terminal() {
		return Errorf(CodeDeclined, "delegation %s already ended (%s)", id, del.State)
	}
	return d.peer(del).Permit(ctx, id, requestID, optionID)
}
