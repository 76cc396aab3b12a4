package delegator

import (
	"encoding/json"
	"fmt"
	"slices"

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

// netChanges is what ops, in order, did to the directory in the end: a
// file made and removed again is no change; one removed and made again
// is modified. A rename is the old name deleted and the new one added;
// the directory is "path/". Failed and refused operations change nothing.
func netChanges(ops []Op) []string {
	state := map[string]string{}
	add := func(p string) {
		switch state[p] {
		case ChangeDeleted:
			state[p] = ChangeModified
		case "":
			state[p] = ChangeAdded
		}
	}
	modify := func(p string) {
		if state[p] == "" {
			state[p] = ChangeModified
		}
	}
	remove := func(p string) {
		if state[p] == ChangeAdded {
			delete(state, p)
		} else {
			state[p] = ChangeDeleted
		}
	}
	for _, op := range ops {
		if op.Err != "" || op.Refused {
			continue
		}
		switch op.Kind {
		case sshd.OpCreate, sshd.OpSymlink:
			add(op.Path)
		case sshd.OpLink:
			add(op.To)
		case sshd.OpMkdir:
			add(op.Path + "/")
		case sshd.OpWrite, sshd.OpSetattr:
			modify(op.Path)
		case sshd.OpRemove:
			remove(op.Path)
		case sshd.OpRmdir:
			remove(op.Path + "/")
		case sshd.OpRename:
			remove(op.Path)
			add(op.To)
		}
	}
	paths := make([]string, 0, len(state))
	for p := range state {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = changeLine(state[p], p)
	}
	return out
}

// liveChanges reads delegation id's audit log back and makes its change
// list; note says why the list may be incomplete, if it may.
func liveChanges(store *lease.Store, id string) (changes []string, note string, err error) {
	recs, sum, err := store.AuditAfter(id, 0, 0)
	if err != nil {
		return nil, "", err
	}
	ops := make([]Op, 0, len(recs))
	for _, r := range recs {
		var op Op
		if json.Unmarshal(r.Data, &op) == nil {
			ops = append(ops, op)
		}
	}
	if sum != nil && sum.Dropped > 0 {
		note = fmt.Sprintf("the change list may be incomplete: the audit log dropped its %d oldest operations (--audit-records)", sum.Dropped)
	}
	return netChanges(ops), note, nil
}
