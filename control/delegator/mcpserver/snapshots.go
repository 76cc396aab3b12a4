package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// Reviewer is what the snapshot tools need of the delegator: staged
// results to list, apply and discard, and orphaned delegations to take
// back. A Delegator that is not one has no snapshot tools.
type Reviewer interface {
	// ResultFiles is the changed files of delegation id's staged result
	// (its snapshot snap; "" for the recommended one).
	ResultFiles(id, snap string) ([]delegator.ChangedFile, error)
	ApplyResult(ctx context.Context, id, snap, branch string, allowGitControl bool) (*delegator.Applied, error)
	DiscardResult(id, snap string) error
	// Recover re-attaches delegation id, orphaned by a process that
	// ended (a restarted MCP server), and returns it as it stands.
	Recover(ctx context.Context, id string) (*lease.Delegation, string, error)
	// CompareGroup is an attempts group's members side by side;
	// DiscardAttemptsBut discards the staged results of keep's group but
	// keep's (delegator.Delegator's).
	CompareGroup(group string) ([]delegator.Attempt, error)
	DiscardAttemptsBut(keep string) ([]string, error)
}

// addSnapshotTools registers the reference's snapshot tools, with its
// names and parameters: delegate_snapshots, delegate_apply_snapshot,
// delegate_discard_snapshot and delegate_recover.
func (s *server) addSnapshotTools(srv *mcp.Server) error {
	if s.review == nil {
		return nil
	}
	return errors.Join(
		addTool(srv, &mcp.Tool{
			Name:        "delegate_snapshots",
			Annotations: readOnly(false),
			Title:       "A delegation's staged results",
			Description: "The results a delegation made with snapshot_mode: staged keeps for review (nothing of them is in the workspace yet): " +
				"each snapshot's id, summary, status (pending, applied, discarded), whether the executor recommends it, its size, " +
				"and the files it changes (A added, M modified, D deleted, with line counts). Then delegate_apply_snapshot or delegate_discard_snapshot.",
		}, s.snapshots, nil),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_apply_snapshot",
			Annotations: changes(true, false),
			Title:       "Apply a staged result",
			Description: "Apply a staged snapshot to the workspace, three-way against the base it was made from: files the user changed " +
				"meanwhile keep the user's version (the executor's is saved beside it, and named in conflicts). Only after the delegation ended.",
		}, s.applySnapshot, nil),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_compare",
			Annotations: readOnly(false),
			Title:       "Compare attempts",
			Description: "The attempts of a group (delegate with peers) side by side: each one's delegation_id, executor, state, " +
				"files and lines changed, time and summary. Then delegate_apply_snapshot with the chosen delegation_id (the others are discarded).",
		}, s.compare, nil),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_discard_snapshot",
			Annotations: changes(true, true),
			Title:       "Discard a staged result",
			Description: "Drop a staged snapshot without applying it: the workspace stays as it is, and the snapshot cannot be applied afterwards.",
		}, s.discardSnapshot, nil),
		addTool(srv, &mcp.Tool{
			Name:        "delegate_recover",
			Annotations: changes(false, true),
			Title:       "Re-attach to a delegation",
			Description: "After this MCP server restarted: take back a delegation the previous one followed, so that its events are " +
				"followed and its result applied (or staged) again; a delegation that ended meanwhile is reported as it ended.",
		}, s.recoverDelegation, nil),
	)
}

type snapshotsArgs struct {
	DelegationID string `json:"delegation_id" jsonschema:"Delegation ID to list snapshots for"`
}

// SnapshotsResult is delegate_snapshots' result.
type SnapshotsResult struct {
	DelegationID string     `json:"delegation_id,omitempty"`
	SnapshotMode string     `json:"snapshot_mode,omitempty"`
	State        string     `json:"state,omitempty" jsonschema:"the staged result's: pending, applied, discarded or expired"`
	Snapshots    []Snapshot `json:"snapshots"`
	Notes        []string   `json:"notes,omitempty"`
	Error        *Failure   `json:"error,omitempty"`
}

// Snapshot is one staged result.
type Snapshot struct {
	ID          string   `json:"id"`
	Summary     string   `json:"summary,omitempty"`
	Highlights  []string `json:"highlights,omitempty"`
	Status      string   `json:"status" jsonschema:"pending, applied or discarded"`
	Recommended bool     `json:"recommended,omitempty"`
	Bytes       int64    `json:"total_bytes"`
	FileCount   int      `json:"file_count" jsonschema:"files it changes"`
	Files       []string `json:"changed_files,omitempty" jsonschema:"a line per file: A added, M modified, D deleted, T type changed; +added -removed lines or its sizes"`
	CreatedAt   string   `json:"created_at,omitempty"`
}

func (r SnapshotsResult) failed() bool { return r.Error != nil }
func (SnapshotsResult) refused(f *Failure) SnapshotsResult {
	return SnapshotsResult{Error: f, Snapshots: []Snapshot{}}
}

func (r SnapshotsResult) text() string {
	if r.Error != nil {
		return r.Error.text()
	}
	var b strings.Builder
	if len(r.Snapshots) == 0 {
		fmt.Fprintf(&b, "No snapshots for delegation %s\n", r.DelegationID)
	} else {
		fmt.Fprintf(&b, "Snapshots for %s (staged result %s):\n", r.DelegationID, r.State)
	}
	for _, s := range r.Snapshots {
		rec := ""
		if s.Recommended {
			rec = " (recommended)"
		}
		fmt.Fprintf(&b, "- %s: %s%s\n  Status: %s [%d files, %d bytes]\n", s.ID, s.Summary, rec, s.Status, s.FileCount, s.Bytes)
		for _, f := range s.Files {
			fmt.Fprintf(&b, "    %s\n", f)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

func (s *server) snapshots(_ context.Context, _ *mcp.CallToolRequest, in snapshotsArgs) (SnapshotsResult, error) {
	d, err := s.find(in.DelegationID)
	if err != nil {
		return SnapshotsResult{}, err
	}
	out := SnapshotsResult{DelegationID: d.ID, SnapshotMode: d.SnapshotMode, Snapshots: []Snapshot{}}
	if out.SnapshotMode == "" {
		out.SnapshotMode = lease.SnapshotAuto
	}
	st := d.Staged
	if st == nil {
		out.Notes = append(out.Notes, "its snapshot_mode is "+out.SnapshotMode+": nothing is kept for review")
		return out, nil
	}
	out.State = st.State
	snaps := st.Snapshots
	if len(snaps) == 0 && d.Transport == control.TransportSSHFS && !d.State.Terminal() {
		// A live mount's result grows in its staging area as the agent works.
		snaps = []lease.StagedSnapshot{{ID: lease.LiveSnapshot, Summary: "the agent's changes so far (it still works)", Status: lease.StagedPending}}
	}
	for _, sn := range snaps {
		v := Snapshot{ID: sn.ID, Summary: sn.Summary, Highlights: sn.Highlights, Status: sn.Status, Recommended: sn.Recommended,
			Bytes: sn.Bytes, CreatedAt: stamp(sn.At)}
		if sn.Status == lease.StagedPending && st.State == lease.StagedPending {
			files, err := s.review.ResultFiles(d.ID, sn.ID)
			if err != nil {
				return SnapshotsResult{}, err
			}
			v.FileCount = len(files)
			for _, f := range files {
				v.Files = append(v.Files, f.Line())
			}
		}
		out.Snapshots = append(out.Snapshots, v)
	}
	return out, nil
}

type snapshotArgs struct {
	DelegationID string `json:"delegation_id" jsonschema:"Delegation ID"`
	SnapshotID   string `json:"snapshot_id" jsonschema:"Snapshot ID (delegate_snapshots lists them)"`
}

// ApplyResult is delegate_apply_snapshot's result.
type ApplyResult struct {
	DelegationID      string   `json:"delegation_id,omitempty"`
	SnapshotID        string   `json:"snapshot_id,omitempty"`
	Created           []string `json:"created,omitempty"`
	Modified          []string `json:"modified,omitempty"`
	Deleted           []string `json:"deleted,omitempty"`
	Conflicts         []string `json:"conflicts,omitempty" jsonschema:"files the user changed meanwhile: the user's version was kept and the executor's saved beside it"`
	Error             *Failure `json:"error,omitempty"`
	DiscardedAttempts []string `json:"discarded_attempts,omitempty" jsonschema:"of an attempt: the group's others, discarded"`
}

func (r ApplyResult) failed() bool                 { return r.Error != nil }
func (ApplyResult) refused(f *Failure) ApplyResult { return ApplyResult{Error: f} }

func (r ApplyResult) text() string {
	if r.Error != nil {
		return r.Error.text()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Snapshot %s of %s applied: %d added, %d modified, %d deleted\n", r.SnapshotID, r.DelegationID,
		len(r.Created), len(r.Modified), len(r.Deleted))
	if len(r.Conflicts) > 0 {
		fmt.Fprintf(&b, "conflicts (the user's versions kept):\n%s\n", indent(strings.Join(r.Conflicts, "\n")))
	}
	return b.String()
}

func (s *server) applySnapshot(ctx context.Context, _ *mcp.CallToolRequest, in snapshotArgs) (ApplyResult, error) {
	d, err := s.find(in.DelegationID)
	if err != nil {
		return ApplyResult{}, err
	}
	out, err := s.review.ApplyResult(ctx, d.ID, in.SnapshotID, "", s.opts.AllowGitControl)
	if err != nil {
		return ApplyResult{}, err
	}
	r := ApplyResult{DelegationID: d.ID, SnapshotID: out.Snapshot}
	if rep := out.Report; rep != nil {
		r.Created, r.Modified, r.Deleted, r.Conflicts = rep.Created, rep.Modified, rep.Deleted, rep.Conflicts
	}
	if d.Group != "" { // an attempt chosen: the others go
		if r.DiscardedAttempts, err = s.review.DiscardAttemptsBut(d.ID); err != nil {
			s.log.Warn("discard the attempts not chosen", "group", d.Group, "err", err)
		}
	}
	return r, nil
}

type compareArgs struct {
	Group string `json:"group" jsonschema:"the attempts group (grp-…), as delegate with peers returned it"`
}

// Comparison is delegate_compare's result.
type Comparison struct {
	Group    string              `json:"group,omitempty"`
	Attempts []delegator.Attempt `json:"attempts,omitempty"`
	Error    *Failure            `json:"error,omitempty"`
}

func (r Comparison) failed() bool                { return r.Error != nil }
func (Comparison) refused(f *Failure) Comparison { return Comparison{Error: f} }

func (r Comparison) text() string {
	if r.Error != nil {
		return r.Error.text()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Attempts of %s:\n", r.Group)
	for _, a := range r.Attempts {
		fmt.Fprintf(&b, "- %s on %s: %s, %d file(s) +%d -%d, %s", a.ID, a.Executor, a.State, a.Files, a.Added, a.Removed, a.Took)
		if a.Summary != "" {
			fmt.Fprintf(&b, ": %s", a.Summary)
		}
		if a.Result != "" {
			fmt.Fprintf(&b, " (%s)", a.Result)
		}
		b.WriteString("\n")
	}
	b.WriteString("Apply one with delegate_apply_snapshot (delegation_id): the others are discarded.\n")
	return b.String()
}

func (s *server) compare(_ context.Context, _ *mcp.CallToolRequest, in compareArgs) (Comparison, error) {
	attempts, err := s.review.CompareGroup(in.Group)
	if err != nil {
		return Comparison{}, err
	}
	return Comparison{Group: in.Group, Attempts: attempts}, nil
}

// DiscardResult is delegate_discard_snapshot's result.
type DiscardResult struct {
	DelegationID string   `json:"delegation_id,omitempty"`
	SnapshotID   string   `json:"snapshot_id,omitempty"`
	Discarded    bool     `json:"discarded"`
	Error        *Failure `json:"error,omitempty"`
}

func (r DiscardResult) failed() bool                   { return r.Error != nil }
func (DiscardResult) refused(f *Failure) DiscardResult { return DiscardResult{Error: f} }

func (r DiscardResult) text() string {
	if r.Error != nil {
		return r.Error.text()
	}
	return fmt.Sprintf("Snapshot %s of %s discarded: the workspace is as it was\n", r.SnapshotID, r.DelegationID)
}

func (s *server) discardSnapshot(_ context.Context, _ *mcp.CallToolRequest, in snapshotArgs) (DiscardResult, error) {
	d, err := s.find(in.DelegationID)
	if err != nil {
		return DiscardResult{}, err
	}
	if err := s.review.DiscardResult(d.ID, in.SnapshotID); err != nil {
		return DiscardResult{}, err
	}
	return DiscardResult{DelegationID: d.ID, SnapshotID: in.SnapshotID, Discarded: true}, nil
}

type recoverArgs struct {
	DelegationID string `json:"delegation_id" jsonschema:"Delegation ID to recover"`
	PeerURL      string `json:"peer_url,omitempty" jsonschema:"URL of the Executor that ran the task (optional: the delegation's record has it; if given, it must be that one)"`
}

func (s *server) recoverDelegation(ctx context.Context, _ *mcp.CallToolRequest, in recoverArgs) (Outcome, error) {
	d, err := s.find(in.DelegationID)
	if err != nil {
		return Outcome{}, err
	}
	if in.PeerURL != "" && strings.TrimSuffix(in.PeerURL, "/") != strings.TrimSuffix(d.Peer, "/") {
		return Outcome{}, control.Errorf(control.CodeUsage, "delegation %s ran on %s, not %s", d.ID, d.Peer, in.PeerURL).
			WithHint("leave peer_url out: the delegation's record names its executor")
	}
	d, note, err := s.review.Recover(ctx, d.ID)
	if err != nil {
		return Outcome{}, err
	}
	o := outcomeOf(d)
	if note != "" {
		o.Notes = append(o.Notes, note)
	}
	return o, nil
}
