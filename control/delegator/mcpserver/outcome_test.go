//go:build linux

package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/awcp/awcp/control"
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

// Every tool says what it does to the host deciding whether to ask the
// user: the readers read only, apply, cancel and discard are destructive.
func TestToolsAreAnnotated(t *testing.T) {
	cs := connect(t, Options{})
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := map[string]bool{"delegate_output": true, "delegate_status": true, "peers": true, "delegate_snapshots": true, "delegate_compare": true}
	destructive := map[string]bool{"delegate_cancel": true, "delegate_apply_snapshot": true, "delegate_discard_snapshot": true, "delegate_close_session": true}
	for _, tool := range tools.Tools {
		a := tool.Annotations
		switch {
		case a == nil:
			t.Errorf("%s has no annotations", tool.Name)
		case a.ReadOnlyHint != readOnly[tool.Name]:
			t.Errorf("%s: readOnlyHint %v", tool.Name, a.ReadOnlyHint)
		case !a.ReadOnlyHint && (a.DestructiveHint == nil || *a.DestructiveHint != destructive[tool.Name]):
			t.Errorf("%s: destructiveHint %v", tool.Name, a.DestructiveHint)
		}
	}
}

// A delegation refused before START was never lent: its outcome does not
// say it was.
func TestRefusedIsNotLent(t *testing.T) {
	d := &lease.Delegation{Peer: "https://127.0.0.1:1"}
	d.ID, d.State = "d2", lease.Error
	d.Transitions = []lease.Transition{{To: lease.Invited}, {To: lease.Error}}
	d.Failure = &lease.Failure{Code: "DECLINED", Message: "no"}
	if text := outcomeOf(d).text(); !strings.Contains(text, "not lent to https://127.0.0.1:1") {
		t.Errorf("a refused delegation's outcome:\n%s", text)
	}
	d.Transitions = append(d.Transitions[:1], lease.Transition{To: lease.Started}, lease.Transition{To: lease.Error})
	if text := outcomeOf(d).text(); strings.Contains(text, "not lent") {
		t.Errorf("a started delegation's outcome:\n%s", text)
	}
	// Returned at once (background: true), on its way: not a failure.
	d.State, d.Failure, d.Transitions = lease.Invited, nil, []lease.Transition{{To: lease.Invited}}
	if text := outcomeOf(d).text(); strings.Contains(text, "not lent") || !strings.Contains(text, "being lent to https://127.0.0.1:1") {
		t.Errorf("a background delegation's first outcome:\n%s", text)
	}
}

// A pending permission's options come as a list of objects a model picks
// an option_id from, not one string to take apart.
func TestPermissionOptionsAreAList(t *testing.T) {
	d := &lease.Delegation{Peer: "https://127.0.0.1:1"}
	d.ID, d.State = "d3", lease.Running
	d.Permissions = []lease.Permission{{RequestID: "perm-1", Title: "Edit main.go", Outcome: control.PermissionPending,
		Options: []lease.PermissionOption{{OptionID: "allow", Name: "Allow", Kind: "allow_once"}, {OptionID: "reject", Name: "Reject", Kind: "reject_once"}}}}
	raw, _ := json.Marshal(outcomeOf(d))
	if !strings.Contains(string(raw), `"options":[{"option_id":"allow","name":"Allow","kind":"allow_once"},{"option_id":"reject","name":"Reject","kind":"reject_once"}]`) {
		t.Errorf("the structured outcome: %s", raw)
	}
	if text := outcomeOf(d).text(); !strings.Contains(text, "options: allow (allow_once), reject (reject_once)") {
		t.Errorf("the text outcome:\n%s", text)
	}
}

// The delegate tool's description lists what each executor's card offers
// an MCP caller: not the A2A face's own skill (how an A2A client sends a
// ZIP), and whether it takes sessions.
func TestPeersDescribedForAnMCPCaller(t *testing.T) {
	ext := control.CardExtension{URI: control.ExtensionURI, Params: map[string]any{"transports": []string{"sshfs"}, "sessions": []string{"acp"}}}
	card := &control.AgentCard{Name: "box", Extensions: []control.CardExtension{ext},
		Capabilities: map[string]any{"extensions": []control.CardExtension{ext}},
		Skills: []control.CardSkill{{ID: control.CapabilityDelegation, Name: "Work on a workspace", Description: "Send the task as text and the directory as a ZIP file part"},
			{ID: "cuda", Name: "cuda", Description: "CUDA kernels"}}}
	desc := describePeers([]Peer{{URL: "https://box:10200", Card: card}}, false)
	if strings.Contains(desc, "ZIP") || !strings.Contains(desc, "skill cuda: CUDA kernels") || !strings.Contains(desc, "sessions [acp]") {
		t.Errorf("delegate's description of its peer:\n%s", desc)
	}
}
