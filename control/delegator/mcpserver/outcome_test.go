package mcpserver

import (
	"strings"
	"testing"

	"github.com/awcp/awcp/lease"
)

// A driven session whose agent failed (its turn answered with the
// agent's error, the delegation ended so) is a tool error, in the agent's
// words: not "awaiting" with an empty question. While its close is under
// way it does not await either.
func TestFailedSessionIsAnError(t *testing.T) {
	d := &lease.Delegation{SessionDriven: true,
		Turns: []lease.Turn{{N: 1, State: lease.TurnFailed, Error: "Authentication required"}}}
	d.ID, d.State = "d1", lease.Running
	d.SessionFailure = &lease.Failure{Code: "TASK_FAILED", Message: "turn 1 failed: Authentication required"}
	d.SessionClose = true
	if o := outcomeOf(d); o.State == StateAwaiting {
		t.Errorf("a failing session's close under way: state %s", o.State)
	}
	d.State = lease.Error
	d.Failure = d.SessionFailure
	o := outcomeOf(d)
	if !o.failed() || o.State != "error" || !strings.Contains(o.text(), "Authentication required") {
		t.Errorf("a failed session: failed %v, state %s:\n%s", o.failed(), o.State, o.text())
	}
}
