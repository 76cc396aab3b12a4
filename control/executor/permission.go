package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/httpserve"
)

// Permission policies of an executor (Options.Permission).
const (
	PermissionAuto    = "auto"    // allow, once (allow_once, else the first allow option)
	PermissionDeny    = "deny"    // reject, once (reject_once, else the first reject option)
	PermissionForward = "forward" // the delegator decides
)

// Who decided a permission request, as recorded in its event.
const (
	DecidedByPolicyAuto = "executor policy auto"
	DecidedByPolicyDeny = "executor policy deny"
	DecidedByDelegator  = "delegator"
	DecidedByTimeout    = "timeout"
	DecidedByTaskEnd    = "task ended"
)

// ask is a permission request forwarded to the delegator.
type ask struct {
	options []agent.PermissionOption
	answer  chan string // the chosen option id; buffered, written once
}

// decide answers a permission request of task t by the executor's policy,
// and records the decision, and who made it, as a permission event.
func (e *Executor) decide(ctx context.Context, id string, t *task, req agent.PermissionRequest) agent.Decision {
	var d agent.Decision
	switch e.opts.Permission {
	case PermissionAuto:
		d = agent.Decision{OptionID: onceOption(req.Options, "allow_"), By: DecidedByPolicyAuto}
	case PermissionDeny:
		d = agent.Decision{OptionID: onceOption(req.Options, "reject_"), By: DecidedByPolicyDeny}
	case PermissionForward:
		d = e.forward(ctx, id, t, req)
	}
	outcome := control.PermissionSelected
	if d.OptionID == "" {
		outcome = control.PermissionCancelled
		if e.opts.Permission != PermissionForward {
			d.By += ": no matching option"
		}
	}
	e.permissionEvent(id, req, outcome, d)
	e.log.Info("permission decided", "delegation", id, "request", req.ID, "outcome", outcome, "option", d.OptionID, "by", d.By)
	return d
}

// onceOption is the id of the option of kind prefix+"once" if the agent
// offers one, else of the first whose kind starts with prefix: a policy
// decides the one request it is asked, never the rest of the session
// (an "always" answer is the agent's to keep, and Gemini CLI refuses it
// outright in a folder it does not trust, failing the tool call), and
// never picks blindly the first option of all.
func onceOption(opts []agent.PermissionOption, prefix string) string {
	first := ""
	for _, o := range opts {
		switch {
		case o.Kind == prefix+"once":
			return o.OptionID
		case first == "" && strings.HasPrefix(o.Kind, prefix):
			first = o.OptionID
		}
	}
	return first
}

// forward publishes the request as a pending permission event and waits
// for the delegator's answer, the timeout, or the task's end.
func (e *Executor) forward(ctx context.Context, id string, t *task, req agent.PermissionRequest) agent.Decision {
	a := &ask{options: req.Options, answer: make(chan string, 1)}
	e.mu.Lock()
	t.asks[req.ID] = a
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(t.asks, req.ID)
		e.mu.Unlock()
	}()
	e.permissionEvent(id, req, control.PermissionPending, agent.Decision{})
	timer := time.NewTimer(e.opts.PermissionTimeout)
	defer timer.Stop()
	select {
	case opt := <-a.answer:
		return agent.Decision{OptionID: opt, By: DecidedByDelegator}
	case <-timer.C:
		return agent.Decision{By: DecidedByTimeout}
	case <-ctx.Done():
		return agent.Decision{By: DecidedByTaskEnd}
	}
}

func (e *Executor) permissionEvent(id string, req agent.PermissionRequest, outcome string, d agent.Decision) {
	data := e.eventJSON(&control.Event{DelegationID: id, Type: control.EventPermission, RequestID: req.ID, Message: req.Title,
		ToolCall: req.ToolCall, Options: req.Options, Outcome: outcome, OptionID: d.OptionID, DecidedBy: d.By})
	if _, err := e.store.AppendEvents(id, [][]byte{data}); err != nil {
		e.log.Warn("record permission event", "delegation", id, "err", err)
		return
	}
	e.publish(id)
}

// errNoSuchAsk: no pending permission request has that id.
var errNoSuchAsk = errors.New("no pending permission request")

// answer delivers the delegator's choice to a forwarded request.
func (e *Executor) answer(id, requestID, optionID string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.tasks[id]
	if t == nil {
		return fmt.Errorf("%w: delegation %s runs no task here", errNoSuchAsk, id)
	}
	a := t.asks[requestID]
	if a == nil {
		return fmt.Errorf("%w %q (answered, timed out, or never asked)", errNoSuchAsk, requestID)
	}
	for _, o := range a.options {
		if o.OptionID == optionID {
			delete(t.asks, requestID) // a second answer finds nothing
			a.answer <- optionID
			return nil
		}
	}
	ids := make([]string, len(a.options))
	for i, o := range a.options {
		ids[i] = o.OptionID
	}
	return fmt.Errorf("option %q is not one of %s", optionID, strings.Join(ids, ", "))
}

// handlePermission is POST /awcp/tasks/{id}/permission: the delegator's
// answer to a forwarded permission request.
func (e *Executor) handlePermission(w http.ResponseWriter, r *http.Request) {
	id, ok := e.pathID(w, r)
	if !ok {
		return
	}
	var ans control.PermissionAnswer
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&ans); err != nil || ans.RequestID == "" || ans.OptionID == "" {
		writeError(w, http.StatusBadRequest, control.NewError(id, control.CodeDeclined, "the body must be {requestId, optionId}", ""))
		return
	}
	switch err := e.answer(id, ans.RequestID, ans.OptionID); {
	case errors.Is(err, errNoSuchAsk):
		writeError(w, http.StatusNotFound, control.NewError(id, control.CodeDeclined, err.Error(), "`awcp-ctl output ID` lists the pending requests"))
	case err != nil:
		writeError(w, http.StatusBadRequest, control.NewError(id, control.CodeDeclined, err.Error(), ""))
	default:
		httpserve.WriteJSON(w, http.StatusOK, control.StartResponse{OK: true})
	}
}
