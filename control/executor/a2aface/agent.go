package a2aface

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/internal/untrusted"
)

// Metadata keys the face reads from a client's message and writes on its
// tasks' events.
const (
	MetaDelegationID = "awcp.delegationId" // the delegation a task is
	MetaEventSeq     = "awcp.eventSeq"     // the delegation's event an update is
	MetaTTLSeconds   = "awcp.ttlSeconds"   // a message's lease, asked
	MetaAccessMode   = "awcp.accessMode"   // a message's access mode, asked: rw or ro
	MetaSHA256       = "sha256"            // a file part's checksum (hex), checked if given
	MetaRequestID    = "awcp.requestId"    // the permission request an input-required is
)

// agent is the face's a2asrv.AgentExecutor: a message is a delegation.
type agent struct{ f *Face }

// emit is where an Execute's or a Cancel's events go: the SDK's, or
// errTakesNoMore once it takes no more.
type emit func(a2a.Event) error

var errTakesNoMore = errors.New("a2a: the task takes no more events")

// events runs run with its events given to the SDK as they come.
func events(run func(q emit) error) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		q := func(ev a2a.Event) error {
			if !yield(ev, nil) {
				return errTakesNoMore
			}
			return nil
		}
		if err := run(q); err != nil && !errors.Is(err, errTakesNoMore) {
			yield(nil, err)
		}
	}
}

// Execute starts a delegation for a new task, or for a task waiting on a
// permission gives the client's answer and goes on; then it follows the
// delegation's events to the client until it ends or asks again.
func (a *agent) Execute(ctx context.Context, rc *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return events(func(q emit) error { return a.execute(ctx, rc, q) })
}

func (a *agent) execute(ctx context.Context, rc *a2asrv.ExecutorContext, q emit) error {
	f := a.f
	// The SDK runs this detached from the request; it ends with the face.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(f.life, cancel)()
	c, ok := callerFrom(ctx)
	if !ok {
		return errors.New("a2a: a request without its caller") // ServeHTTP sets it on every request
	}
	// Taken before any event: a client that sends without waiting has its
	// answer after the first, and its request's workspace must be ours by then.
	ws := takeWorkspace(ctx)
	if rc.StoredTask != nil {
		if ws != nil {
			ws.spool.Discard() // an answer carries no workspace
		}
		t := f.tasks.lent(rc.TaskID)
		if t == nil {
			return q(final(rc, a2a.TaskStateFailed, "this executor has no delegation for the task"))
		}
		return a.resume(ctx, rc, q, c, t)
	}
	// The task is the client's from its first event on: a client that
	// sends without waiting asks about it at once (tasks/resubscribe).
	t := &lentTask{caller: c}
	f.tasks.lend(rc.TaskID, t)
	if err := q(a2a.NewSubmittedTask(rc, rc.Message)); err != nil {
		t.end()
		return err
	}
	if pe := a.delegate(ctx, rc, c, t, ws); pe != nil {
		t.end()
		f.log.Info("A2A task refused", "task", rc.TaskID, "code", pe.Code, "reason", pe.Message)
		state := a2a.TaskStateRejected
		if pe.Code == control.CodeSetupFailed || pe.Code == control.CodeStartExpired {
			state = a2a.TaskStateFailed
		}
		return q(final(rc, state, failureText(pe.Code, pe.Message, pe.Hint)))
	}
	f.log.Info("A2A task started", "task", rc.TaskID, "context", rc.ContextID, "delegation", t.delegation, "peer", c.Peer)
	return a.follow(ctx, rc, q, c, t)
}

// delegate starts the delegation rc's message asks for, with ws, its
// workspace as ServeHTTP decoded it (nil if it sent none). ws is removed
// if it is refused, else it is t's.
func (a *agent) delegate(ctx context.Context, rc *a2asrv.ExecutorContext, c executor.Caller, t *lentTask, ws *workspace) *control.ProtocolError {
	f := a.f
	refuse := func(pe *control.ProtocolError) *control.ProtocolError {
		if ws != nil {
			ws.spool.Discard()
		}
		return pe
	}
	msg := rc.Message
	var prompt []string
	var file *a2a.Part
	for _, p := range msg.Parts {
		switch c := p.Content.(type) {
		case a2a.Text:
			prompt = append(prompt, string(c))
		case a2a.Raw, a2a.URL:
			if file != nil {
				return refuse(control.Errorf(control.CodeDeclined, "the message has two file parts; the workspace is one ZIP").
					WithHint("send the directory as one ZIP file part"))
			}
			file = p
		case a2a.Data:
			// Nothing to take from one: the task is the text.
		}
	}
	text := strings.TrimSpace(strings.Join(prompt, "\n"))
	if text == "" {
		return refuse(control.Errorf(control.CodeDeclined, "the message has no text: the task is its text parts").
			WithHint("say the task in a text part"))
	}
	var sum string
	switch {
	case file == nil:
		if ws != nil {
			ws.spool.Discard() // not a file part's: never the workspace
		}
		var err *control.ProtocolError
		if ws, err = f.emptyWorkspace(); err != nil {
			return err
		}
	default:
		_, ok := file.Content.(a2a.Raw)
		switch {
		case !ok:
			return refuse(control.Errorf(control.CodeDeclined, "the workspace is a URI; this executor fetches nothing a client names").
				WithHint("send the ZIP's bytes in the file part"))
		case file.MediaType != "" && file.MediaType != "application/zip" && file.MediaType != "application/x-zip-compressed":
			return refuse(control.Errorf(control.CodeDeclined, "the workspace is %q; it must be a ZIP (application/zip)", untrusted.Clip(file.MediaType, 100)))
		case ws == nil:
			return control.Errorf(control.CodeDeclined, "the file part holds no bytes").WithHint("send the ZIP's bytes in the file part")
		}
		sum, _ = file.Metadata[MetaSHA256].(string)
	}
	switch got := ws.got; {
	case ws.err != nil:
		return refuse(control.Errorf(control.CodeSetupFailed, "the executor cannot store the workspace"))
	case got.Bad != nil:
		return refuse(control.Errorf(control.CodeDeclined, "the workspace's bytes are not base64: %v", got.Bad))
	case sum != "" && !strings.EqualFold(sum, got.Sum):
		return refuse(control.Errorf(control.CodeSetupFailed, "workspace checksum mismatch: got %s, the file part says %s", got.Sum, sum).
			WithHint("the archive was damaged in transit; send it again"))
	}
	// Seconds as asked; admit caps them at the executor's longest lease.
	ttlSeconds := max(int64(f.opts.TTL/time.Second), 1)
	if s, ok := number(msg.Metadata[MetaTTLSeconds]); ok && s > 0 {
		ttlSeconds = s
	}
	mode := control.AccessRW
	if m, ok := msg.Metadata[MetaAccessMode].(string); ok && m == control.AccessRO {
		mode = control.AccessRO
	}
	first, _, _ := strings.Cut(text, "\n")
	inv := &control.Invite{
		BaseMessage: control.BaseMessage{DelegationID: control.NewDelegationID()},
		Task:        control.Task{Description: untrusted.Clip(first, 200), Prompt: text},
		Lease:       control.InviteLease{TTLSeconds: ttlSeconds, AccessMode: mode},
		Workspace:   &control.Workspace{ExportName: "workspace"},
	}
	t.mu.Lock()
	t.delegation, t.workspace = inv.DelegationID, ws.got.File
	t.mu.Unlock()
	return f.exec.DelegateArchive(ctx, c, inv, ws.got)
}

// emptyWorkspace is the workspace of a message without one: an empty
// directory's ZIP, in a file as a sent one is.
func (f *Face) emptyWorkspace() (*workspace, *control.ProtocolError) {
	sp, err := f.exec.NewSpool()
	if err != nil {
		return nil, control.Errorf(control.CodeSetupFailed, "the executor cannot store the workspace")
	}
	_, werr := io.WriteString(sp, emptyZip)
	got, ferr := sp.Finish()
	if errors.Join(werr, ferr) != nil {
		sp.Discard()
		return nil, control.Errorf(control.CodeSetupFailed, "the executor cannot store the workspace")
	}
	return &workspace{spool: sp, got: got}, nil
}

// resume gives the client's answer to the permission its task waits on,
// then follows the delegation on from where the task was left: no event
// is given twice.
func (a *agent) resume(ctx context.Context, rc *a2asrv.ExecutorContext, q emit, c executor.Caller, t *lentTask) error {
	if !t.mayTouch(c) {
		return q(final(rc, a2a.TaskStateFailed, "the task is another client's"))
	}
	t.mu.Lock()
	pending := t.pending
	t.mu.Unlock()
	if pending == nil {
		return q(status(rc, a2a.TaskStateWorking, "the task asks nothing now; it goes on", nil, true))
	}
	choice := answerIn(rc.Message, pending)
	if err := a.f.exec.Answer(c, t.delegation, pending.RequestID, choice); err != nil {
		// Asked again, with why: the task still waits.
		return q(inputRequired(rc, pending, "that answer was not taken ("+err.Error()+"); "))
	}
	t.mu.Lock()
	t.pending = nil
	t.mu.Unlock()
	return a.follow(ctx, rc, q, c, t)
}

// answerIn is the option a client's message chooses: a data part's
// "optionId", or a text that is an option's id or name.
func answerIn(m *a2a.Message, asked *control.Event) string {
	for _, p := range m.Parts {
		switch c := p.Content.(type) {
		case a2a.Data:
			if data, ok := c.Value.(map[string]any); ok {
				if id, ok := data["optionId"].(string); ok {
					return id
				}
			}
		case a2a.Text:
			text := strings.TrimSpace(string(c))
			for _, o := range asked.Options {
				if strings.EqualFold(text, o.OptionID) || strings.EqualFold(text, o.Name) {
					return o.OptionID
				}
			}
			return text
		}
	}
	return ""
}

// follow gives the delegation's events to the client as the task's, from
// the task's cursor on, until the delegation ends or asks a permission.
func (a *agent) follow(ctx context.Context, rc *a2asrv.ExecutorContext, q emit, c executor.Caller, t *lentTask) error {
	f := a.f
	t.mu.Lock()
	from := t.cursor
	t.following = true
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.following = false
		t.mu.Unlock()
	}()
	errAsked := errors.New("asked")
	err := f.exec.Follow(ctx, c, t.delegation, from, func(seq uint64, ev *control.Event) error {
		var out a2a.Event
		switch ev.Type {
		case control.EventStatus:
			text := ev.Message
			if text == "" {
				text = ev.Status
			}
			out = status(rc, a2a.TaskStateWorking, text, t.meta(seq), false)
		case control.EventPermission:
			switch ev.Outcome {
			case control.PermissionPending:
				t.mu.Lock()
				t.cursor, t.pending = seq, ev
				t.mu.Unlock()
				if err := q(inputRequired(rc, ev, "")); err != nil {
					return err
				}
				return errAsked
			default:
				out = status(rc, a2a.TaskStateWorking, permissionText(ev), t.meta(seq), false)
			}
		case control.EventDone:
			arts, err := f.artifacts(t)
			if err != nil {
				f.log.Warn("A2A result", "task", rc.TaskID, "delegation", t.delegation, "err", err)
			}
			for _, art := range arts {
				ae := &a2a.TaskArtifactUpdateEvent{TaskID: rc.TaskID, ContextID: rc.ContextID, Artifact: art, LastChunk: true}
				if err := q(ae); err != nil {
					return err
				}
			}
			text := ev.Summary
			if err != nil {
				text += "\n(the result could not be sent as artifacts: " + err.Error() + ")"
			}
			out = status(rc, a2a.TaskStateCompleted, text, t.meta(seq), true)
		case control.EventError:
			state := a2a.TaskStateFailed
			if ev.Code == control.CodeCancelled {
				state = a2a.TaskStateCanceled
			}
			out = status(rc, state, failureText(ev.Code, ev.Message, ev.Hint), t.meta(seq), true)
		default:
			return nil // snapshot, channel: the AWCP face's alone
		}
		t.mu.Lock()
		t.cursor = seq
		t.mu.Unlock()
		return q(out)
	})
	switch {
	case errors.Is(err, errAsked):
		return nil
	case err != nil && ctx.Err() != nil:
		return nil // cancelled: Cancel wrote the task's end
	case err != nil:
		t.end()
		return q(final(rc, a2a.TaskStateFailed, "the executor lost the delegation: "+err.Error()))
	}
	t.end()
	return nil
}

// Cancel ends the task's delegation, as the AWCP face's cancel does.
func (a *agent) Cancel(ctx context.Context, rc *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return events(func(q emit) error { return a.cancel(ctx, rc, q) })
}

func (a *agent) cancel(ctx context.Context, rc *a2asrv.ExecutorContext, q emit) error {
	c, _ := callerFrom(ctx)
	t := a.f.tasks.lent(rc.TaskID)
	if t == nil {
		return a2a.ErrTaskNotFound
	}
	// Asked before the delegation is ended: an Execute following it now
	// gives its end (the executor's CANCELLED, or the end it reached
	// first), and may be done before Cancel is; two terminal events on
	// one task would fail both.
	t.mu.Lock()
	followed, delegation := t.following, t.delegation
	t.mu.Unlock()
	if delegation == "" {
		return fmt.Errorf("%w: its delegation is being started; cancel it again in a moment", a2a.ErrTaskNotCancelable)
	}
	if err := a.f.exec.Cancel(ctx, c, delegation); err != nil {
		return fmt.Errorf("%w: %v", a2a.ErrTaskNotCancelable, err)
	}
	a.f.log.Info("A2A task cancelled", "task", rc.TaskID, "delegation", t.delegation)
	if followed {
		return nil
	}
	t.end()
	return q(final(rc, a2a.TaskStateCanceled, "cancelled by the client: the delegation was ended"))
}

func (t *lentTask) meta(seq uint64) map[string]any {
	return map[string]any{MetaDelegationID: t.delegation, MetaEventSeq: seq}
}

// status is a status update of the task.
func status(rc *a2asrv.ExecutorContext, state a2a.TaskState, text string, meta map[string]any, last bool) *a2a.TaskStatusUpdateEvent {
	var msg *a2a.Message
	if text != "" {
		msg = a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.NewTextPart(text))
	}
	ev := a2a.NewStatusUpdateEvent(rc, state, msg)
	ev.Metadata = meta
	return ev
}

func final(rc *a2asrv.ExecutorContext, state a2a.TaskState, text string) *a2a.TaskStatusUpdateEvent {
	return status(rc, state, text, nil, true)
}

// inputRequired asks the client a permission the agent asks: its title,
// its options (in text, and as data to answer with), and how to answer.
func inputRequired(rc *a2asrv.ExecutorContext, ev *control.Event, before string) *a2a.TaskStatusUpdateEvent {
	var b strings.Builder
	fmt.Fprintf(&b, "%sThe agent asks permission: %s. Answer with one of:", before, ev.Message)
	options := make([]any, 0, len(ev.Options))
	for _, o := range ev.Options {
		fmt.Fprintf(&b, " %s (%s);", o.OptionID, o.Name)
		options = append(options, map[string]any{"optionId": o.OptionID, "name": o.Name, "kind": o.Kind})
	}
	msg := a2a.NewMessageForTask(a2a.MessageRoleAgent, rc,
		a2a.NewTextPart(strings.TrimSuffix(b.String(), ";")),
		a2a.NewDataPart(map[string]any{"requestId": ev.RequestID, "title": ev.Message, "options": options}))
	up := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateInputRequired, msg)
	up.Metadata = map[string]any{MetaRequestID: ev.RequestID}
	return up
}

func permissionText(ev *control.Event) string {
	if ev.Outcome == control.PermissionSelected {
		return fmt.Sprintf("permission %q: %s, by %s", ev.Message, ev.OptionID, ev.DecidedBy)
	}
	return fmt.Sprintf("permission %q: no option chosen (%s)", ev.Message, ev.DecidedBy)
}

func failureText(code, message, hint string) string {
	text := code + ": " + message
	if hint != "" {
		text += " (" + hint + ")"
	}
	return text
}

// number is a JSON number of a message's metadata.
func number(v any) (int64, bool) {
	switch n := v.(type) {
	case float64:
		// Past 2^63 a float64 has no int64 (1e19 would wrap): refused.
		if n >= math.MaxInt64 || n <= math.MinInt64 {
			return 0, false
		}
		return int64(n), n == float64(int64(n))
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

// emptyZip is the workspace of a message without one: an empty directory.
var emptyZip = func() string {
	var b bytes.Buffer
	zip.NewWriter(&b).Close()
	return base64Std(b.Bytes())
}()
