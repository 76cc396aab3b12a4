package delegator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// Attempts: one task lent to several executors at once, each delegation
// staged (the owner's tree untouched), a group by name. They are compared
// side by side (CompareGroup), checked by the owner's command on a copy of
// the tree with each one's changes (CheckAttempt), and one is applied, the
// others discarded (DiscardAttemptsBut).

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

// CompareGroup is group's attempts side by side.
func (d *Delegator) CompareGroup(group string) ([]Attempt, error) {
	members, err := d.GroupMembers(group)
	if err != nil {
		return nil, err
	}
	out := make([]Attempt, 0, len(members))
	for _, del := range members {
		a := Attempt{ID: del.ID, Executor: orDefault(del.PeerName, del.Peer), State: string(del.State), Summary: firstLine(del.Summary, 72)}
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

// CheckAttempt runs the owner's check command on attempt id's result: in
// a scratch copy of the lent directory, the attempt's changes applied,
// through confine (the same kind of sandbox the executor's agents run
// in: what it runs is the executor's code). The copy is removed after.
func (d *Delegator) CheckAttempt(ctx context.Context, id, command string, timeout time.Duration, confine func(cmd *exec.Cmd, dir string) error) (*Check, error) {
	r, del, err := d.OpenResult(id, "")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	scratch, err := os.MkdirTemp("", "awcp-check-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	tree := filepath.Join(scratch, "tree")
	if err := copyTree(del.LocalDir, tree); err != nil {
		return nil, fmt.Errorf("copy %s for the check: %w", del.LocalDir, err)
	}
	if _, err := r.Apply(tree, ".awcp-check", false); err != nil {
		return nil, fmt.Errorf("apply the attempt to the copy: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "AWCP_ATTEMPT="+id)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 2 * time.Second
	if confine != nil {
		if err := confine(cmd, scratch); err != nil {
			return nil, err
		}
	}
	err = cmd.Run()
	c := &Check{Passed: err == nil, Output: lastLines(out.String(), 5)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		c.Exit = ee.ExitCode()
	case ctx.Err() != nil:
		c.Exit, c.Output = -1, fmt.Sprintf("timed out after %s", timeout)
	default:
		return nil, fmt.Errorf("run the check: %w", err)
	}
	return c, nil
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

// copyTree copies the directory src to dst: directories, regular files
// and symlinks, with their modes; other files are left out.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		info, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case e.IsDir():
			return os.MkdirAll(to, info.Mode().Perm()|0o700)
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case e.Type().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(out, in)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			return err
		}
		return nil
	})
}

// lastLines is s's last n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
