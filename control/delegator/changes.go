package delegator

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// The kinds of a change, as `git status --short` writes them: what a
// delegation did to the directory lent, one line per path.
const (
	ChangeAdded    = "A"
	ChangeModified = "M"
	ChangeDeleted  = "D"
)

// changeLine is one line of Delegation.Changes: "A path".
func changeLine(kind, path string) string { return kind + " " + path }

// changesOf is the change lines of what an apply did.
func changesOf(rep *archive.Report) []string {
	var out []string
	for _, x := range []struct {
		kind  string
		paths []string
	}{{ChangeAdded, rep.Created}, {ChangeModified, rep.Modified}, {ChangeDeleted, rep.Deleted}} {
		for _, p := range x.paths {
			out = append(out, changeLine(x.kind, p))
		}
	}
	return out
}

// The change list of a live mount is bounded, since the executor picks
// the names: at most maxChangeBytes of paths are listed, and the audit log
// is read back a page at a time.
const (
	maxChangeBytes = 4 << 20
	auditPage      = 1000
)

// changeSet is what a delegation's operations, in order, did to the
// directory in the end: a file made and removed again is no change; one
// removed and made again is modified. A rename is the old name deleted and
// the new one added (what was inside a renamed directory stays listed
// under its old name); a directory is "path/". Failed and refused
// operations change nothing. A rename over what was there (sed -i's
// way) modifies the new name.
type changeSet struct {
	state    map[string]string // path → ChangeAdded, ChangeModified or ChangeDeleted
	bytes    int               // of the paths in state
	unlisted int               // changed paths past maxChangeBytes
}

func (cs *changeSet) apply(op Op) {
	if op.Err != "" || op.Refused {
		return
	}
	switch op.Kind {
	case sshd.OpCreate, sshd.OpSymlink:
		cs.add(op.Path)
	case sshd.OpLink:
		cs.add(op.To)
	case sshd.OpMkdir:
		cs.add(op.Path + "/")
	case sshd.OpWrite, sshd.OpSetattr:
		cs.set(op.Path, func(cur string) string { return orKind(cur, ChangeModified) })
	case sshd.OpRemove:
		cs.remove(op.Path)
	case sshd.OpRmdir:
		cs.remove(op.Path + "/")
	case sshd.OpRename:
		cs.remove(op.Path)
		if op.Replaced { // rewritten in place, as sed -i and editors do
			cs.set(op.To, func(cur string) string {
				if cur == "" || cur == ChangeDeleted {
					return ChangeModified
				}
				return cur
			})
		} else {
			cs.add(op.To)
		}
	}
}

func (cs *changeSet) add(p string) {
	cs.set(p, func(cur string) string {
		if cur == ChangeDeleted {
			return ChangeModified
		}
		return orKind(cur, ChangeAdded)
	})
}

func (cs *changeSet) remove(p string) {
	cs.set(p, func(cur string) string {
		if cur == ChangeAdded {
			return "" // made and removed again: no change
		}
		return ChangeDeleted
	})
}

// orKind is cur, or kind when nothing is recorded yet.
func orKind(cur, kind string) string {
	if cur == "" {
		return kind
	}
	return cur
}

// set records p's new state, next(its current one); "" forgets p.
func (cs *changeSet) set(p string, next func(cur string) string) {
	cur, known := cs.state[p]
	switch kind := next(cur); {
	case kind == "" && known:
		delete(cs.state, p)
		cs.bytes -= len(p)
	case kind == "":
	case known:
		cs.state[p] = kind
	case cs.bytes+len(p) > maxChangeBytes:
		cs.unlisted++
	default:
		if cs.state == nil {
			cs.state = map[string]string{}
		}
		cs.state[p] = kind
		cs.bytes += len(p)
	}
}

// lines are the changes, sorted by path.
func (cs *changeSet) lines() []string {
	paths := make([]string, 0, len(cs.state))
	for p := range cs.state {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = changeLine(cs.state[p], p)
	}
	return out
}

// liveChanges reads delegation id's audit log back, a page at a time, and
// makes its change list; notes say why the list may be incomplete.
func liveChanges(store *lease.Store, id string) (changes, notes []string, err error) {
	var cs changeSet
	var sum *lease.AuditSummary
	for after := uint64(0); ; {
		recs, s, err := store.AuditAfter(id, after, auditPage)
		if err != nil {
			return nil, nil, err
		}
		sum = s
		for _, r := range recs {
			var op Op
			if json.Unmarshal(r.Data, &op) == nil {
				cs.apply(op)
			}
			after = r.Seq
		}
		if len(recs) < auditPage {
			break
		}
	}
	if sum != nil && sum.Dropped > 0 {
		notes = append(notes, fmt.Sprintf("the change list may be incomplete: the audit log dropped its %d oldest operations (--audit-records)", sum.Dropped))
	}
	if cs.unlisted > 0 {
		notes = append(notes, fmt.Sprintf("%d more changed paths are not listed (the list holds %d MiB of names)", cs.unlisted, maxChangeBytes>>20))
	}
	return cs.lines(), notes, nil
}
