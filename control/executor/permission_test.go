package executor

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/lease"
)

// The policies pick by kind, once where the agent offers it (Gemini CLI
// offers "always" first, and refuses it in a folder it does not trust),
// never the first option blindly; with no option of the kind wanted the
// request is cancelled, and the record says why.
func TestPermissionPolicies(t *testing.T) {
	opts := []agent.PermissionOption{
		{OptionID: "no", Name: "No", Kind: "reject_once"},
		{OptionID: "always", Name: "Always", Kind: "allow_always"},
		{OptionID: "yes", Name: "Yes", Kind: "allow_once"},
	}
	onlyReject := opts[:1]
	noOnce := []agent.PermissionOption{{OptionID: "no", Kind: "reject_always"}, {OptionID: "always", Kind: "allow_always"}}
	tests := []struct {
		name, policy string
		options      []agent.PermissionOption
		want         agent.Decision
	}{
		{name: "auto allows once", policy: PermissionAuto, options: opts, want: agent.Decision{OptionID: "yes", By: DecidedByPolicyAuto}},
		{name: "auto without a once option takes the first allow", policy: PermissionAuto, options: noOnce, want: agent.Decision{OptionID: "always", By: DecidedByPolicyAuto}},
		{name: "deny without a once option takes the first reject", policy: PermissionDeny, options: noOnce, want: agent.Decision{OptionID: "no", By: DecidedByPolicyDeny}},
		{name: "deny takes the first reject", policy: PermissionDeny, options: opts, want: agent.Decision{OptionID: "no", By: DecidedByPolicyDeny}},
		{name: "auto without an allow option", policy: PermissionAuto, options: onlyReject, want: agent.Decision{By: DecidedByPolicyAuto + ": no matching option"}},
		{name: "forward times out", policy: PermissionForward, options: opts, want: agent.Decision{By: DecidedByTimeout}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPolicyExecutor(t, func(o *Options) {
				o.Permission, o.PermissionTimeout = tt.policy, 50*time.Millisecond
			})
			tk := &task{asks: map[string]*ask{}}
			got := e.decide(context.Background(), "dlg_perm", tk, agent.PermissionRequest{ID: "perm-1", Title: "x", Options: tt.options})
			if got != tt.want {
				t.Fatalf("decision %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A forwarded request takes one valid answer, once.
func TestForwardedAnswer(t *testing.T) {
	e := newPolicyExecutor(t, func(o *Options) { o.Permission = PermissionForward })
	tk := &task{asks: map[string]*ask{}}
	e.mu.Lock()
	e.tasks["dlg_fwd"] = tk
	e.mu.Unlock()
	decided := make(chan agent.Decision, 1)
	go func() {
		decided <- e.decide(context.Background(), "dlg_fwd", tk, agent.PermissionRequest{ID: "perm-1",
			Options: []agent.PermissionOption{{OptionID: "yes", Kind: "allow_once"}, {OptionID: "no", Kind: "reject_once"}}})
	}()
	for deadline := time.Now().Add(5 * time.Second); ; {
		e.mu.Lock()
		n := len(tk.asks)
		e.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request was never pending")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.answer("dlg_fwd", "perm-1", "maybe"); err == nil || errors.Is(err, errNoSuchAsk) {
		t.Fatalf("an option not offered: %v", err)
	}
	if err := e.answer("dlg_fwd", "perm-9", "yes"); !errors.Is(err, errNoSuchAsk) {
		t.Fatalf("an unknown request: %v", err)
	}
	if err := e.answer("dlg_fwd", "perm-1", "no"); err != nil {
		t.Fatal(err)
	}
	if err := e.answer("dlg_fwd", "perm-1", "yes"); !errors.Is(err, errNoSuchAsk) {
		t.Fatalf("a second answer: %v", err)
	}
	if d := <-decided; d != (agent.Decision{OptionID: "no", By: DecidedByDelegator}) {
		t.Fatalf("decision %+v", d)
	}
	e.mu.Lock()
	delete(e.tasks, "dlg_fwd")
	e.mu.Unlock()
}

// newPolicyExecutor is an Executor that is not run: its permission
// policy is called directly.
func newPolicyExecutor(t *testing.T, mod func(*Options)) *Executor {
	t.Helper()
	dir := t.TempDir()
	store, err := lease.Open(filepath.Join(dir, "executor.db"), lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	opts := Options{WorkRoot: filepath.Join(dir, "work"), AgentCommand: "true", Store: store, StateDir: dir,
		Transports: []control.ExecutorTransport{&ArchiveExecutor{}}, Logger: slog.New(slog.DiscardHandler)}
	mod(&opts)
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
