package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/awcp/awcp/lease"
)

// Hooks connect a worker to the executor running it. Every hook may be nil.
type Hooks struct {
	// Started is called with the agent's pid (= its process group id) once
	// it runs.
	Started func(pid int)
	// Update reports progress, in order, from one goroutine at a time.
	Update func(Update)
	// Permission decides a permission request of the agent; it returns
	// when decided or when ctx ends (then the outcome is cancelled).
	Permission func(ctx context.Context, req PermissionRequest) Decision
	// Decided records a permission request decided elsewhere — by the
	// editor of a session — as it stands: outcome is pending (d empty),
	// selected or cancelled.
	Decided func(req PermissionRequest, outcome string, d Decision)
}

// Update is one readable line of progress, with a completed fraction when
// the agent gives one (0 to 1).
type Update struct {
	Message  string
	Progress *float64
}

// PermissionRequest is an agent asking before a tool call (ACP
// session/request_permission), as forwarded to whoever decides.
type PermissionRequest struct {
	ID       string             // unique within the task
	Title    string             // the tool call's title, readable
	ToolCall json.RawMessage    // the tool call as the agent described it
	Options  []PermissionOption // what may be chosen
}

// PermissionOption is one choice of a PermissionRequest.
type PermissionOption = lease.PermissionOption

// Decision is the answer to a PermissionRequest and who gave it.
type Decision struct {
	OptionID string // empty: the request was cancelled
	By       string // e.g. "executor policy auto", "delegator", "timeout"
}

// Shell is the worker of the agent-command contract: Run with Command.
type Shell struct {
	Command   string
	KillGrace time.Duration // default 2s
}

// Run runs the shell agent on t. A non-zero exit is a Result with Failed.
func (s Shell) Run(ctx context.Context, t Task, h Hooks) (*Result, error) {
	opts := Options{Command: s.Command, KillGrace: s.KillGrace, Started: h.Started}
	if h.Update != nil {
		opts.Line = func(l string) { h.Update(Update{Message: l}) }
	}
	res, err := Run(ctx, t, opts)
	if err == nil && res.ExitCode != 0 {
		res.Failed = fmt.Sprintf("the agent exited with status %d", res.ExitCode)
		// Its own words: the line of its stderr that says most, or,
		// where it wrote none (claude -p says "Not logged in" on
		// stdout), its last line of output. All of its stderr goes with
		// the failure besides (AgentStderr).
		words := lease.TellingLine(res.StderrTail)
		if words == "" {
			words = lease.TellingLine(res.Summary)
		}
		if words != "" {
			res.Failed += ": " + words
		}
	}
	return res, err
}
