package delegator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// Attempts: one task lent to several executors at once, each delegation
// staged (the owner's tree untouched), a group by name. They are compared
// side by side (CompareGroup), checked by the owner's command on a copy
// of the lent view with each one's changes (CheckAttempt, check.go), and
// one is applied, the others discarded (DiscardAttemptsBut).

// GroupPrefix starts every group's name.
const GroupPrefix = "grp-"

// NewGroup is a new group's name: GroupPrefix and 8 random hex digits.
func NewGroup() string {
	var b [4]byte
	rand.Read(b[:])
	return GroupPrefix + hex.EncodeToString(b[:])
}

// Attempt is one member of a group as compare shows it.
type Attempt struct {
	ID       string        `json:"delegationId"`
	Executor string        `json:"executor"`
	State    string        `json:"state"`
	Summary  string        `json:"summary,omitempty"`
	Files    int           `json:"files"`
	Added    int           `json:"linesAdded"`
	Removed  int           `json:"linesRemoved"`
	Took     time.Duration `json:"took"`
	// Result says why the changes could not be counted: none yet, or
	// none kept (failed, discarded).
	Result string `json:"result,omitempty"`
	// Check is the check command's verdict on this attempt, if one ran.
	Check *Check `json:"check,omitempty"`
}

// Check is how the owner's command did on an attempt's result.
type Check struct {
	Passed bool   `json:"passed"`
	Exit   int    `json:"exit"`
	Output string `json:"output,omitempty"` // its last lines
}

// GroupMembers are group's delegations, the first made first.
func (d *Delegator) GroupMembers(group string) ([]*lease.Delegation, error) {
	all, err := d.store.Delegations()
	if err != nil {
		return nil, err
	}
	var out []*lease.Delegation
	for _, del := range all {
		if del.Group == group {
			out = append(out, del)
		}
	}
	if len(out) == 0 {
		return nil, control.Errorf(control.CodeNotFound, "no attempts group %s", group).
			WithHint("`awcp-ctl status` lists delegations with their group")
	}
	slices.SortFunc(out, func(a, b *lease.Delegation) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// TaskLine is what a person recognises delegation d by: its
// description, or else its prompt's first line, at most 80 characters.
func TaskLine(d *lease.Delegation) string {
	t := strings.TrimSpace(d.Description)
	if t == "" {
		t = strings.TrimSpace(d.Prompt)
	}
	return firstLine(t, 80)
}

// GroupState is how a group stands: "running" while any member has not
// ended, then how its members ended ("ended: 2 completed, 1 error").
func GroupState(members []*lease.Delegation) string {
	counts := map[lease.State]int{}
	for _, d := range members {
		if !d.State.Terminal() {
			return "running"
		}
		counts[d.State]++
	}
	var parts []string
	for _, st := range lease.States {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return "ended: " + strings.Join(parts, ", ")
}

// CompareGroup is group's attempts side by side.
func (d *Delegator) CompareGroup(group string) ([]Attempt, error) {
	members, err := d.GroupMembers(group)
	if err != nil {
		return nil, err
	}
	out := make([]Attempt, 0, len(members))
	for _, del := range members {
		a := Attempt{ID: del.ID, Executor: orDefault(del.PeerName, del.Peer), State: string(del.State), Summary: firstLine(del.Summary, 72)}
		if v := del.Check; v != nil { // the last compare --check's verdict
			a.Check = &Check{Passed: v.Passed, Exit: v.Exit, Output: v.Output}
		}
		if del.State.Terminal() {
			a.Took = del.EndedAt.Sub(del.CreatedAt).Round(time.Second / 10)
		} else {
			a.Took = d.store.Now().Sub(del.CreatedAt).Round(time.Second)
		}
		switch r, _, err := d.OpenResult(del.ID, ""); {
		case err != nil:
			a.Result = resultWhy(err)
		default:
			files, err := r.Files()
			r.Close()
			if err != nil {
				a.Result = err.Error()
				break
			}
			a.Files = len(files)
			for _, f := range files {
				a.Added += f.Added
				a.Removed += f.Removed
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// resultWhy is an OpenResult error as compare says it.
func resultWhy(err error) string {
	var pe *control.ProtocolError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// DiscardAttemptsBut discards the staged results of keep's group but
// keep's own; it returns those it discarded.
func (d *Delegator) DiscardAttemptsBut(keep string) ([]string, error) {
	del, err := d.store.Delegation(keep)
	if err != nil || del.Group == "" {
		return nil, err
	}
	members, err := d.GroupMembers(del.Group)
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, m := range members {
		if m.ID == keep || m.Staged == nil || m.Staged.State != lease.StagedPending {
			continue
		}
		if !m.State.Terminal() {
			if _, err := d.Cancel(context.Background(), m.ID); err != nil {
				d.log.Warn("cancel an attempt not chosen", "delegation", m.ID, "err", err)
			}
		}
		if err := d.DiscardResult(m.ID, ""); err != nil {
			d.log.Warn("discard an attempt not chosen", "delegation", m.ID, "err", err)
			continue
		}
		gone = append(gone, m.ID)
	}
	return gone, nil
}

// lastLines is s's last n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
