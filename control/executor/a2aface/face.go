// Package a2aface is the executor's Agent2Agent face (seed 002, "remote
// channels"): A2A 0.3's JSON-RPC binding, streaming included, at POST
// /a2a, served by the official Go SDK (github.com/a2aproject/a2a-go). An
// A2A client's message — the task in its text, the workspace as a ZIP in
// a file part — becomes a delegation of the archive transport, admitted,
// confined and bounded exactly as an AWCP one: the face authenticates by
// the executor's own rules and starts the delegation through the same
// admit and start (executor.DelegateArchive). The delegation's events
// become the task's status updates; a permission the agent asks becomes
// input-required, answered by the client's next message; its result
// becomes artifacts: the changed files, and the diff as text.
//
// Both identities are kept: the A2A task id and context id are the
// client's handle, the delegation id the executor's, and each task's
// metadata names the other ("awcp.delegationId"). Task states are mapped,
// never written over the delegation's own: the executor's store keeps the
// delegation's record whatever the A2A side shows.
package a2aface

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/internal/httpserve"
	"github.com/awcp/awcp/internal/untrusted"
)

// Path is where the face answers.
const Path = "/a2a"

// The A2A versions the face speaks, each a JSON-RPC binding at Path: a
// request says which by its A2A-Version header (1.0's rule), and one
// without it is 0.3's (the header's absence means 0.3).
const (
	ProtocolVersion       = "1.0" // a2a-go v2's
	LegacyProtocolVersion = "0.3" // its compatibility layer's (a2av0)
)

// Executor is what the face asks of the executor (executor.Executor).
type Executor interface {
	Authenticate(r *http.Request) (executor.Caller, bool)
	MaxBodyBytes() int64
	NewSpool() (*control.SpoolFile, error)
	DelegateArchive(ctx context.Context, c executor.Caller, inv *control.Invite, ws control.Spooled) *control.ProtocolError
	Follow(ctx context.Context, c executor.Caller, id string, after uint64, fn func(seq uint64, ev *control.Event) error) error
	ResultFile(id string) (*os.File, error)
	Cancel(ctx context.Context, c executor.Caller, id string) error
	Answer(c executor.Caller, id, requestID, optionID string) error
}

// Options configure a Face.
type Options struct {
	Logger *slog.Logger
	// TTL is the lease of a task that does not ask for one
	// (metadata "awcp.ttlSeconds"); the executor's own maximum caps it.
	TTL time.Duration
	// MaxBody bounds a request's body, its workspace included (decoded
	// into a file as it comes): default, and at most, the executor's own
	// bound (Executor.MaxBodyBytes).
	MaxBody int64
	// Bodies is how many bodies may be read at once. Default 4.
	Bodies int
	// MaxArtifactBytes bounds the changed files sent back as file parts;
	// past it they are listed, not sent. Default 16 MiB.
	MaxArtifactBytes int64
	// MaxTasks bounds the tasks remembered, and MaxTaskBytes their
	// records (their artifacts) together; past either the oldest ended
	// ones are forgotten first. Defaults 1,000 and 256 MiB.
	MaxTasks     int
	MaxTaskBytes int64
}

func (o Options) withDefaults(e Executor) Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.TTL <= 0 {
		o.TTL = 30 * time.Minute
	}
	if o.MaxBody <= 0 || o.MaxBody > e.MaxBodyBytes() {
		o.MaxBody = e.MaxBodyBytes()
	}
	if o.Bodies <= 0 {
		o.Bodies = 4
	}
	if o.MaxArtifactBytes <= 0 {
		o.MaxArtifactBytes = 16 << 20
	}
	if o.MaxTasks <= 0 {
		o.MaxTasks = 1000
	}
	if o.MaxTaskBytes <= 0 {
		o.MaxTaskBytes = 256 << 20
	}
	return o
}

// Face is the executor's A2A face: an http.Handler for Path.
type Face struct {
	exec   Executor
	opts   Options
	log    *slog.Logger
	rpc    map[string]http.Handler // by wire version
	bodies chan struct{}
	tasks  *taskBook
	life   context.Context // the face's: a task's follower ends with it
}

// New makes the face of e. ctx is its life: a task still followed when it
// ends is left to the executor, which ends its delegation as it stops.
func New(ctx context.Context, e Executor, opts Options) *Face {
	opts = opts.withDefaults(e)
	f := &Face{exec: e, opts: opts, log: opts.Logger, bodies: make(chan struct{}, opts.Bodies),
		tasks: newTaskBook(opts.MaxTasks, opts.MaxTaskBytes), life: ctx}
	handler := a2asrv.NewHandler(&agent{f: f},
		a2asrv.WithTaskStore(f.tasks),
		a2asrv.WithLogger(opts.Logger))
	// One handler, one implementation of the task semantics, under both
	// wire versions: the 0.3 layer converts its messages to 1.0's.
	h := &owned{RequestHandler: handler, f: f}
	f.rpc = map[string]http.Handler{
		ProtocolVersion:       a2asrv.NewJSONRPCHandler(h),
		LegacyProtocolVersion: a2av0.NewJSONRPCHandler(h),
	}
	return f
}

type callerKey struct{}

// callerFrom is who sent the request ctx is of, as ServeHTTP authenticated it.
func callerFrom(ctx context.Context) (executor.Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(executor.Caller)
	return c, ok
}

// ServeHTTP authenticates before it reads anything, bounds and checks the
// body (untrusted.JSONKeys: one message, one meaning), then hands it to
// the SDK's JSON-RPC handler.
func (f *Face) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		rpcError(w, http.StatusMethodNotAllowed, -32600, "A2A's JSON-RPC binding is POST "+Path)
		return
	}
	version, ok := wireVersion(r.Header.Get(a2a.SvcParamVersion))
	if !ok {
		rpcError(w, http.StatusBadRequest, -32009, fmt.Sprintf("A2A version %q is not spoken here: %s and %s are (VERSION_NOT_SUPPORTED)",
			untrusted.Clip(r.Header.Get(a2a.SvcParamVersion), 40), ProtocolVersion, LegacyProtocolVersion))
		return
	}
	c, ok := f.exec.Authenticate(r)
	if !ok {
		f.log.Info("A2A request refused: no valid credential", "peer", r.RemoteAddr, "delegator", control.Fingerprint(c.Key))
		w.Header().Set("WWW-Authenticate", `Bearer realm="awcp"`)
		rpcError(w, http.StatusUnauthorized, -32001, "missing or invalid bearer token, and no authorized client key (AUTH_FAILED)")
		return
	}
	select {
	case f.bodies <- struct{}{}:
		defer func() { <-f.bodies }()
	case <-time.After(2 * time.Second):
		w.Header().Set("Retry-After", "5")
		rpcError(w, http.StatusServiceUnavailable, -32603, "too many requests being read at once; retry")
		return
	}
	// The workspace's base64 is decoded into a file as it arrives (as a
	// START's is): what the face and the SDK hold of a message is the
	// rest of it, at most control.MaxMessageBytes.
	paced := httpserve.LimitBody(w, r, f.opts.MaxBody, httpserve.DefaultBodyGrace)
	var spool *control.SpoolFile
	rest, err := control.DivertMarked(bufio.NewReaderSize(paced, 64<<10), workspacePath[version], control.MaxMessageBytes, divertedMark, func() (io.Writer, error) {
		var err error
		spool, err = f.exec.NewSpool()
		return spool, err
	})
	paced.Finished(w, err)
	var ws *workspace
	if spool != nil {
		got, ferr := spool.Finish()
		ws = &workspace{spool: spool, got: got, err: ferr}
		// Unless an Execute took it, it goes with the request.
		defer ws.drop()
	}
	var syntax *control.JSONSyntaxError
	switch {
	case errors.As(err, new(*http.MaxBytesError)):
		rpcError(w, http.StatusRequestEntityTooLarge, -32600,
			fmt.Sprintf("message larger than this executor's limit of %d bytes (WORKSPACE_TOO_LARGE): lend a smaller directory", f.opts.MaxBody))
		return
	case errors.Is(err, control.ErrRestTooLarge):
		rpcError(w, http.StatusRequestEntityTooLarge, -32600,
			fmt.Sprintf("message larger than %d bytes apart from its workspace's bytes: one file part, the ZIP, may be large", control.MaxMessageBytes))
		return
	case errors.As(err, &syntax):
		rpcError(w, http.StatusBadRequest, -32700, "parse error: "+syntax.Error())
		return
	case err != nil:
		rpcError(w, http.StatusBadRequest, -32700, "cannot read the request body")
		return
	}
	if err := untrusted.JSONKeys(rest); err != nil {
		rpcError(w, http.StatusBadRequest, -32700, "parse error: "+err.Error())
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(rest))
	r.ContentLength = int64(len(rest))
	ctx := context.WithValue(context.WithValue(r.Context(), callerKey{}, c), workspaceKey{}, ws)
	if version == LegacyProtocolVersion {
		lw := &legacyErrors{ResponseWriter: w}
		defer lw.finish()
		w = lw
	}
	f.rpc[version].ServeHTTP(w, r.WithContext(ctx))
}

// wireVersion is the version a request's A2A-Version header names, as
// Major.Minor: none is 0.3; false for one the face does not speak.
func wireVersion(header string) (string, bool) {
	switch v := strings.TrimSpace(header); v {
	case "", "0.3", "0.3.0":
		return LegacyProtocolVersion, true
	case "1", "1.0", "1.0.0":
		return ProtocolVersion, true
	}
	return "", false
}

// divertedMark stands in the message the SDK reads for the bytes decoded
// into a file (it refuses a file part with none): base64 of "awcp".
const divertedMark = "YXdjcA=="

// workspacePath is where a message's workspace is, by wire version: the
// bytes of a file part (the first; the agent refuses a second) — 1.0's
// part holds them as "raw", 0.3's in its "file".
var workspacePath = map[string][][]string{
	ProtocolVersion:       {{"params"}, {"message"}, {"parts"}, {"[]"}, {"raw"}},
	LegacyProtocolVersion: {{"params"}, {"message"}, {"parts"}, {"[]"}, {"file"}, {"bytes"}},
}

// workspace is a message's workspace, decoded into a file as its body was
// read; the Execute of its task takes it (take), else it is removed with
// the request (drop).
type workspace struct {
	spool *control.SpoolFile
	got   control.Spooled
	err   error // the file could not be written
	taken atomic.Bool
}

type workspaceKey struct{}

// takeWorkspace is the workspace of the request ctx is of, now the
// caller's to remove; nil if it sent none.
func takeWorkspace(ctx context.Context) *workspace {
	ws, _ := ctx.Value(workspaceKey{}).(*workspace)
	if ws == nil || !ws.taken.CompareAndSwap(false, true) {
		return nil
	}
	return ws
}

// drop removes the workspace unless it was taken.
func (ws *workspace) drop() {
	if ws.taken.CompareAndSwap(false, true) {
		ws.spool.Discard()
	}
}

// rpcError answers a request the SDK never sees with a JSON-RPC error.
func rpcError(w http.ResponseWriter, status, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": code, "message": message}})
}

// owned is the SDK's handler with each request about a task checked to
// come from the client that made it: a task made by a client with a key
// is its alone (as a delegation is its delegator's); push notifications,
// which would have the executor call a URL a client names, are refused.
type owned struct {
	a2asrv.RequestHandler
	f *Face
}

func (h *owned) mayTouch(ctx context.Context, id a2a.TaskID) error {
	c, _ := callerFrom(ctx)
	t := h.f.tasks.lent(id)
	if t == nil || !t.mayTouch(c) {
		return a2a.ErrTaskNotFound // another's task is not shown to exist
	}
	return nil
}

func (h *owned) GetTask(ctx context.Context, q *a2a.GetTaskRequest) (*a2a.Task, error) {
	if q == nil {
		return nil, a2a.ErrInvalidParams
	}
	if err := h.mayTouch(ctx, q.ID); err != nil {
		return nil, err
	}
	return h.RequestHandler.GetTask(ctx, q)
}

func (h *owned) CancelTask(ctx context.Context, p *a2a.CancelTaskRequest) (*a2a.Task, error) {
	if p == nil {
		return nil, a2a.ErrInvalidParams
	}
	if err := h.mayTouch(ctx, p.ID); err != nil {
		return nil, err
	}
	return h.RequestHandler.CancelTask(ctx, p)
}

func (h *owned) SubscribeToTask(ctx context.Context, p *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	if p == nil {
		return func(yield func(a2a.Event, error) bool) { yield(nil, a2a.ErrInvalidParams) }
	}
	if err := h.mayTouch(ctx, p.ID); err != nil {
		return func(yield func(a2a.Event, error) bool) { yield(nil, err) }
	}
	return h.RequestHandler.SubscribeToTask(ctx, p)
}

// ListTasks is the SDK's, whose store (taskBook.List) lists only the
// caller's tasks.

func (h *owned) checkMessage(ctx context.Context, p *a2a.SendMessageRequest) error {
	if p == nil || p.Message == nil {
		return a2a.ErrInvalidParams
	}
	if p.Config != nil && p.Config.PushConfig != nil {
		return fmt.Errorf("%w: push notifications (this executor calls no URL a client names)", a2a.ErrPushNotificationNotSupported)
	}
	if p.Message.TaskID != "" {
		return h.mayTouch(ctx, p.Message.TaskID)
	}
	return nil
}

func (h *owned) SendMessage(ctx context.Context, p *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	if err := h.checkMessage(ctx, p); err != nil {
		return nil, err
	}
	return h.RequestHandler.SendMessage(ctx, p)
}

func (h *owned) SendStreamingMessage(ctx context.Context, p *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	if err := h.checkMessage(ctx, p); err != nil {
		return func(yield func(a2a.Event, error) bool) { yield(nil, err) }
	}
	return h.RequestHandler.SendStreamingMessage(ctx, p)
}

func (h *owned) GetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *owned) ListTaskPushConfigs(context.Context, *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *owned) CreateTaskPushConfig(context.Context, *a2a.PushConfig) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *owned) DeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigRequest) error {
	return a2a.ErrPushNotificationNotSupported
}
