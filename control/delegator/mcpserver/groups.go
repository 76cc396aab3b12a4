package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// Groups: one task on several executors at once — attempts (peers), each
// staged, compared and one applied; or scopes, each writing its own part
// of the workspace.

// Scope is one part of a task split among executors.
type Scope struct {
	Path   string `json:"path" jsonschema:"the directory, relative to the workspace, this executor may change"`
	Peer   string `json:"peer" jsonschema:"the executor, as peer_url takes it"`
	Prompt string `json:"prompt,omitempty" jsonschema:"this scope's own task, after the common prompt"`
}

// member is one delegation of a group: its executor, and for a scope its
// path and its own prompt.
type member struct{ peer, scope, prompt string }

// delegateAttempts starts the task on each of in.Peers at once, as the
// attempts of one group, each staged.
func (s *server) delegateAttempts(ctx context.Context, req *mcp.CallToolRequest, in delegateArgs, access string) (Outcome, error) {
	switch {
	case in.Session || in.SessionID != "":
		return Outcome{}, control.Errorf(control.CodeUsage, "a session is held with one executor: give one peer")
	case in.SnapshotMode != "" && in.SnapshotMode != lease.SnapshotStaged:
		return Outcome{}, control.Errorf(control.CodeUsage, "attempts are each kept for review: snapshot_mode must be staged, not %s", in.SnapshotMode)
	case s.review == nil:
		return Outcome{}, control.Errorf(control.CodeDeclined, "this server has no snapshot tools to compare and apply attempts with")
	}
	in.SnapshotMode = lease.SnapshotStaged
	members := make([]member, len(in.Peers))
	for i, p := range in.Peers {
		members[i] = member{peer: p}
	}
	return s.startGroup(ctx, req, in, access, members, "delegate_compare with group shows them; "+
		"delegate_apply_snapshot with the chosen delegation_id applies it and discards the others; the workspace is untouched until then")
}

// delegateScopes starts one delegation per scope at once, each changing
// only its scope of the workspace.
func (s *server) delegateScopes(ctx context.Context, req *mcp.CallToolRequest, in delegateArgs, access string) (Outcome, error) {
	switch {
	case in.Session || in.SessionID != "" || len(in.Peers) > 0:
		return Outcome{}, control.Errorf(control.CodeUsage, "scopes split one task among executors: no session, no peers beside them")
	case in.SnapshotMode != "" && in.SnapshotMode != lease.SnapshotAuto:
		return Outcome{}, control.Errorf(control.CodeUsage, "scopes write in place, each in its own part of the workspace: snapshot_mode must be auto")
	}
	members := make([]member, len(in.Scopes))
	paths := make([]string, len(in.Scopes))
	for i, sc := range in.Scopes {
		members[i] = member{peer: sc.Peer, scope: sc.Path, prompt: sc.Prompt}
		paths[i] = sc.Path
	}
	dir, err := s.workspaceDir(in)
	if err != nil {
		return Outcome{}, err
	}
	if err := delegator.AdmitScopes(dir, paths); err != nil {
		return Outcome{}, err // all admitted before any starts
	}
	return s.startGroup(ctx, req, in, access, members, "delegate_output with each delegation_id shows it")
}

// startGroup starts members as one group, and unless in.Background
// waits for them all (waitGroup). next says what to do with the group.
func (s *server) startGroup(ctx context.Context, req *mcp.CallToolRequest, in delegateArgs, access string, members []member, next string) (Outcome, error) {
	o := Outcome{Group: delegator.NewGroup(), State: "running"}
	for _, m := range members {
		id, err := s.startMember(ctx, in, access, o.Group, m)
		if err != nil {
			o.Notes = append(o.Notes, fmt.Sprintf("%s on %s not started: %v", orDefault(m.scope, "the attempt"), m.peer, err))
			continue
		}
		o.Attempts = append(o.Attempts, id)
	}
	if len(o.Attempts) == 0 {
		return Outcome{}, control.Errorf(control.CodeDeclined, "none of the group started: %s", strings.Join(o.Notes, "; "))
	}
	o.Notes = append(o.Notes, fmt.Sprintf("%d at once, as group %s: %s", len(o.Attempts), o.Group, next))
	if !in.Background {
		o.State = s.waitGroup(ctx, req, o.Attempts)
	}
	return o, nil
}

// startMember starts one member of group.
func (s *server) startMember(ctx context.Context, in delegateArgs, access, group string, m member) (string, error) {
	peer, err := s.pickPeer(ctx, m.peer, access)
	if err != nil {
		return "", err
	}
	export, err := s.request(in, peer)
	if err != nil {
		return "", err
	}
	export.Group, export.Scope = group, m.scope
	if m.prompt != "" {
		export.Prompt = strings.TrimSpace(export.Prompt + "\n\n" + m.prompt)
	}
	return s.dlg.Start(ctx, export)
}

// waitGroup waits for a group's delegations to end (or SyncWait), each
// one's changes of state sent as progress notifications, and returns how
// the group stands: running, or ended.
func (s *server) waitGroup(ctx context.Context, req *mcp.CallToolRequest, ids []string) string {
	token := req.Params.GetProgressToken()
	seen := map[string]lease.State{}
	step := 0.0
	deadline := time.Now().Add(s.opts.SyncWait)
	for {
		ended := 0
		for i, id := range ids {
			d, err := s.dlg.Find(id)
			if err != nil {
				ended++
				continue
			}
			if d.State != seen[id] && token != nil && req.Session != nil {
				seen[id] = d.State
				step++
				msg := fmt.Sprintf("%d of %d (%s): %s", i+1, len(ids), id, d.State)
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: step, Message: msg}); err != nil {
					s.log.Debug("progress notification", "err", err)
				}
			}
			if d.State.Terminal() {
				ended++
			}
		}
		if ended == len(ids) || time.Now().After(deadline) {
			return map[bool]string{true: "ended", false: "running"}[ended == len(ids)]
		}
		select {
		case <-ctx.Done():
			return "running"
		case <-time.After(s.opts.Poll):
		}
	}
}
