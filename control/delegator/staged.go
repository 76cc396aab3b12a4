package delegator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator/lending"
	"github.com/awcp/awcp/control/delegator/review"
	"github.com/awcp/awcp/lease"
)

// DefaultStagedRetention is how long a staged result waits for a decision
// before it is removed (the reference keeps a week too).
const DefaultStagedRetention = 7 * 24 * time.Hour

// MaxStagedSnapshots bounds the snapshots a staged archive delegation
// keeps: past it, the oldest one not recommended goes (the oldest of all,
// where an executor says each one is).
const MaxStagedSnapshots = 16

// snapshotMode checks req's snapshot mode; a read-only delegation has no
// result, so its mode is auto whatever was asked.
func (d *Delegator) snapshotMode(req ExportRequest) (string, error) {
	mode := req.Snapshot
	switch mode {
	case "", lease.SnapshotAuto:
		return lease.SnapshotAuto, nil
	case lease.SnapshotStaged, lease.SnapshotDiscard:
	default:
		return "", control.Errorf(control.CodeWorkspaceInvalid, "unknown snapshot mode %q", mode).
			WithHint("use auto (apply as it comes), staged (keep it for review) or discard")
	}
	if req.Access == control.AccessRO {
		return lease.SnapshotAuto, nil
	}
	if d.opts.StagedDir == "" {
		return "", control.Errorf(control.CodeDepMissing, "snapshot mode %s needs a place for the executor's changes other than the directory, and this delegator has none", mode)
	}
	return mode, nil
}

// zipped says whether transport's result comes as a ZIP against the base
// sent (the archive's; the git transport's, packed from its push), not
// as a live mount's staging area.
func zipped(transport string) bool {
	return transport == control.TransportArchive || transport == control.TransportGit
}

// stagedDir is where delegation id's staged result is kept.
func (d *Delegator) stagedDir(id string) string { return filepath.Join(d.opts.StagedDir, id) }

// stageSnapshot keeps a snapshot event's result in a staged delegation's
// directory: keep records it (in the record's update), after removes, once
// the update is done, the snapshot it dropped past MaxStagedSnapshots.
func (d *Delegator) stageSnapshot(del *lease.Delegation, ev *control.Event) (keep func(*lease.Delegation), after func()) {
	if ev.ResultFile == "" || del.Staged == nil || del.SnapshotMode != lease.SnapshotStaged {
		return nil, func() {}
	}
	id := ev.SnapshotID
	if id == "" {
		id = fmt.Sprintf("snap_%d", len(del.Staged.Snapshots)+1)
	}
	// Named by the id (hashed: it is the executor's to choose, not a
	// path), so that a snapshot sent again replaces its file.
	sum := sha256.Sum256([]byte(id))
	name := "snapshot-" + hex.EncodeToString(sum[:8]) + ".zip"
	os.Remove(filepath.Join(del.Staged.Dir, name))
	if err := lending.LinkOrCopy(ev.ResultFile, filepath.Join(del.Staged.Dir, name)); err != nil {
		d.log.Warn("keep a staged snapshot", "delegation", del.ID, "err", err)
		return nil, func() {}
	}
	snap := lease.StagedSnapshot{ID: id, File: name, Summary: ev.Summary, Highlights: ev.Highlights,
		Recommended: ev.Recommended != nil && *ev.Recommended, Bytes: fileSize(ev.ResultFile), Status: lease.StagedPending, At: d.store.Now()}
	var dropped string
	keep = func(rec *lease.Delegation) {
		dropped = ""
		if rec.Staged == nil {
			return
		}
		rec.Staged.Snapshots = slices.DeleteFunc(rec.Staged.Snapshots, func(s lease.StagedSnapshot) bool { return s.ID == snap.ID })
		rec.Staged.Snapshots = append(rec.Staged.Snapshots, snap)
		if len(rec.Staged.Snapshots) > MaxStagedSnapshots {
			i := slices.IndexFunc(rec.Staged.Snapshots, func(s lease.StagedSnapshot) bool { return !s.Recommended })
			if i < 0 {
				i = 0 // each says it is recommended: the executor's word bounds nothing
			}
			dropped = filepath.Join(rec.Staged.Dir, rec.Staged.Snapshots[i].File)
			rec.Staged.Snapshots = slices.Delete(rec.Staged.Snapshots, i, i+1)
		}
	}
	return keep, func() {
		if dropped != "" {
			os.Remove(dropped)
		}
	}
}

// finishStaged is Finish for a delegation whose result is kept for review
// (staged) or dropped (discard): nothing in the directory changes. It
// returns what the done's record update adds.
func (d *Delegator) finishStaged(del *lease.Delegation, ev *control.Event) (func(*lease.Delegation), error) {
	if del.SnapshotMode == lease.SnapshotDiscard {
		return func(rec *lease.Delegation) {
			rec.Notes = append(rec.Notes, "snapshot mode discard: the executor's result was dropped; the directory is as it was")
		}, nil // the result file goes with the event; the area at the clean-up
	}
	until := d.store.Now().Add(d.retention())
	if !zipped(del.Transport) {
		live := lease.StagedSnapshot{ID: lease.LiveSnapshot, Summary: ev.Summary, Highlights: ev.Highlights,
			Recommended: true, Bytes: dirBytes(filepath.Join(del.Staged.Dir, "upper")), Status: lease.StagedPending, At: d.store.Now()}
		return func(rec *lease.Delegation) {
			if rec.Staged == nil {
				return
			}
			rec.Staged.Until = until
			rec.Staged.Snapshots = []lease.StagedSnapshot{live}
		}, nil
	}
	if _, err := os.Stat(filepath.Join(del.Staged.Dir, lending.SentArchive)); err != nil {
		return nil, fmt.Errorf("what was sent is not kept for the review: %w", err)
	}
	var result *lease.StagedSnapshot
	if len(del.Staged.Snapshots) == 0 {
		// The seed dialect's result comes in done itself.
		if ev.ResultFile == "" {
			return nil, control.Errorf(control.CodeTaskFailed, "the executor's done event carries no result: there is nothing to review")
		}
		if ev.ResultChecksum != "" && !strings.EqualFold(ev.ResultSum, ev.ResultChecksum) {
			return nil, fmt.Errorf("the result's SHA-256 is %s, not the resultChecksum the executor sent (%s): not kept", ev.ResultSum, ev.ResultChecksum)
		}
		if err := lending.LinkOrCopy(ev.ResultFile, filepath.Join(del.Staged.Dir, "result.zip")); err != nil {
			return nil, fmt.Errorf("keep the result: %w", err)
		}
		result = &lease.StagedSnapshot{ID: "result", File: "result.zip", Summary: ev.Summary, Highlights: ev.Highlights,
			Recommended: true, Bytes: fileSize(ev.ResultFile), Status: lease.StagedPending, At: d.store.Now()}
	}
	return func(rec *lease.Delegation) {
		if rec.Staged == nil {
			return
		}
		rec.Staged.Until = until
		if result != nil {
			rec.Staged.Snapshots = append(rec.Staged.Snapshots, *result)
		}
		if ev.RecommendedSnapshotID != "" {
			for i := range rec.Staged.Snapshots {
				rec.Staged.Snapshots[i].Recommended = rec.Staged.Snapshots[i].ID == ev.RecommendedSnapshotID
			}
		}
	}, nil
}

func (d *Delegator) retention() time.Duration {
	if d.opts.StagedRetention > 0 {
		return d.opts.StagedRetention
	}
	return DefaultStagedRetention
}

// dropDiscarded removes, once del ended, what its executor changed in
// snapshot mode discard (a live mount's staging area), and says so.
func (d *Delegator) dropDiscarded(del *lease.Delegation) {
	if del.SnapshotMode != lease.SnapshotDiscard || del.Staged == nil {
		return
	}
	if err := os.RemoveAll(del.Staged.Dir); err != nil {
		d.log.Warn("remove a discarded result", "delegation", del.ID, "err", err)
		return
	}
	d.store.UpdateDelegation(del.ID, func(rec *lease.Delegation) error {
		if rec.Staged == nil || rec.Staged.State != lease.StagedPending {
			return errStagedDecided
		}
		rec.Staged.State, rec.Staged.DecidedAt = lease.StagedDiscarded, d.store.Now()
		return nil
	})
}

// settleEmptyStaged ends the review of a staged result that holds nothing
// to review — the delegation ended before the executor sent a result, or
// its agent changed nothing — so that nothing waits for a decision there
// is none to make: it is recorded empty, with why, and its area removed.
// A result with more than one snapshot is left to the user.
func (d *Delegator) settleEmptyStaged(id string) {
	del, err := d.store.Delegation(id)
	if err != nil || !del.State.Terminal() || del.SnapshotMode != lease.SnapshotStaged || del.Staged == nil ||
		del.Staged.State != lease.StagedPending || len(del.Staged.Snapshots) > 1 {
		return
	}
	var why, snap string
	if len(del.Staged.Snapshots) == 1 {
		snap = del.Staged.Snapshots[0].ID
	}
	r, _, err := d.OpenResult(id, snap)
	switch {
	case err != nil && len(del.Staged.Snapshots) == 0 && (del.Transport != control.TransportSSHFS || !exists(filepath.Join(del.Staged.Dir, "upper"))):
		why = "nothing staged: the delegation ended before the executor sent a result"
	case err != nil:
		return // something there could not be read: the user decides
	default:
		changed := len(r.Paths)
		r.Close()
		if changed > 0 {
			return
		}
		why = "nothing staged: the agent changed nothing"
	}
	if err := os.RemoveAll(del.Staged.Dir); err != nil {
		d.log.Warn("remove an empty staged result", "delegation", id, "err", err)
	}
	d.store.UpdateDelegation(id, func(rec *lease.Delegation) error {
		if rec.Staged == nil || rec.Staged.State != lease.StagedPending {
			return errStagedDecided
		}
		rec.Staged.State, rec.Staged.DecidedAt = lease.StagedEmpty, d.store.Now()
		rec.Notes = append(rec.Notes, why)
		return nil
	})
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// dirBytes is what the files under dir hold.
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// OpenResult opens delegation id's staged result (its snapshot snap; ""
// for the one recommended) for review. A live mount's can be read while
// the agent still works. Close the result when done.
func (d *Delegator) OpenResult(id, snap string) (*review.Result, *lease.Delegation, error) {
	del, err := d.store.Delegation(id)
	if err != nil {
		return nil, nil, err
	}
	if del.Staged == nil {
		return nil, del, control.Errorf(control.CodeNotFound, "delegation %s has no staged result (its snapshot mode is %s)", id, orAuto(del.SnapshotMode)).
			WithHint("only a delegation exported with --snapshot staged keeps its result for review")
	}
	switch del.Staged.State {
	case lease.StagedDiscarded, lease.StagedExpired:
		return nil, del, control.Errorf(control.CodeNotFound, "delegation %s's staged result was %s", id, del.Staged.State)
	case lease.StagedApplied, lease.StagedConflicted:
		return nil, del, control.Errorf(control.CodeNotFound, "delegation %s's staged result was applied already", id).
			WithHint(fmt.Sprintf("`awcp-ctl status %s` shows what it changed", id))
	}
	if !zipped(del.Transport) {
		r, err := review.FromArea(del.Staged.Dir, lending.Hider(del.Policy))
		return r, del, err
	}
	s := del.Staged.Find(snap)
	if s == nil {
		if snap == "" {
			return nil, del, control.Errorf(control.CodeNotFound, "delegation %s has no result yet: the executor has sent none", id).
				WithHint("an archive's result comes when the agent is done")
		}
		return nil, del, control.Errorf(control.CodeNotFound, "delegation %s has no snapshot %s", id, snap)
	}
	raw, err := os.ReadFile(filepath.Join(del.Staged.Dir, lending.SentManifest))
	if err != nil {
		return nil, del, fmt.Errorf("what was sent is not kept: %w", err)
	}
	var base archive.Manifest
	if err := json.Unmarshal(raw, &base); err != nil {
		return nil, del, fmt.Errorf("what was sent is unreadable: %w", err)
	}
	folder := ""
	if del.Dialect == control.DialectHead {
		folder = control.ResourceWorkspace
	}
	r, err := review.FromArchive(filepath.Join(del.Staged.Dir, lending.SentArchive), filepath.Join(del.Staged.Dir, s.File), base, folder,
		d.opts.SpoolDir, archive.Limits{}, lending.Hider(del.Policy))
	return r, del, err
}

func orAuto(mode string) string {
	if mode == "" {
		return lease.SnapshotAuto
	}
	return mode
}

// BranchReplayer replays a staged result's own commits — its agent's, kept
// by its transport — on a new branch of the directory (the git
// transport's: lendgit.Replayer); ok is false where none were kept.
type BranchReplayer interface {
	ReplayBranch(ctx context.Context, d control.Lent, stagedDir, branch string) (commit string, commits int, ok bool, err error)
}

// resultPacker is a transport whose result the delegator packs itself as
// an archive result (the git transport's push), for a staged review.
type resultPacker interface {
	PackResult(ctx context.Context, d control.Lent, ev *control.Event) (drop func(), err error)
}

// Applied is what ApplyResult did.
type Applied struct {
	Snapshot string          `json:"snapshot"`
	Report   *archive.Report `json:"report,omitempty"` // applied to the directory
	Branch   string          `json:"branch,omitempty"` // or recorded on this branch
	Commit   string          `json:"commit,omitempty"`
	// Commits is how many commits the branch got: the git transport's
	// keep the agent's own.
	Commits int `json:"commits,omitempty"`
}

// stagedApplying marks a result being applied: a second apply meanwhile
// is refused.
const stagedApplying = "applying"

// ApplyResult applies delegation id's staged result (its snapshot snap;
// "" for the recommended one) to the directory, three-way against the
// base it was made from; with branch, it records it as a commit on that
// new branch of the directory's git work tree instead. The delegation
// must have ended. The result is removed once applied.
func (d *Delegator) ApplyResult(ctx context.Context, id, snap, branch string, allowGitControl bool) (*Applied, error) {
	r, del, err := d.OpenResult(id, snap)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if !del.State.Terminal() {
		return nil, control.Errorf(control.CodeUsage, "delegation %s is still %s: a staged result can be applied once the agent is done, and nothing applies it by itself", id, del.State).
			WithHint(fmt.Sprintf("`awcp-ctl diff %s` shows it now; `awcp-ctl output %s --block` waits for the end, then apply", id, id))
	}
	chosen := lease.LiveSnapshot
	if s := del.Staged.Find(snap); s != nil {
		chosen = s.ID
	}
	// Claim it: one apply at a time, and never one after a decision.
	if _, err := d.store.UpdateDelegation(id, func(rec *lease.Delegation) error {
		if rec.Staged == nil || rec.Staged.State != lease.StagedPending {
			state := "gone"
			if rec.Staged != nil {
				state = rec.Staged.State
			}
			return control.Errorf(control.CodeUsage, "delegation %s's staged result is %s, not pending", id, state)
		}
		rec.Staged.State = stagedApplying
		return nil
	}); err != nil {
		return nil, err
	}
	out := &Applied{Snapshot: chosen}
	if branch != "" {
		msg := fmt.Sprintf("%s\n\nThe executor's result of delegation %s (awcp), snapshot %s.\n", firstLine(orDefault(del.Summary, del.Description), 72), id, chosen)
		out.Branch = branch
		replayed := false
		if br, ok := d.opts.Replayers[del.Transport]; ok {
			// The git transport's: the agent's own commits, replayed.
			out.Commit, out.Commits, replayed, err = br.ReplayBranch(ctx, lent(del), del.Staged.Dir, branch)
		}
		if !replayed && err == nil {
			out.Commit, err = r.Branch(ctx, del.LocalDir, branch, msg)
		}
	} else {
		out.Report, err = r.Apply(del.LocalDir, ".awcp-"+lending.ShortID(id), allowGitControl)
	}
	_, uerr := d.store.UpdateDelegation(id, func(rec *lease.Delegation) error {
		if err != nil {
			rec.Staged.State = lease.StagedPending
			return nil
		}
		rec.Staged.State, rec.Staged.DecidedAt = lease.StagedApplied, d.store.Now()
		rec.Staged.Branch, rec.Staged.Commit = out.Branch, out.Commit
		for i := range rec.Staged.Snapshots {
			rec.Staged.Snapshots[i].Status = lease.StagedDiscarded
			if rec.Staged.Snapshots[i].ID == chosen {
				rec.Staged.Snapshots[i].Status = lease.StagedApplied
			}
		}
		if rep := out.Report; rep != nil {
			rec.Changes, rec.Conflicts = changesOf(rep), rep.Conflicts
			if len(rep.Conflicts) > 0 {
				rec.Staged.State = lease.StagedConflicted
			}
		} else {
			rec.Notes = append(rec.Notes, fmt.Sprintf("staged result recorded on branch %s (commit %s)", out.Branch, out.Commit))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if uerr != nil {
		return out, uerr
	}
	r.Close()
	if err := os.RemoveAll(del.Staged.Dir); err != nil {
		d.log.Warn("remove an applied staged result", "delegation", id, "err", err)
	}
	return out, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// DiscardResult drops delegation id's staged result: one snapshot of an
// archive's (snap), or the whole of it (""). Applying it afterwards is
// refused. A live mount's is discarded only once the agent is done.
func (d *Delegator) DiscardResult(id, snap string) error {
	del, err := d.store.Delegation(id)
	if err != nil {
		return err
	}
	if del.Staged == nil {
		return control.Errorf(control.CodeNotFound, "delegation %s has no staged result (its snapshot mode is %s)", id, orAuto(del.SnapshotMode))
	}
	if !del.State.Terminal() && !zipped(del.Transport) {
		return control.Errorf(control.CodeUsage, "delegation %s is still %s: its agent writes to the staged result", id, del.State).
			WithHint(fmt.Sprintf("`awcp-ctl cancel %s` first", id))
	}
	var files []string
	whole := false
	_, err = d.store.UpdateDelegation(id, func(rec *lease.Delegation) error {
		files, whole = nil, false
		st := rec.Staged
		if st.State != lease.StagedPending {
			return control.Errorf(control.CodeUsage, "delegation %s's staged result is %s, not pending", id, st.State)
		}
		if snap != "" && snap != lease.LiveSnapshot {
			s := st.Find(snap)
			if s == nil {
				return control.Errorf(control.CodeNotFound, "delegation %s has no snapshot %s", id, snap)
			}
			if s.Status != lease.StagedPending {
				return control.Errorf(control.CodeDeclined, "snapshot %s is %s already", snap, s.Status)
			}
			s.Status = lease.StagedDiscarded
			files = append(files, filepath.Join(st.Dir, s.File))
			for _, o := range st.Snapshots {
				if o.Status == lease.StagedPending {
					return nil // others wait still
				}
			}
		}
		whole = true
		st.State, st.DecidedAt = lease.StagedDiscarded, d.store.Now()
		for i := range st.Snapshots {
			st.Snapshots[i].Status = lease.StagedDiscarded
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range files {
		os.Remove(f)
	}
	if whole {
		return os.RemoveAll(del.Staged.Dir)
	}
	return nil
}

// expireStaged removes the staged results whose retention ended
// undecided. (Pruning a delegation's record removes its result too.)
func (d *Delegator) expireStaged(ds []*lease.Delegation) {
	now := d.store.Now()
	for _, del := range ds {
		st := del.Staged
		if st == nil || st.State != lease.StagedPending || st.Until.IsZero() || !now.After(st.Until) {
			continue
		}
		if _, err := d.store.UpdateDelegation(del.ID, func(rec *lease.Delegation) error {
			if rec.Staged == nil || rec.Staged.State != lease.StagedPending {
				return errStagedDecided
			}
			rec.Staged.State = lease.StagedExpired
			return nil
		}); err == nil {
			os.RemoveAll(st.Dir)
		}
	}
}

var errStagedDecided = errors.New("decided meanwhile")

// ChangedFile is one file a staged result changes.
type ChangedFile = review.File

// ResultFiles is the files delegation id's staged result (its snapshot
// snap; "" for the recommended one) changes.
func (d *Delegator) ResultFiles(id, snap string) ([]ChangedFile, error) {
	r, _, err := d.OpenResult(id, snap)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Files()
}
