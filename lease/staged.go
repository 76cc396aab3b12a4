package lease

import "time"

// Snapshot modes: what becomes of a delegation's result (the reference's
// snapshot_mode). Auto applies it as it comes (an archive) or lets it be
// written in place (a live mount); staged keeps it for review; discard
// drops it.
const (
	SnapshotAuto    = "auto"
	SnapshotStaged  = "staged"
	SnapshotDiscard = "discard"
)

// Review states of a staged result, and of each of its snapshots.
const (
	StagedPending = "pending"
	StagedApplied = "applied"
	// StagedConflicted is applied but for conflicts: paths both sides
	// changed the same lines of, whose executor's versions wait beside
	// the owner's to be resolved.
	StagedConflicted = "conflicted"
	StagedDiscarded  = "discarded"
	StagedExpired    = "expired" // its retention ended before a decision
	StagedEmpty      = "empty"   // nothing to review: no result, or no change
)

// LiveSnapshot is the one snapshot of a live mount's staged result: its
// staging area.
const LiveSnapshot = "live"

// Staged is a delegation's result kept for review.
type Staged struct {
	// Dir holds it: a live mount's staging area, or an archive's base,
	// manifest and snapshots.
	Dir   string `json:"dir"`
	State string `json:"state"`
	// Snapshots are the results the executor sent (an archive's snapshot
	// events; LiveSnapshot for a live mount), in the order received.
	Snapshots []StagedSnapshot `json:"snapshots,omitempty"`
	// Until is when it is removed undecided (the retention's end).
	Until     time.Time `json:"until,omitzero"`
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	// Branch and Commit are where apply --branch recorded it.
	Branch string `json:"branch,omitempty"`
	Commit string `json:"commit,omitempty"`
}

// StagedSnapshot is one result of a staged delegation.
type StagedSnapshot struct {
	ID          string    `json:"id"`
	File        string    `json:"file,omitempty"` // in Staged.Dir; none for a live mount's
	Summary     string    `json:"summary,omitempty"`
	Highlights  []string  `json:"highlights,omitempty"`
	Recommended bool      `json:"recommended,omitempty"`
	Bytes       int64     `json:"bytes"`
	Status      string    `json:"status"`
	At          time.Time `json:"at"`
}

// Bytes is what its snapshots hold.
func (s *Staged) Bytes() int64 {
	var n int64
	for _, sn := range s.Snapshots {
		n += sn.Bytes
	}
	return n
}

// Chosen is the snapshot apply takes by default: the one recommended, or
// the last.
func (s *Staged) Chosen() *StagedSnapshot {
	for i := range s.Snapshots {
		if s.Snapshots[i].Recommended {
			return &s.Snapshots[i]
		}
	}
	if len(s.Snapshots) == 0 {
		return nil
	}
	return &s.Snapshots[len(s.Snapshots)-1]
}

// Find is the snapshot id (the chosen one for ""), nil if none.
func (s *Staged) Find(id string) *StagedSnapshot {
	if id == "" {
		return s.Chosen()
	}
	for i := range s.Snapshots {
		if s.Snapshots[i].ID == id {
			return &s.Snapshots[i]
		}
	}
	return nil
}
