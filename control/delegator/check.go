package delegator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control/delegator/lending"
	"github.com/awcp/awcp/internal/sandbox"
	"github.com/awcp/awcp/internal/tail"
	"github.com/awcp/awcp/lease"
)

// CheckOptions say how CheckAttempt runs the owner's check.
type CheckOptions struct {
	Command string        // run by /bin/sh -c
	Timeout time.Duration // then it is killed, with all it started
	// Env names variables of the owner's environment the check is given;
	// it gets none other than its own PATH, HOME, TMPDIR and LANG.
	Env []string
	// MaxMemory bounds each of its processes' data, in bytes (0: none).
	MaxMemory uint64
}

// checkOutputMax is how much of a check's output is kept (its end):
// compare shows its last lines.
const checkOutputMax = 64 << 10

// CheckAttempt runs the owner's check command on attempt id's result.
// What it runs is the executor's code (the agent may have rewritten the
// tests), so it runs as an executor's agent runs (sandbox.ForeignCode):
// on a copy of what the executor was lent — the export view, hidden paths
// and .git never copied — with the attempt's changes applied, in a root,
// a network and an environment of its own, for at most opts.Timeout. The
// copy is removed after. Where such a sandbox cannot be had the check is
// not run: the error says why.
func (d *Delegator) CheckAttempt(ctx context.Context, id string, opts CheckOptions) (*Check, error) {
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
	tree, home, tmp := filepath.Join(scratch, "tree"), filepath.Join(scratch, "home"), filepath.Join(scratch, "tmp")
	if err := archive.CopyView(del.LocalDir, tree, lending.Hider(del.Policy)); err != nil {
		return nil, err
	}
	if _, err := r.Apply(tree, ".awcp-check", false); err != nil {
		return nil, fmt.Errorf("apply the attempt to the copy: %w", err)
	}
	for _, dir := range []string{home, tmp} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
	}
	policy, err := sandbox.ForeignCode(scratch, opts.MaxMemory)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", opts.Command)
	cmd.Dir = tree
	cmd.Env = checkEnv(opts.Env, home, tmp, id)
	out := &tail.Buffer{Max: checkOutputMax}
	cmd.Stdout, cmd.Stderr = out, out
	// The helper is PID 1 of the check's namespace: killing it ends
	// everything the check started.
	cmd.WaitDelay = 2 * time.Second
	if err := policy.Wrap(cmd); err != nil {
		return nil, err
	}
	err = cmd.Run()
	c := &Check{Passed: err == nil, Output: lastLines(out.String(), 5)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil && !c.Passed:
		c.Exit, c.Output = -1, fmt.Sprintf("timed out after %s", opts.Timeout)
	case err == nil:
	case errors.As(err, &ee):
		c.Exit = ee.ExitCode()
	default:
		return nil, fmt.Errorf("run the check: %w", err)
	}
	// Kept with the attempt: compare shows it again, and the page.
	if _, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		del.Check = &lease.CheckVerdict{Command: opts.Command, Passed: c.Passed, Exit: c.Exit, Output: c.Output, At: d.store.Now()}
		return nil
	}); err != nil {
		d.log.Warn("keep the check's verdict", "delegation", id, "err", err)
	}
	return c, nil
}

// checkEnv is a check's whole environment: a PATH and locale as the
// owner's, a home and temporary directory of its own, the attempt's id,
// and the variables the owner named — nothing else of the owner's (a
// token exported in their shell, their ssh-agent's socket).
func checkEnv(names []string, home, tmp, id string) []string {
	env := []string{"HOME=" + home, "TMPDIR=" + tmp, "XDG_CACHE_HOME=" + filepath.Join(tmp, "cache"), "AWCP_ATTEMPT=" + id}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env = append(env, "PATH="+path)
	for _, name := range append([]string{"LANG", "LC_ALL", "TZ"}, names...) {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}
