//go:build linux

package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/lendarchive"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/lease"
)

// inProcess is the Delegator of a process without a daemon: a real
// delegator.Delegator on a real store, each delegation followed on its own
// goroutine.
type inProcess struct {
	dlg   *delegator.Delegator
	store *lease.Store
	ctx   context.Context
	wg    sync.WaitGroup
}

func (p *inProcess) Start(_ context.Context, req delegator.ExportRequest) (string, error) {
	d, err := p.dlg.Create(req)
	if err != nil {
		return "", err
	}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.dlg.Run(p.ctx, d.ID) }()
	return d.ID, nil
}

func (p *inProcess) Cancel(ctx context.Context, id string) error {
	_, err := p.dlg.Cancel(ctx, id)
	return err
}

func (p *inProcess) Permit(ctx context.Context, id, req, opt, answerer string) error {
	return p.dlg.Permit(ctx, id, req, opt, answerer)
}

func (p *inProcess) Say(id, prompt, by string) (int, error) { return p.dlg.Say(id, prompt, by) }
func (p *inProcess) EndSession(id string) error             { return p.dlg.EndSession(id) }

// The snapshot tools (Reviewer).
func (p *inProcess) ResultFiles(id, snap string) ([]delegator.ChangedFile, error) {
	return p.dlg.ResultFiles(id, snap)
}
func (p *inProcess) ApplyResult(ctx context.Context, id, snap, branch string, allowGitControl bool) (*delegator.Applied, error) {
	return p.dlg.ApplyResult(ctx, id, snap, branch, allowGitControl)
}
func (p *inProcess) DiscardResult(id, snap string) error { return p.dlg.DiscardResult(id, snap) }
func (p *inProcess) Recover(ctx context.Context, id string) (*lease.Delegation, string, error) {
	d, err := p.store.Delegation(id)
	return d, "", err
}
func (p *inProcess) CompareGroup(group string) ([]delegator.Attempt, error) {
	return p.dlg.CompareGroup(group)
}
func (p *inProcess) DiscardAttemptsBut(keep string) ([]string, error) {
	return p.dlg.DiscardAttemptsBut(keep)
}

func (p *inProcess) Find(id string) (*lease.Delegation, error) { return p.store.FindDelegation(id) }
func (p *inProcess) List() ([]*lease.Delegation, error)        { return p.store.Delegations() }

// connect serves New(opts) to an in-memory MCP client. opts.Delegator, if
// nil, is an in-process one on a fresh store.
func connect(t *testing.T, opts Options, client ...*mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	opts.PlainHTTP = true // the tests' executors are plain httptest servers
	if opts.Delegator == nil {
		state := t.TempDir()
		store, err := lease.Open(filepath.Join(state, "delegator.db"), lease.Options{Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		dlg, err := delegator.New(delegator.Options{
			Store: store, StagedDir: filepath.Join(state, "staged"),
			Transports: map[string]control.DelegatorTransport{control.TransportArchive: &lendarchive.Transport{
				Blobs: store, StagingDir: filepath.Join(state, "staging"), ResultDir: filepath.Join(state, "results")}},
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		p := &inProcess{dlg: dlg, store: store, ctx: ctx}
		t.Cleanup(func() { cancel(); p.wg.Wait(); store.Close() })
		opts.Delegator = p
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	var copts *mcp.ClientOptions
	if len(client) > 0 {
		copts = client[0]
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, copts).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

// call calls a tool and decodes its structured result into out.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", tool, err)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: structured content %s: %v", tool, raw, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func workspace(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "src", "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDelegateSyncRelativeWorkspace(t *testing.T) {
	peer := executortest.New(t, `echo working; echo "fixed" > src/a.txt; echo "all fixed" > "$AWCP_SUMMARY_FILE"`, nil).URL()
	cs := connect(t, Options{Peers: []Peer{{URL: peer}}, Transport: control.TransportArchive})
	ws := workspace(t)

	var o Outcome
	res := call(t, cs, "delegate", map[string]any{
		"description": "fix a", "prompt": "fix src/a.txt",
		"cwd": filepath.Dir(ws), "workspace_dir": filepath.Base(ws), // relative, against cwd
	}, &o)
	if res.IsError || o.State != "completed" || o.Summary != "all fixed" {
		t.Fatalf("delegate: isError %v, %+v\n%s", res.IsError, o, text(res))
	}
	if len(o.Highlights) != 1 || o.Highlights[0] != "src/a.txt" || o.WorkspaceDir != ws || o.PeerURL != peer {
		t.Fatalf("outcome %+v", o)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "src/a.txt")); string(b) != "fixed\n" {
		t.Fatalf("result not applied: %q", b)
	}
	if a := o.Audit; a == nil || !a.FromDiff || a.FilesWritten != 1 || a.Created != 0 || a.Deleted != 0 {
		t.Errorf("the outcome's audit summary is %+v, want the archive's: 1 file written", a)
	}
	if !strings.Contains(text(res), "all fixed") {
		t.Errorf("text lacks the summary:\n%s", text(res))
	}
}

// Refused calls are tool errors with a spec code in the structured result
// — never protocol errors — and nothing is delegated.
func TestToolErrorsCarrySpecCodes(t *testing.T) {
	peer := executortest.New(t, `true`, nil).URL()
	cs := connect(t, Options{Peers: []Peer{{URL: peer}, {URL: peer + "/second"}}, Transport: control.TransportArchive})
	ws := workspace(t)
	tests := []struct {
		name, tool string
		args       map[string]any
		code       string
	}{
		{name: "missing workspace", tool: "delegate", code: control.CodeWorkspaceNotFound,
			args: map[string]any{"description": "d", "prompt": "p", "peer_url": peer, "workspace_dir": filepath.Join(ws, "nope")}},
		{name: "file as workspace", tool: "delegate", code: control.CodeWorkspaceInvalid,
			args: map[string]any{"description": "d", "prompt": "p", "peer_url": peer, "workspace_dir": filepath.Join(ws, "src/a.txt")}},
		{name: "no prompt", tool: "delegate", code: control.CodeUsage,
			args: map[string]any{"description": "d", "peer_url": peer, "workspace_dir": ws}},
		{name: "bad access mode", tool: "delegate", code: control.CodeUsage,
			args: map[string]any{"description": "d", "prompt": "p", "peer_url": peer, "workspace_dir": ws, "access_mode": "wx"}},
		{name: "an argument the tool does not take", tool: "delegate", code: control.CodeUsage,
			args: map[string]any{"description": "d", "prompt": "p", "peer_url": peer, "workspace_dir": ws, "transport": "archive"}},
		{name: "ttl of the wrong type", tool: "delegate", code: control.CodeUsage,
			args: map[string]any{"description": "d", "prompt": "p", "peer_url": peer, "workspace_dir": ws, "ttl_seconds": "soon"}},
		{name: "no peer among several", tool: "delegate", code: control.CodeUsage,
			args: map[string]any{"description": "d", "prompt": "p", "workspace_dir": ws}},
		// The caller's own mistakes are USAGE, never DECLINED: the
		// executor refused nothing. Nor is an executor that did not
		// answer: SETUP_FAILED.
		{name: "unreachable peer", tool: "delegate", code: control.CodeSetupFailed,
			args: map[string]any{"description": "d", "prompt": "p", "workspace_dir": ws, "peer_url": "http://127.0.0.1:1"}},
		{name: "unknown delegation", tool: "delegate_output", code: control.CodeNotFound,
			args: map[string]any{"delegation_id": "nope"}},
		{name: "cancel without arguments", tool: "delegate_cancel", code: control.CodeUsage, args: map[string]any{}},
		{name: "cancel of an unknown delegation", tool: "delegate_cancel", code: control.CodeNotFound,
			args: map[string]any{"delegation_id": "nope"}},
		{name: "status of an unknown delegation", tool: "delegate_status", code: control.CodeNotFound,
			args: map[string]any{"delegation_id": "nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out struct {
				Error *Failure `json:"error"`
			}
			res := call(t, cs, tt.tool, tt.args, &out)
			if !res.IsError || out.Error == nil || out.Error.Code != tt.code {
				t.Fatalf("want a tool error %s, got isError %v %+v\n%s", tt.code, res.IsError, out.Error, text(res))
			}
			if !strings.Contains(text(res), "error "+tt.code+":") {
				t.Errorf("text does not name the code:\n%s", text(res))
			}
		})
	}
	// The failed delegation to an unreachable peer is on record, ended.
	var st StatusResult
	call(t, cs, "delegate_status", nil, &st)
	if len(st.Delegations) != 1 || st.Delegations[0].State != "error" {
		t.Fatalf("status after refusals: %+v", st)
	}
}

func TestBackgroundOutputCancel(t *testing.T) {
	peer := executortest.New(t, `echo started; sleep 30`, nil).URL()
	cs := connect(t, Options{Peers: []Peer{{URL: peer}}, Transport: control.TransportArchive})
	ws := workspace(t)

	var o Outcome
	res := call(t, cs, "delegate", map[string]any{"description": "slow", "prompt": "take your time",
		"workspace_dir": ws, "background": true}, &o)
	if res.IsError || o.DelegationID == "" {
		t.Fatalf("background delegate: %+v\n%s", o, text(res))
	}
	id := o.DelegationID

	// Not ended within a short block: an answer, not an error.
	start := time.Now()
	res = call(t, cs, "delegate_output", map[string]any{"delegation_id": id[:8], "block": true, "timeout": 0.5}, &o)
	if res.IsError || o.State == "completed" || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("blocking output on a running task: %+v after %s\n%s", o, time.Since(start), text(res))
	}

	var cr CancelResult
	res = call(t, cs, "delegate_cancel", map[string]any{"delegation_id": id, "all": false}, &cr)
	if res.IsError || len(cr.Cancelled) != 1 || cr.Cancelled[0].State != "cancelled" {
		t.Fatalf("cancel: %+v\n%s", cr, text(res))
	}
	// A cancelled delegation's output is a tool error with CANCELLED.
	res = call(t, cs, "delegate_output", map[string]any{"delegation_id": id}, &o)
	if !res.IsError || o.Error == nil || o.Error.Code != control.CodeCancelled {
		t.Fatalf("output after cancel: %+v\n%s", o, text(res))
	}
	// all wins over a delegation_id, and with nothing live cancels nothing.
	cr = CancelResult{}
	res = call(t, cs, "delegate_cancel", map[string]any{"delegation_id": "whatever", "all": true}, &cr)
	if res.IsError || len(cr.Cancelled) != 0 {
		t.Fatalf("cancel all: %+v\n%s", cr, text(res))
	}
}

// The sync call ends with its client: a cancelled call cancels the
// delegation, as Ctrl-C does for `awcp-ctl export`.
func TestCancelledCallCancelsDelegation(t *testing.T) {
	peer := executortest.New(t, `sleep 30`, nil).URL()
	cs := connect(t, Options{Peers: []Peer{{URL: peer}}, Transport: control.TransportArchive})
	ws := workspace(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delegate",
			Arguments: map[string]any{"description": "d", "prompt": "p", "workspace_dir": ws}})
		errc <- err
	}()
	var id string
	for deadline := time.Now().Add(10 * time.Second); id == ""; {
		var st StatusResult
		call(t, cs, "delegate_status", nil, &st)
		if len(st.Delegations) == 1 && st.Delegations[0].State == "running" {
			id = st.Delegations[0].DelegationID
		}
		if time.Now().After(deadline) {
			t.Fatalf("never running: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		var st StatusResult
		call(t, cs, "delegate_status", map[string]any{"delegation_id": id}, &st)
		if st.Delegations[0].State == "cancelled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delegation not cancelled with its call: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDiscoveryDescribesPeers(t *testing.T) {
	peer := executortest.New(t, `true`, func(o *executor.Options) {
		o.Name, o.Description = "gpu-box", "trains models\nand runs CUDA"
		o.Skills = []control.CardSkill{{ID: "cuda", Name: "cuda", Description: "CUDA kernels"}}
	}).URL()
	peers := Discover(context.Background(), nil, []string{peer, "http://127.0.0.1:1"}, "", true, nil, 2*time.Second)
	if peers[0].Err != nil || peers[0].Name() != "gpu-box" || peers[1].Err == nil {
		t.Fatalf("discovery: %+v", peers)
	}
	cs := connect(t, Options{Peers: peers})
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var desc string
	names := map[string]*mcp.Tool{}
	for _, tool := range tools.Tools {
		names[tool.Name] = tool
	}
	for _, want := range []string{"delegate", "delegate_output", "delegate_cancel", "delegate_status"} {
		if names[want] == nil {
			t.Fatalf("tool %s missing; have %v", want, names)
		}
	}
	desc = names["delegate"].Description
	for _, want := range []string{peer + " — gpu-box: trains models and runs CUDA", "skill cuda: CUDA kernels",
		"AWCP: yes; transports [archive]", "http://127.0.0.1:1 — offline at start"} {
		if !strings.Contains(desc, want) {
			t.Errorf("delegate's description lacks %q:\n%s", want, desc)
		}
	}
	// A peer is also chosen by its card's name.
	s := &server{opts: Options{Peers: peers}}
	if p, err := s.pickPeer(context.Background(), "gpu-box", control.AccessRW); err != nil || p.URL != peer {
		t.Errorf("pickPeer by name: %q %v", p.URL, err)
	}
}

// askingWorker is an agent that asks one permission and reports the answer.
type askingWorker struct{}

func (askingWorker) Run(ctx context.Context, t agent.Task, h agent.Hooks) (*agent.Result, error) {
	d := h.Permission(ctx, agent.PermissionRequest{ID: "perm-1", Title: "Delete build/", Options: []agent.PermissionOption{
		{OptionID: "reject", Name: "Reject", Kind: "reject_once"}, {OptionID: "allow", Name: "Allow", Kind: "allow_once"}}})
	return &agent.Result{Summary: "chose " + d.OptionID + " (" + d.By + ")"}, nil
}

// An executor that forwards permission requests: the model sees the
// pending one in delegate_output and answers with delegate_permission.
func TestDelegatePermission(t *testing.T) {
	peer := executortest.New(t, "", func(o *executor.Options) {
		o.Worker, o.Permission = askingWorker{}, executor.PermissionForward
	}).URL()
	cs := connect(t, Options{Peers: []Peer{{URL: peer}}, Transport: control.TransportArchive})
	var o Outcome
	call(t, cs, "delegate", map[string]any{"description": "d", "prompt": "p", "workspace_dir": workspace(t), "background": true}, &o)
	id := o.DelegationID
	for deadline := time.Now().Add(10 * time.Second); ; {
		o = Outcome{}
		res := call(t, cs, "delegate_output", map[string]any{"delegation_id": id}, &o)
		if len(o.Permissions) == 1 && o.Permissions[0].Outcome == "pending" {
			if !strings.Contains(text(res), "permission perm-1 PENDING: Delete build/; options: reject (reject_once), allow (allow_once)") {
				t.Fatalf("pending request not shown:\n%s", text(res))
			}
			if o.Channel == nil || o.Channel.State != "waiting" || !strings.Contains(text(res), "executor: waiting since ") {
				t.Fatalf("the channel of a delegation waiting for a decision: %+v\n%s", o.Channel, text(res))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pending permission: %+v", o)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var refused Outcome
	res := call(t, cs, "delegate_permission", map[string]any{"delegation_id": id, "request_id": "perm-1", "option_id": "maybe"}, &refused)
	if !res.IsError || refused.Error == nil || refused.Error.Code != control.CodeDeclined {
		t.Fatalf("an option not offered: %+v\n%s", refused, text(res))
	}
	res = call(t, cs, "delegate_permission", map[string]any{"delegation_id": id, "request_id": "perm-1", "option_id": "allow"}, &o)
	if res.IsError {
		t.Fatalf("delegate_permission: %s", text(res))
	}
	o = Outcome{}
	call(t, cs, "delegate_output", map[string]any{"delegation_id": id, "block": true, "timeout": 10}, &o)
	if o.State != "completed" || o.Summary != "chose allow (delegator)" {
		t.Fatalf("outcome %+v", o)
	}
	if len(o.Permissions) != 1 || o.Permissions[0].OptionID != "allow" || o.Permissions[0].DecidedBy != "delegator" ||
		o.Permissions[0].How != "user" || o.Permissions[0].Answerer != "MCP client test" || !strings.HasPrefix(o.Permissions[0].AskedBy, "the agent on ") {
		t.Fatalf("permission record %+v", o.Permissions)
	}
}

// delegate with peers runs the task as attempts, one per executor, each
// staged: the call returns the group at once, the workspace untouched;
// delegate_compare lists them with their changes; delegate_apply_snapshot
// of one applies it and discards the others.
func TestAttemptsOverMCP(t *testing.T) {
	p1 := executortest.New(t, `echo "one" > src/a.txt; echo "made it one" > "$AWCP_SUMMARY_FILE"`, nil).URL()
	p2 := executortest.New(t, `echo "two" > src/a.txt; echo "made it two" > "$AWCP_SUMMARY_FILE"`, nil).URL()
	var pmu sync.Mutex
	var progress []string
	cs := connect(t, Options{Peers: []Peer{{URL: p1}, {URL: p2}}, Transport: control.TransportArchive},
		&mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			pmu.Lock()
			progress = append(progress, r.Params.Message)
			pmu.Unlock()
		}})
	ws := workspace(t)
	params := &mcp.CallToolParams{Name: "delegate", Arguments: map[string]any{"prompt": "change a", "workspace_dir": ws, "peers": []string{p1, p2}}}
	params.SetProgressToken("attempts")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	var o Outcome
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &o)
	if res.IsError || o.Group == "" || len(o.Attempts) != 2 || o.State != "ended" {
		t.Fatalf("delegate with peers: %+v\n%s", o, text(res))
	}
	// Notifications are sent before the answer, but a client may hand
	// them on after it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pmu.Lock()
		all := strings.Join(progress, "\n")
		pmu.Unlock()
		if strings.Contains(all, "1 of 2 ("+o.Attempts[0]+"): completed") && strings.Contains(all, "2 of 2 ("+o.Attempts[1]+"): completed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group's progress notifications:\n%s", all)
		}
	}
	for _, id := range o.Attempts {
		var out Outcome
		call(t, cs, "delegate_output", map[string]any{"delegation_id": id, "block": true, "timeout": 30}, &out)
		if out.State != "completed" {
			t.Fatalf("attempt %s: %+v", id, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "src", "a.txt")); string(b) != "a\n" {
		t.Fatalf("the workspace changed before an attempt was applied: %q", b)
	}
	var cmp Comparison
	res = call(t, cs, "delegate_compare", map[string]any{"group": o.Group}, &cmp)
	if res.IsError || len(cmp.Attempts) != 2 {
		t.Fatalf("delegate_compare: %+v\n%s", cmp, text(res))
	}
	var chosen string
	for _, a := range cmp.Attempts {
		if a.Files != 1 || a.Added != 1 || a.Removed != 1 {
			t.Errorf("attempt %+v", a)
		}
		if a.Summary == "made it two" {
			chosen = a.ID
		}
	}
	var applied ApplyResult
	res = call(t, cs, "delegate_apply_snapshot", map[string]any{"delegation_id": chosen}, &applied)
	if res.IsError || len(applied.DiscardedAttempts) != 1 {
		t.Fatalf("delegate_apply_snapshot: %+v\n%s", applied, text(res))
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "src", "a.txt")); string(b) != "two\n" {
		t.Errorf("src/a.txt after applying the second attempt: %q", b)
	}
}

// delegate with scopes splits the task: both executors run at once on the
// whole workspace, each result lands only inside its scope (what an agent
// changed outside it is left out of the archive's result), and each
// agent's prompt names its scope.
func TestScopesOverMCP(t *testing.T) {
	// Each agent writes its own scope and the other's.
	p1 := executortest.New(t, `mkdir -p one two; echo "$AWCP_PROMPT" > one/prompt.txt; echo x > two/intruded.txt`, nil).URL()
	p2 := executortest.New(t, `mkdir -p one two; echo "$AWCP_PROMPT" > two/prompt.txt; echo x > one/intruded.txt`, nil).URL()
	cs := connect(t, Options{Peers: []Peer{{URL: p1}, {URL: p2}}, Transport: control.TransportArchive})
	ws := workspace(t)
	for _, d := range []string{"one", "two"} {
		os.MkdirAll(filepath.Join(ws, d), 0o755)
	}
	var o Outcome
	res := call(t, cs, "delegate", map[string]any{"prompt": "split", "workspace_dir": ws, "scopes": []map[string]any{
		{"path": "one", "peer": p1, "prompt": "the first part"}, {"path": "two", "peer": p2}}}, &o)
	if res.IsError || len(o.Attempts) != 2 {
		t.Fatalf("delegate with scopes: %+v\n%s", o, text(res))
	}
	for _, id := range o.Attempts {
		var out Outcome
		call(t, cs, "delegate_output", map[string]any{"delegation_id": id, "block": true, "timeout": 30}, &out)
		if out.State != "completed" {
			t.Fatalf("scope %s: %+v", id, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "one", "prompt.txt")); !strings.Contains(string(b), "the first part") || !strings.Contains(string(b), "under one/") {
		t.Errorf("one/prompt.txt: %q", b)
	}
	if _, err := os.Stat(filepath.Join(ws, "two", "prompt.txt")); err != nil {
		t.Errorf("the second scope's result: %v", err)
	}
	for _, p := range []string{"one/intruded.txt", "two/intruded.txt"} {
		if _, err := os.Stat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s landed: outside its writer's scope", p)
		}
	}
}
