// Package mcpserver is awcp's MCP tool layer (spec §8.2): with it any MCP
// client — a desktop assistant, a coding agent, an IDE — lends a directory
// to an executor with one tool call.
//
// # Tools
//
//   - delegate: admission, then the delegation runs; the call waits for the
//     end (up to SyncWait) or, with background, returns the id at once.
//   - delegate_output: how a delegation stands or ended, optionally waiting.
//   - delegate_cancel: one delegation, or all live ones.
//   - delegate_status: the delegations in the store.
//   - delegate_permission: answers a permission request of the executor's
//     agent (an executor run with --permission forward).
//   - delegate_answer, delegate_close_session: a session's (delegate with
//     session: true) next prompt or permission decision, and its end.
//
// Bad arguments and delegations that end other than completed are tool
// errors (isError) whose structured result carries the spec's error code,
// message and hint; they are never protocol errors.
//
// # Discovery
//
// The executors given at start are described in the delegate tool's
// description from their agent cards (spec §8.3), so a model can choose.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// Delegator is what the tools need of the delegator side: the daemon's
// local API or a Delegator in this process.
type Delegator interface {
	// Start runs admission, records the delegation and has it run in the
	// background; it returns the new id.
	Start(ctx context.Context, req delegator.ExportRequest) (string, error)
	// Cancel ends a live delegation.
	Cancel(ctx context.Context, id string) error
	// Find returns the delegation with this id or unique id prefix
	// (lease.ErrNotFound, *lease.AmbiguousError).
	Find(idOrPrefix string) (*lease.Delegation, error)
	// List returns every delegation, oldest first.
	List() ([]*lease.Delegation, error)
	// Permit answers a permission request the executor forwarded, or one
	// of a session's turns.
	Permit(ctx context.Context, id, requestID, optionID, answerer string) error
	// Say queues the next turn of a session; EndSession closes it.
	Say(id, prompt, by string) (int, error)
	EndSession(id string) error
}

// Options configures the server. Zero fields take the defaults noted.
type Options struct {
	// Delegator runs and ends delegations. Required.
	Delegator Delegator
	// Peers are the executors described to the model; with exactly one,
	// peer_url may be left out.
	Peers []Peer
	// Finder, if set, is LAN discovery: it resolves the names, ids and
	// "auto" the configured peers do not answer to, and the peers tool
	// lists what it found. Without configured peers, no peer_url is auto.
	Finder PeerFinder
	// Self is this agent's id, never chosen by auto; CallChain the chain
	// this server was started in ($AWCP_CALL_CHAIN), handed on by every
	// delegation and never chosen either.
	Self      string
	CallChain []string
	// Token is sent to executors that require one. Secret.
	Token string
	// Transport of new delegations: auto, sshfs, sshfs-reverse or archive.
	// Default auto.
	Transport string
	// Dialect of new delegations: auto, seed or head. Default auto.
	Dialect string
	// Policy of new delegations' exports (delegator.ExportRequest's
	// fields of the same names).
	Hide                               []string
	NoHideDefaults                     bool
	NoDelete                           bool
	AllowGitControl, LendHiddenHistory bool
	// PlainHTTP lets delegations reach http:// executors over plain HTTP.
	PlainHTTP bool
	// KeyFor, if set, gives the key trusted at a peer URL a call names.
	KeyFor        KeyFor
	MaxWriteBytes int64
	// Limits are admission's (zero fields: the transport's defaults).
	Limits delegator.AdmissionLimits
	// SnapshotMode of new delegations whose call names none: auto,
	// staged or discard. Default auto.
	SnapshotMode string
	// Cwd resolves a relative workspace_dir when the call gives no cwd.
	// Default: the process's working directory.
	Cwd string
	// SyncWait bounds how long delegate waits without background.
	// Default 1h (spec §8.2.1).
	SyncWait time.Duration
	// Poll is how often a waiting call looks at the store. Default 200ms.
	Poll time.Duration
	// Version is reported to clients. Default "dev".
	Version string
	// Logger default slog.Default(). It must not write to stdout, which
	// belongs to the MCP stream.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Transport == "" {
		o.Transport = "auto"
	}
	if o.Cwd == "" {
		o.Cwd, _ = os.Getwd()
	}
	if o.SyncWait <= 0 {
		o.SyncWait = time.Hour
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

type server struct {
	opts   Options
	dlg    Delegator
	review Reviewer // nil: no snapshot tools
	log    *slog.Logger
}

// New builds the MCP server with awcp's tools: delegate, delegate_output,
// delegate_cancel, delegate_status and delegate_permission.
func New(opts Options) (*mcp.Server, error) {
	if opts.Delegator == nil {
		return nil, errors.New("mcpserver: Delegator is required")
	}
	opts = opts.withDefaults()
	s := &server{opts: opts, dlg: opts.Delegator, log: opts.Logger}
	s.review, _ = opts.Delegator.(Reviewer)
	srv := mcp.NewServer(&mcp.Implementation{Name: "awcp", Title: "AWCP workspace delegation", Version: opts.Version},
		&mcp.ServerOptions{
			Instructions: "Lend a local directory to a remote executor agent for a task (AWCP). " +
				"Prefer delegate with background: true, then delegate_output with block: true.",
			Logger: opts.Logger,
		})

	err := errors.Join(
		addTool(srv, &mcp.Tool{
			Name:        "delegate",
			Annotations: changes(false, false),
			Title:       "Delegate a task on a local directory",
			Description: delegateDescription(opts.Peers, opts.Finder != nil),
		}, s.delegate, map[string]schemaHint{
			"ttl_seconds": {def: 3600, min: ptr(1.0)},
			"access_mode": {def: "rw", enum: []any{"rw", "ro"}},
			"background":  {def: false},
			"snapshot_mode": {def: orDefault(opts.SnapshotMode, lease.SnapshotAuto),
				enum: []any{lease.SnapshotAuto, lease.SnapshotStaged, lease.SnapshotDiscard}},
		}),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_output",
			Annotations: readOnly(false),
			Title:       "A delegation's result",
			Description: "How a delegation stands or ended: state, summary and highlighted files, or the error code, message and hint. With block it waits up to timeout seconds for the end (a session: until its agent awaits).",
		}, s.output, map[string]schemaHint{
			"block":   {def: false},
			"timeout": {def: 60, min: ptr(0.0)},
		}),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_cancel",
			Annotations: changes(true, true),
			Title:       "Cancel delegations",
			Description: "Cancel one delegation (delegation_id) or every live one (all: true; all wins when both are given). The executor stops its agent and every access to the workspace is closed.",
		}, s.cancel, map[string]schemaHint{
			"all": {def: false},
		}),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_status",
			Annotations: readOnly(false),
			Title:       "List delegations",
			Description: "The delegations made from this machine, newest last, with their states; or one, given delegation_id.",
		}, s.status, nil),
		addTool(srv, &mcp.Tool{
			Name:        "peers",
			Annotations: readOnly(true),
			Title:       "List executors",
			Description: "The executors this server knows: those configured, and those found on the local network " +
				"(mDNS, when discovery is on) with whether each is online, when it was last seen, and what it offers " +
				"(transports, live mount, free slots). Pass one's name or agent id to delegate as peer_url.",
		}, s.peers, nil),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_permission",
			Annotations: changes(false, true),
			Title:       "Answer the executor agent's permission request",
			Description: "An executor run with --permission forward asks before its agent's sensitive tool calls; " +
				"delegate_output lists the pending requests (permissions with outcome pending) and their options. " +
				"Answer with one option_id; unanswered requests are cancelled after the executor's timeout.",
		}, s.permit, nil),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_answer",
			Annotations: changes(false, false),
			Title:       "Answer a session's remote agent",
			Description: "A session (delegate with session: true) is awaiting when its agent asks for a permission " +
				"(answer with option_id) or has ended its turn, often with a question (answer with text: it is the next turn). " +
				"Without background the call waits until the agent awaits again or the session ends.",
		}, s.answer, map[string]schemaHint{
			"background": {def: false},
		}),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_close_session",
			Annotations: changes(true, true),
			Title:       "Close a session",
			Description: "End a session: the remote agent's session closes, the lease ends and every access to the workspace is closed.",
		}, s.closeSession, nil),
		s.addSnapshotTools(srv),
	)
	if err != nil {
		return nil, err
	}
	return srv, nil
}

func delegateDescription(peers []Peer, discovering bool) string {
	return "Lend a local directory (workspace_dir) to a remote executor agent for one task, under a lease " +
		"(ttl_seconds). The executor's agent works on the directory with its own tools — live, over a mount, " +
		"or on a copy whose result is applied back — and every access ends with the lease. " +
		"Without background the call waits for the end (at most an hour) and returns the summary and the " +
		"files the executor changed; with background: true it returns the delegation_id at once, for " +
		"delegate_output. Recommended: background.\n\n" + describePeers(peers, discovering)
}

type delegateArgs struct {
	Description  string   `json:"description" jsonschema:"short task description, for logs and lists"`
	Prompt       string   `json:"prompt" jsonschema:"the complete task for the executor's agent"`
	WorkspaceDir string   `json:"workspace_dir,omitempty" jsonschema:"the local directory to lend; relative paths are resolved against cwd (default: cwd)"`
	PeerURL      string   `json:"peer_url,omitempty" jsonschema:"the executor: its URL, a2a:URL for an A2A agent (the workspace goes to it as a ZIP), the name of a listed executor, or (with discovery) the name or agent id of one on the network, or auto; default: the only configured one, or auto with discovery and none configured"`
	Cwd          string   `json:"cwd,omitempty" jsonschema:"directory against which a relative workspace_dir is resolved (default: the server's working directory)"`
	TTLSeconds   int64    `json:"ttl_seconds,omitempty" jsonschema:"length of the lease in seconds"`
	AccessMode   string   `json:"access_mode,omitempty" jsonschema:"rw lets the executor change the directory; ro only read it"`
	Background   bool     `json:"background,omitempty" jsonschema:"return the delegation_id at once instead of waiting for the result"`
	Session      bool     `json:"session,omitempty" jsonschema:"open a session: the remote ACP agent keeps it, with the workspace, for follow-up turns (delegate_answer, or delegate with session_id) until delegate_close_session or 30 idle minutes; the call returns when the agent awaits"`
	SessionID    string   `json:"session_id,omitempty" jsonschema:"continue this session (its delegation_id) with prompt as the next turn; the other arguments are the session's already"`
	SnapshotMode string   `json:"snapshot_mode,omitempty" jsonschema:"what becomes of the result: auto applies it (a live mount writes in place), staged keeps it for review with the workspace untouched (delegate_snapshots, delegate_apply_snapshot, delegate_discard_snapshot), discard drops it"`
	Peers        []string `json:"peers,omitempty" jsonschema:"several executors (as peer_url takes each): the task runs as attempts, one on each at once, each staged with the workspace untouched; the call waits for them all (each one's state in progress notifications; background: true returns at once) and returns the group; delegate_compare shows the attempts side by side, delegate_apply_snapshot applies the one chosen and discards the others"`
	Scopes       []Scope  `json:"scopes,omitempty" jsonschema:"split the task among executors: each gets the whole workspace, read-write only under its path, all at once; the call waits for them all (each one's state in progress notifications; background: true returns at once) and returns their delegation_ids (delegate_output shows each)"`
}

func (s *server) delegate(ctx context.Context, req *mcp.CallToolRequest, in delegateArgs) (Outcome, error) {
	if strings.TrimSpace(in.Prompt) == "" {
		return Outcome{}, control.Errorf(control.CodeUsage, "prompt is required").
			WithHint("give the executor's agent the complete task in prompt")
	}
	if in.SessionID != "" {
		return s.nextTurn(ctx, req, in.SessionID, in.Prompt, in.Background)
	}
	if in.TTLSeconds < 0 {
		return Outcome{}, control.Errorf(control.CodeUsage, "ttl_seconds must be positive, not %d", in.TTLSeconds)
	}
	if in.TTLSeconds == 0 {
		in.TTLSeconds = 3600
	}
	access := in.AccessMode
	if access == "" {
		access = control.AccessRW
	}
	if len(in.Peers) > 1 {
		return s.delegateAttempts(ctx, req, in, access)
	}
	if len(in.Scopes) > 0 {
		return s.delegateScopes(ctx, req, in, access)
	}
	if len(in.Peers) == 1 && in.PeerURL == "" {
		in.PeerURL = in.Peers[0]
	}
	peer, err := s.pickPeer(ctx, in.PeerURL, access)
	if err != nil {
		return Outcome{}, err
	}
	export, err := s.request(in, peer)
	if err != nil {
		return Outcome{}, err
	}
	id, err := s.dlg.Start(ctx, export)
	if err != nil {
		return Outcome{}, err
	}
	s.log.Info("delegation started", "delegation", id, "peer", peer.URL, "background", in.Background)
	if in.Background {
		d, err := s.dlg.Find(id)
		if err != nil {
			return Outcome{}, err
		}
		o := outcomeOf(d)
		o.Notes = append(o.Notes, "running in the background: call delegate_output with this delegation_id (block: true waits for the end)")
		return o, nil
	}
	d, err := s.wait(ctx, req, id, s.opts.SyncWait)
	if ctx.Err() != nil {
		// The client gave up on the call (or the server is stopping): the
		// delegation ends with it, as Ctrl-C ends `awcp-ctl export`.
		if cerr := s.dlg.Cancel(context.WithoutCancel(ctx), id); cerr != nil {
			s.log.Warn("cancel after the call ended", "delegation", id, "err", cerr)
		}
		return Outcome{}, ctx.Err()
	}
	if err != nil {
		return Outcome{}, err
	}
	o := outcomeOf(d)
	if !d.State.Terminal() && !d.Awaiting() {
		o.Notes = append(o.Notes, fmt.Sprintf("not ended after %s: call delegate_output to keep waiting", s.opts.SyncWait))
	}
	return o, nil
}

// workspaceDir is the directory delegate's arguments lend: workspace_dir,
// relative to cwd (the call's, or the server's).
func (s *server) workspaceDir(in delegateArgs) (string, error) {
	cwd := in.Cwd
	if cwd == "" {
		cwd = s.opts.Cwd
	} else if !filepath.IsAbs(cwd) {
		return "", control.Errorf(control.CodeUsage, "cwd must be an absolute path, not %q", in.Cwd)
	}
	dir := in.WorkspaceDir
	if dir == "" {
		dir = cwd
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(cwd, dir)
	}
	return dir, nil
}

// request is the export delegate's arguments ask of peer.
func (s *server) request(in delegateArgs, peer chosenPeer) (delegator.ExportRequest, error) {
	dir, err := s.workspaceDir(in)
	if err != nil {
		return delegator.ExportRequest{}, err
	}
	return delegator.ExportRequest{
		Dir: dir, Peer: peer.URL, PeerAgentID: peer.AgentID, PeerName: peer.Name, PeerKey: peer.Key, PeerChoice: peer.why, PeerFallbacks: peer.fallbacks, CallChain: s.opts.CallChain, PlainHTTP: s.opts.PlainHTTP,
		Prompt: in.Prompt, Description: strings.TrimSpace(in.Description),
		TTL: control.Seconds(in.TTLSeconds), Access: in.AccessMode,
		Transport: s.opts.Transport, Token: s.opts.Token, Dialect: s.opts.Dialect,
		Hide: s.opts.Hide, NoHideDefaults: s.opts.NoHideDefaults, NoDelete: s.opts.NoDelete, AllowGitControl: s.opts.AllowGitControl, LendHiddenHistory: s.opts.LendHiddenHistory, MaxWriteBytes: s.opts.MaxWriteBytes, Limits: s.opts.Limits,
		Driven: in.Session, Snapshot: orDefault(in.SnapshotMode, s.opts.SnapshotMode),
	}, nil
}

type outputArgs struct {
	DelegationID string  `json:"delegation_id" jsonschema:"the delegation's id (a unique prefix is enough)"`
	Block        bool    `json:"block,omitempty" jsonschema:"wait until the delegation ends"`
	Timeout      float64 `json:"timeout,omitempty" jsonschema:"longest wait in seconds, with block"`
}

func (s *server) output(ctx context.Context, req *mcp.CallToolRequest, in outputArgs) (Outcome, error) {
	d, err := s.find(in.DelegationID)
	if err != nil {
		return Outcome{}, err
	}
	if in.Block && !d.State.Terminal() && !d.Awaiting() {
		if in.Timeout < 0 {
			return Outcome{}, control.Errorf(control.CodeUsage, "timeout must not be negative")
		}
		timeout := 60 * time.Second
		if in.Timeout > 0 {
			timeout = time.Duration(in.Timeout * float64(time.Second))
		}
		if d, err = s.wait(ctx, req, d.ID, timeout); err != nil {
			return Outcome{}, err
		}
	}
	o := outcomeOf(d)
	if !d.State.Terminal() && !d.Awaiting() {
		o.Notes = append(o.Notes, "not ended yet: call delegate_output again (block: true waits)")
	}
	return o, nil
}

type cancelArgs struct {
	DelegationID string `json:"delegation_id,omitempty" jsonschema:"the delegation to cancel (a unique prefix is enough)"`
	All          bool   `json:"all,omitempty" jsonschema:"cancel every live delegation"`
}

// CancelResult is delegate_cancel's result.
type CancelResult struct {
	Cancelled []Outcome `json:"cancelled,omitempty" jsonschema:"the delegations now cancelled"`
	Error     *Failure  `json:"error,omitempty"`
}

func (r CancelResult) failed() bool                  { return r.Error != nil }
func (CancelResult) refused(f *Failure) CancelResult { return CancelResult{Error: f} }

func (r CancelResult) text() string {
	var b strings.Builder
	if len(r.Cancelled) == 0 && r.Error == nil {
		b.WriteString("no live delegation to cancel")
	}
	for _, o := range r.Cancelled {
		fmt.Fprintf(&b, "cancelled %s (%s)\n", o.DelegationID, o.Description)
	}
	b.WriteString(r.Error.text())
	return strings.TrimRight(b.String(), "\n")
}

func (s *server) cancel(ctx context.Context, _ *mcp.CallToolRequest, in cancelArgs) (CancelResult, error) {
	var ids []string
	switch {
	case in.All:
		ds, err := s.dlg.List()
		if err != nil {
			return CancelResult{}, err
		}
		for _, d := range ds {
			if !d.State.Terminal() {
				ids = append(ids, d.ID)
			}
		}
	case in.DelegationID != "":
		d, err := s.find(in.DelegationID)
		if err != nil {
			return CancelResult{}, err
		}
		if d.State.Terminal() {
			return CancelResult{}, control.Errorf(control.CodeUsage, "delegation %s already ended (%s)", d.ID, d.State).
				WithHint("delegate_output shows how it ended")
		}
		ids = []string{d.ID}
	default:
		return CancelResult{}, control.Errorf(control.CodeUsage, "nothing to cancel").
			WithHint("give delegation_id, or all: true")
	}
	var res CancelResult
	var errs []error
	for _, id := range ids {
		if err := s.dlg.Cancel(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		}
		if d, err := s.dlg.Find(id); err == nil {
			res.Cancelled = append(res.Cancelled, outcomeOf(d))
		}
	}
	if len(errs) > 0 {
		res.Error = failureOf(errors.Join(errs...))
	}
	return res, nil
}

type permitArgs struct {
	DelegationID string `json:"delegation_id" jsonschema:"the delegation (a unique prefix is enough)"`
	RequestID    string `json:"request_id" jsonschema:"the pending request's id, e.g. perm-1"`
	OptionID     string `json:"option_id" jsonschema:"the chosen option's id"`
}

func (s *server) permit(ctx context.Context, req *mcp.CallToolRequest, in permitArgs) (Outcome, error) {
	d, err := s.find(in.DelegationID)
	if err != nil {
		return Outcome{}, err
	}
	if in.RequestID == "" || in.OptionID == "" {
		return Outcome{}, control.Errorf(control.CodeUsage, "request_id and option_id are required").
			WithHint("delegate_output lists the pending requests and their options")
	}
	if err := s.dlg.Permit(ctx, d.ID, in.RequestID, in.OptionID, answerer(req)); err != nil {
		return Outcome{}, err
	}
	o := outcomeOf(d)
	o.Notes = append(o.Notes, fmt.Sprintf("answered %s with %s", in.RequestID, in.OptionID))
	return o, nil
}

type statusArgs struct {
	DelegationID string `json:"delegation_id,omitempty" jsonschema:"show only this delegation (a unique prefix is enough)"`
}

// StatusResult is delegate_status's result.
type StatusResult struct {
	Delegations []Outcome `json:"delegations,omitempty"`
	Error       *Failure  `json:"error,omitempty"`
}

func (r StatusResult) failed() bool                  { return r.Error != nil }
func (StatusResult) refused(f *Failure) StatusResult { return StatusResult{Error: f} }

func (r StatusResult) text() string {
	if r.Error != nil {
		return strings.TrimRight(r.Error.text(), "\n")
	}
	if len(r.Delegations) == 0 {
		return "no delegations"
	}
	var b strings.Builder
	for _, o := range r.Delegations {
		fmt.Fprintf(&b, "%s  %-9s  %s  %s → %s\n", o.DelegationID, o.State, o.Description, o.WorkspaceDir, o.PeerURL)
	}
	return strings.TrimRight(b.String(), "\n")
}

func (s *server) status(_ context.Context, _ *mcp.CallToolRequest, in statusArgs) (StatusResult, error) {
	if in.DelegationID != "" {
		d, err := s.find(in.DelegationID)
		if err != nil {
			return StatusResult{}, err
		}
		return StatusResult{Delegations: []Outcome{outcomeOf(d)}}, nil
	}
	ds, err := s.dlg.List()
	if err != nil {
		return StatusResult{}, err
	}
	var res StatusResult
	for _, d := range ds {
		res.Delegations = append(res.Delegations, outcomeOf(d))
	}
	return res, nil
}

// find resolves a delegation_id argument, with spec-coded errors.
func (s *server) find(arg string) (*lease.Delegation, error) {
	if arg == "" {
		return nil, control.Errorf(control.CodeUsage, "delegation_id is required").
			WithHint("delegate_status lists the delegations")
	}
	d, err := s.dlg.Find(arg)
	var amb *lease.AmbiguousError
	switch {
	case errors.Is(err, lease.ErrNotFound):
		return nil, control.Errorf(control.CodeNotFound, "no delegation %s", arg).
			WithHint("delegate_status lists the delegations")
	case errors.As(err, &amb):
		return nil, control.Errorf(control.CodeUsage, "%s", amb.Error()).WithHint("give more of the id")
	}
	return d, err
}

// wait polls the store until delegation id ends, timeout passes or ctx is
// done. When the client asked for progress it hears of every change of
// state, and at least every 10s, so that clients which reset their request
// timeout on progress keep waiting.
func (s *server) wait(ctx context.Context, req *mcp.CallToolRequest, id string, timeout time.Duration) (*lease.Delegation, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(s.opts.Poll)
	defer tick.Stop()
	token := req.Params.GetProgressToken()
	var (
		step     float64
		lastSeen lease.State
		lastSent time.Time
		lastLine *lease.ProgressLine // the last agent line notified
	)
	notify := func(msg string) {
		step++
		lastSent = time.Now()
		err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: step, Message: msg})
		if err != nil {
			s.log.Debug("progress notification", "err", err)
		}
	}
	for {
		d, err := s.dlg.Find(id)
		if err != nil {
			return nil, err
		}
		if token != nil && req.Session != nil {
			if d.State != lastSeen || time.Since(lastSent) >= 10*time.Second {
				lastSeen = d.State
				notify("delegation " + id + ": " + string(d.State))
			}
			for _, l := range lease.ProgressAfter(d.Progress, lastLine) {
				notify(agentLine(l.Text))
				lastLine = &l
			}
		}
		if d.State.Terminal() || d.Awaiting() {
			return d, nil
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-deadline.C:
			return d, nil
		case <-tick.C:
		}
	}
}

// answerer is who answers through this server, for the record: the MCP
// client as it named itself.
func answerer(req *mcp.CallToolRequest) string {
	name := "an unnamed client"
	if req != nil && req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
			name = p.ClientInfo.Name
			if len(name) > 100 {
				name = name[:100] + "…"
			}
		}
	}
	return "MCP client " + name
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// agentLine is a progress line as a notification says it: "agent: " and
// the line, unless the executor said already what it is (an ACP agent's
// "agent: …", "thinking: …", "tool: …", "plan: …").
func agentLine(text string) string {
	for _, kind := range []string{"agent: ", "thinking: ", "tool: ", "plan: "} {
		if strings.HasPrefix(text, kind) {
			return text
		}
	}
	return "agent: " + text
}

// readOnly are the annotations of a tool that changes nothing: hosts call
// it without asking. Its world is this machine's delegations, or, open,
// the executors on the network too (peers asks them).
func readOnly(open bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(open)}
}

// changes are the annotations of a tool that changes something:
// destructive where it overwrites or ends what was there (apply, cancel),
// idempotent where a second call with the same arguments changes nothing
// more. It reaches an executor, another machine: an open world.
func changes(destructive, idempotent bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{DestructiveHint: ptr(destructive), IdempotentHint: idempotent, OpenWorldHint: ptr(true)}
}
