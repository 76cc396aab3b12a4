package a2apeer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/untrusted"
	"github.com/awcp/awcp/lease"
)

// Bounds on the agent's words kept in a delegation's events.
const (
	maxWords   = 4 << 10 // a status message
	maxOptions = 8       // a permission's options
)

// follower maps one task's states onto a delegation's events.
type follower struct {
	p       *Peer
	del     *lease.Delegation
	c       *a2aclient.Client
	spools  *spools // the files of the client's answers
	record  func(taskID, contextID string) error
	emit    func(ev *control.Event) error
	running bool
	said    string // the last status words given
	asked   string // the permission request given and not yet left
	failed  string // the agent's words of an error it reported mid-turn
	// toolCall is the tool call a Gemini CLI agent last asked to confirm
	// (its "tool-call-confirmation" update), until its task goes on.
	toolCall *toolCall
}

// toolCall is a tool call a Gemini CLI agent asks to be confirmed: its
// call id, what it would do, in its words, and the time of the
// input-required that asked it (once asked).
type toolCall struct {
	id, title string
	askedAt   time.Time
}

// Follow is delegator.A2APeer's: the task's stream while it lasts, then
// the task asked for every second until it ends (an agent waiting on an
// answer, one whose stream broke, or one that does not stream).
func (p *Peer) Follow(ctx context.Context, del *lease.Delegation, after uint64, record func(taskID, contextID string) error, fn func(seq uint64, ev *control.Event) error) error {
	c, sp, err := p.client(ctx, del)
	if err != nil {
		if del.PeerTaskID == "" {
			return fatal(err) // never reached: nothing was sent
		}
		return err // reached before: it may answer again
	}
	defer sp.close()
	defer c.Destroy()
	seq := after
	f := &follower{p: p, del: del, c: c, spools: sp, record: record, running: del.State == lease.Running,
		emit: func(ev *control.Event) error { seq++; ev.DelegationID = del.ID; return fn(seq, ev) }}
	if del.PeerTaskID == "" {
		msg, err := p.message(del)
		if err != nil {
			return fatal(err)
		}
		for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: msg}) {
			if err != nil {
				if f.del.PeerTaskID == "" {
					return fatal(err) // the message itself was refused
				}
				p.log().Debug("A2A stream broke off; asking for the task", "delegation", del.ID, "err", err)
				break
			}
			done, err := f.event(ctx, ev)
			if err != nil || done {
				return err
			}
		}
		if f.del.PeerTaskID == "" {
			return fatal(errors.New("the agent answered without naming a task"))
		}
	}
	for {
		task, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(f.del.PeerTaskID)})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, a2a.ErrTaskNotFound) {
				return control.Errorf(control.CodeTaskFailed, "the A2A agent no longer knows task %s", f.del.PeerTaskID)
			}
			return err // retried by the delegator's follower
		}
		done, err := f.status(ctx, task.Status, task)
		if err != nil || done {
			return err
		}
		sp.close() // the files of a task not ended yet: asked again
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// event takes one event of the task's stream; done once the task ended.
func (f *follower) event(ctx context.Context, ev a2a.Event) (bool, error) {
	switch ev := ev.(type) {
	case *a2a.Task:
		if err := f.name(ev.ID, ev.ContextID); err != nil {
			return false, err
		}
		return f.status(ctx, ev.Status, ev)
	case *a2a.TaskStatusUpdateEvent:
		if err := f.name(ev.TaskID, ev.ContextID); err != nil {
			return false, err
		}
		f.noteError(ev.Metadata, ev.Status.Message)
		f.noteToolCall(ev.Metadata, ev.Status.Message)
		return f.status(ctx, ev.Status, nil)
	case *a2a.Message:
		// An answer that is a message, not a task: the agent's whole
		// reply, with nothing to follow.
		return true, f.finish(ctx, &a2a.Task{Status: a2a.TaskStatus{State: a2a.TaskStateCompleted, Message: ev}})
	}
	return false, nil // artifacts: read with the task when it ends
}

// name keeps the agent's ids for the task, the first time they come.
func (f *follower) name(taskID a2a.TaskID, contextID string) error {
	if f.del.PeerTaskID != "" || taskID == "" {
		return nil
	}
	if !requestIDPattern.MatchString(string(taskID)) {
		return control.Errorf(control.CodeTaskFailed, "the A2A agent named its task %s: not an id", untrusted.Name(untrusted.Clip(string(taskID), 80)))
	}
	if contextID != "" && !contextIDPattern.MatchString(contextID) {
		return control.Errorf(control.CodeTaskFailed, "the A2A agent named its task's context %s: not an id", untrusted.Name(untrusted.Clip(contextID, 80)))
	}
	f.del.PeerTaskID, f.del.PeerContextID = string(taskID), contextID
	return f.record(string(taskID), contextID)
}

// status takes the task's status; task, if the whole task came with it,
// holds its artifacts. done once the task ended.
func (f *follower) status(ctx context.Context, st a2a.TaskStatus, task *a2a.Task) (bool, error) {
	words := untrusted.Clip(textOf(st.Message), maxWords)
	if f.asked != "" && st.State != a2a.TaskStateInputRequired {
		// Answered (by awcp-ctl permit, here or in another process).
		ev := &control.Event{Type: control.EventPermission, RequestID: f.asked, Outcome: control.PermissionSelected, DecidedBy: "delegator"}
		if f.toolCall != nil && f.toolCall.id == f.asked {
			f.toolCall = nil // answered: never asked again
		}
		f.asked = ""
		if err := f.emit(ev); err != nil {
			return false, err
		}
	}
	switch st.State {
	case a2a.TaskStateSubmitted, a2a.TaskStateUnspecified:
		return false, nil
	case a2a.TaskStateWorking:
		if f.toolCall != nil && !f.toolCall.pending(st.Message) {
			f.toolCall = nil // the agent went past it
		}
		if !f.running {
			f.running, f.said = true, words
			return false, f.emit(&control.Event{Type: control.EventStatus, Status: control.StatusRunning, Message: "the A2A agent is working: " + words})
		}
		if words == "" || words == f.said {
			return false, nil
		}
		f.said = words
		return false, f.emit(&control.Event{Type: control.EventStatus, Status: control.StatusProgress, Message: words})
	case a2a.TaskStateInputRequired:
		if structured(st.Message) {
			return false, f.ask(st.Message, words)
		}
		if tc := f.toolCall; tc != nil {
			// Asked already, and this is another input-required, later:
			// the answer went through and the agent's turn ended since
			// (seen by asking for the task, which shows no update
			// between). Else the confirmation still waits, or is new.
			if tc.askedAt.IsZero() || st.Timestamp == nil || !st.Timestamp.After(tc.askedAt) {
				if tc.askedAt.IsZero() && st.Timestamp != nil {
					tc.askedAt = *st.Timestamp
				}
				return false, f.askToolCall(tc, words)
			}
			f.toolCall = nil
			if f.asked == tc.id {
				f.asked = ""
				if err := f.emit(&control.Event{Type: control.EventPermission, RequestID: tc.id, Outcome: control.PermissionSelected, DecidedBy: "delegator"}); err != nil {
					return false, err
				}
			}
		}
		// An agent's turn ended, and it waits for the next message (as
		// Gemini CLI's does after each): a delegation is one task, so it
		// ends here — failed if the agent reported an error on the way.
		if f.failed != "" {
			return true, f.emit(&control.Event{Type: control.EventError, Code: control.CodeTaskFailed, Message: "the A2A agent failed: " + f.failed})
		}
		if task == nil || len(task.Artifacts) == 0 {
			got, err := f.c.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(f.del.PeerTaskID)})
			if err != nil {
				return false, err
			}
			task = got
		}
		task.Status = st
		return true, f.finish(ctx, task)
	case a2a.TaskStateCompleted:
		if task == nil || len(task.Artifacts) == 0 {
			got, err := f.c.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(f.del.PeerTaskID)})
			if err != nil {
				return false, err
			}
			task = got
		}
		return true, f.finish(ctx, task)
	case a2a.TaskStateCanceled:
		return true, f.emit(&control.Event{Type: control.EventError, Code: control.CodeCancelled, Message: "the A2A agent cancelled the task: " + words})
	case a2a.TaskStateRejected:
		return true, f.emit(&control.Event{Type: control.EventError, Code: control.CodeDeclined, Message: "the A2A agent rejected the task: " + words})
	case a2a.TaskStateAuthRequired:
		return true, f.emit(&control.Event{Type: control.EventError, Code: control.CodeAuthFailed, Message: "the A2A agent asks for authentication: " + words,
			Hint: "give it what it asks (its token with --token-file), then delegate again"})
	default: // failed, and any state A2A adds later
		return true, f.emit(&control.Event{Type: control.EventError, Code: control.CodeTaskFailed, Message: "the A2A agent failed: " + words})
	}
}

// ask gives a permission the agent asks (input-required) once: its
// request id and options from a data part if it sent one (as an awcp
// executor's A2A face does), else allow and reject.
func (f *follower) ask(m *a2a.Message, words string) error {
	id, options := "", []control.PermissionOption(nil)
	if m != nil {
		for _, part := range m.Parts {
			data, ok := dataOf(part)
			if !ok {
				continue
			}
			if s, ok := data["requestId"].(string); ok && requestIDPattern.MatchString(s) {
				id = s
			}
			list, _ := data["options"].([]any)
			for _, o := range list {
				om, _ := o.(map[string]any)
				oid, _ := om["optionId"].(string)
				name, _ := om["name"].(string)
				kind, _ := om["kind"].(string)
				if requestIDPattern.MatchString(oid) && len(options) < maxOptions {
					options = append(options, control.PermissionOption{OptionID: oid, Name: untrusted.Clip(name, 80), Kind: untrusted.Clip(kind, 40)})
				}
			}
		}
	}
	if id == "" {
		id = "a2a-input"
		if m != nil && requestIDPattern.MatchString(m.ID) {
			id = m.ID
		}
	}
	if len(options) == 0 {
		options = []control.PermissionOption{{OptionID: "allow", Name: "Allow", Kind: "allow_once"}, {OptionID: "reject", Name: "Reject", Kind: "reject_once"}}
	}
	if f.asked == id {
		return nil // asked already; still waiting
	}
	f.asked = id
	return f.emit(&control.Event{Type: control.EventPermission, RequestID: id, Message: words, Options: options, Outcome: control.PermissionPending})
}

// structured says whether an input-required message asks a permission
// awcp can answer: a data part naming a request or its options (as an
// awcp executor's A2A face sends).
func structured(m *a2a.Message) bool {
	if m == nil {
		return false
	}
	for _, part := range m.Parts {
		if data, ok := dataOf(part); ok {
			if _, ok := data["requestId"]; ok {
				return true
			}
			if _, ok := data["options"]; ok {
				return true
			}
		}
	}
	return false
}

// dataOf is a part's data, if it is a data part holding an object.
func dataOf(p *a2a.Part) (map[string]any, bool) {
	if p == nil {
		return nil, false
	}
	d, ok := p.Content.(a2a.Data)
	if !ok {
		return nil, false
	}
	m, ok := d.Value.(map[string]any)
	return m, ok
}

// Gemini CLI's A2A server asks a tool call's confirmation in two steps:
// a working update (metadata coderAgent.kind "tool-call-confirmation")
// whose data part is the call awaiting approval, then input-required
// with no words. Its answer is a data part {callId, outcome}.
const geminiConfirmation = "tool-call-confirmation"

// The outcomes a Gemini CLI tool call takes, as a permission's options.
var geminiOutcomes = []control.PermissionOption{
	{OptionID: "proceed_once", Name: "Allow once", Kind: "allow_once"},
	{OptionID: "proceed_always", Name: "Allow always", Kind: "allow_always"},
	{OptionID: "cancel", Name: "Reject", Kind: "reject_once"},
}

// noteToolCall keeps the tool call a Gemini CLI update asks to confirm.
func (f *follower) noteToolCall(meta map[string]any, m *a2a.Message) {
	agent, _ := meta["coderAgent"].(map[string]any)
	if kind, _ := agent["kind"].(string); kind != geminiConfirmation || m == nil {
		return
	}
	for _, part := range m.Parts {
		data, ok := dataOf(part)
		if !ok {
			continue
		}
		req, _ := data["request"].(map[string]any)
		id, _ := req["callId"].(string)
		if status, _ := data["status"].(string); status != "awaiting_approval" || !requestIDPattern.MatchString(id) {
			continue
		}
		title, _ := req["name"].(string)
		if details, ok := data["confirmationDetails"].(map[string]any); ok {
			if t, ok := details["title"].(string); ok && t != "" {
				title = t
			}
		}
		f.toolCall = &toolCall{id: id, title: untrusted.Clip(title, 200)}
	}
}

// pending says whether an update still shows the call awaiting approval
// (its status repeated); any other update of the task says it went on.
func (tc *toolCall) pending(m *a2a.Message) bool {
	if m == nil {
		return true // words without a call: nothing said of it
	}
	for _, part := range m.Parts {
		data, ok := dataOf(part)
		if !ok {
			continue
		}
		req, _ := data["request"].(map[string]any)
		if id, _ := req["callId"].(string); id == tc.id {
			status, _ := data["status"].(string)
			return status == "awaiting_approval"
		}
	}
	return true
}

// askToolCall gives a Gemini CLI tool call's confirmation as a
// permission, once; its id is the call's.
func (f *follower) askToolCall(tc *toolCall, words string) error {
	if f.asked == tc.id {
		return nil
	}
	f.asked = tc.id
	if words == "" {
		words = tc.title // Gemini's own: "Confirm Edit: notes.md"
	}
	if words == "" {
		words = "a tool call"
	}
	return f.emit(&control.Event{Type: control.EventPermission, RequestID: tc.id, Message: words,
		Options: geminiOutcomes, Outcome: control.PermissionPending})
}

// answerParts are a permission's answer, as every agent awcp knows reads
// one: optionId and requestId (an awcp executor's face), callId and
// outcome (Gemini CLI's tool confirmation), and the option as text.
func answerParts(requestID, optionID string) []*a2a.Part {
	return []*a2a.Part{
		a2a.NewDataPart(map[string]any{"optionId": optionID, "requestId": requestID, "callId": requestID, "outcome": optionID}),
		a2a.NewTextPart(optionID),
	}
}

// noteError keeps the words of an error the agent reported in an
// update's metadata ("error", as Gemini CLI's agent reports a failed
// model call) without ending its turn.
func (f *follower) noteError(meta map[string]any, m *a2a.Message) {
	e, ok := meta["error"]
	if !ok || e == nil {
		return
	}
	words := textOf(m)
	if words == "" {
		words = fmt.Sprint(e)
	}
	f.failed = untrusted.Clip(words, maxWords)
}

// textOf is a message's text parts, joined.
func textOf(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range m.Parts {
		if tp, ok := p.Content.(a2a.Text); ok {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(string(tp))
		}
	}
	return b.String()
}
