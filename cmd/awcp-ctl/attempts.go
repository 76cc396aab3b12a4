package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// exportAttempts lends base's directory to each of peers at once, as the
// attempts of one group, each staged: the owner's tree is untouched until
// one is applied. It waits for them all, then compares them (unless
// --background: it prints the group and returns).
func exportAttempts(ctx context.Context, c *cli.Context, e *env, base delegator.ExportRequest, peers []string) error {
	if c.IsSet("snapshot") && base.Snapshot != lease.SnapshotStaged {
		return clikit.UsageError("several --peer are attempts at one task, each kept for review: --snapshot must be staged, not %s", base.Snapshot)
	}
	base.Snapshot = lease.SnapshotStaged
	if base.PeerKey != "" {
		return clikit.UsageError("--peer-key pins one executor's key: with several --peer, trust each (`awcp-ctl peers trust URL`)")
	}
	base.Group = delegator.NewGroup()
	reqs, names := make([]delegator.ExportRequest, len(peers)), make([]string, len(peers))
	for i, p := range peers {
		reqs[i], names[i] = base, fmt.Sprintf("attempt %d", i+1)
		reqs[i].Peer = p
	}
	if done, err := runGroup(ctx, c, e, base.Group, reqs, names); !done || err != nil {
		return err
	}
	dlg, err := e.delegator(nil)
	if err != nil {
		return err
	}
	return printCompare(c, dlg, base.Group, nil)
}

// runGroup hands reqs, named by names, to the daemon as group, saying
// each one's start, and waits for them all to end (with --background it
// prints the group and returns). done is false where there is nothing
// more to say: none started (an error), --background, or Ctrl-C.
func runGroup(ctx context.Context, c *cli.Context, e *env, group string, reqs []delegator.ExportRequest, names []string) (done bool, _ error) {
	daemon, err := daemonOrStart(c, e)
	if err != nil {
		return false, err
	}
	errw := c.App.ErrWriter
	started := 0
	for i, req := range reqs {
		peer := req.Peer
		id := ""
		if err = e.resolvePeer(ctx, c, &req); err == nil {
			id, err = daemon.Export(req)
		}
		if err != nil {
			fmt.Fprintf(errw, "awcp: %s (--peer %s) not started: %v\n", names[i], peer, err)
			continue
		}
		started++
		fmt.Fprintf(errw, "awcp: %s: delegation %s to %s\n", names[i], id, req.Peer)
	}
	if started == 0 {
		return false, clikit.Failed()
	}
	fmt.Fprintf(errw, "awcp: group %s: %d running; awcp-ctl status shows them, cancel %s ends them\n", group, started, group)
	if c.Bool("background") {
		fmt.Fprintln(c.App.Writer, group)
		return false, nil
	}
	dlg, err := e.delegator(nil)
	if err != nil {
		return false, err
	}
	for {
		members, err := dlg.GroupMembers(group)
		if err != nil {
			return false, err
		}
		if !slices.ContainsFunc(members, func(d *lease.Delegation) bool { return !d.State.Terminal() }) {
			return true, nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(errw, "awcp: the group goes on; `awcp-ctl status` shows it\n")
			return false, nil
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// compareCommand shows a group's attempts side by side.
func compareCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "show the attempts of a group side by side: state, summary, files and lines changed, time; --check runs a command on each",
		ArgsUsage: "GROUP",
		Flags: append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "check", Usage: "a command (sh -c) that passes or fails each attempt's result (your tests, say); it runs the executor's code, so it runs as an executor's agent does: on a copy of what was lent with the attempt's changes, in a sandbox with no network, none of your environment and nothing else of your machine"},
			clikit.DurationFlag("check-timeout", 10*time.Minute, "how long each check may run"),
			&cli.StringSliceFlag{Name: "check-env", Usage: "a variable of your environment the check is given (repeatable); it gets only PATH, LANG and a HOME of its own otherwise"},
			clikit.BytesFlag("check-memory", 4<<30, "how much memory each process of a check may use (its data)"),
			&cli.BoolFlag{Name: "json", Usage: "print the comparison as JSON"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Len() != 1 {
				return clikit.UsageError("compare takes a group (grp-…), or one of its delegations")
			}
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			group := c.Args().First()
			if !strings.HasPrefix(group, delegator.GroupPrefix) {
				d, err := e.resolve(group)
				if err != nil {
					return err
				}
				if d.Group == "" {
					return clikit.UsageError("delegation %s is no attempt of a group", d.ID)
				}
				group = d.Group
			}
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			var check *delegator.CheckOptions
			if c.String("check") != "" {
				check = &delegator.CheckOptions{Command: c.String("check"), Timeout: clikit.Duration(c, "check-timeout"),
					Env: c.StringSlice("check-env"), MaxMemory: uint64(clikit.Bytes(c, "check-memory"))}
			}
			return printCompare(c, dlg, group, check)
		},
	}
}

// printCompare prints group's attempts, checked with check if given.
func printCompare(c *cli.Context, dlg *delegator.Delegator, group string, check *delegator.CheckOptions) error {
	attempts, err := dlg.CompareGroup(group)
	if err != nil {
		return err
	}
	if check != nil {
		for i := range attempts {
			a := &attempts[i]
			if a.Result != "" {
				continue // nothing to check
			}
			a.Check, err = dlg.CheckAttempt(c.Context, a.ID, *check)
			if err != nil {
				return fmt.Errorf("check %s: %w", a.ID, err)
			}
		}
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"group": group, "attempts": attempts})
	}
	w := c.App.Writer
	fmt.Fprintf(w, "attempts group %s\n", group)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	head := "ID\tEXECUTOR\tSTATE\tFILES\tLINES\tTOOK"
	// A check run now, or kept from an earlier compare --check.
	checked := check != nil || slices.ContainsFunc(attempts, func(a delegator.Attempt) bool { return a.Check != nil })
	if checked {
		head += "\tCHECK"
	}
	fmt.Fprintln(tw, head+"\tSUMMARY")
	for _, a := range attempts {
		files, lines := fmt.Sprint(a.Files), fmt.Sprintf("+%d -%d", a.Added, a.Removed)
		if a.Result != "" {
			files, lines = "-", "-"
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", a.ID, clikit.Printable(a.Executor), a.State, files, lines, a.Took)
		if checked {
			verdict := "-"
			if a.Check != nil {
				verdict = "pass"
				if !a.Check.Passed {
					verdict = fmt.Sprintf("FAIL (exit %d)", a.Check.Exit)
				}
			}
			row += "\t" + verdict
		}
		summary := clikit.Printable(a.Summary)
		if a.Result != "" {
			summary = "(" + clikit.Printable(a.Result) + ")"
		}
		fmt.Fprintln(tw, row+"\t"+summary)
	}
	tw.Flush()
	fmt.Fprintf(w, "apply one: awcp-ctl apply ID (the others are discarded; --keep keeps them); diff one: awcp-ctl diff ID\n")
	return nil
}

// exportScopes splits base's task among executors by scope: each of
// scopes is PATH=PEER, and PEER gets the whole directory, read-write only
// under PATH, all at once (their scopes must not overlap: each would be
// refused as the directory busy). It waits for them all and reports each.
func exportScopes(ctx context.Context, c *cli.Context, e *env, base delegator.ExportRequest, scopes []string) error {
	if c.IsSet("snapshot") && base.Snapshot != lease.SnapshotAuto {
		return clikit.UsageError("scopes write in place, each in its own part of the directory: --snapshot must be auto")
	}
	base.Group = delegator.NewGroup()
	tasks := map[string]string{} // a scope's own prompt
	for _, sp := range c.StringSlice("scope-prompt") {
		scope, text, ok := strings.Cut(sp, "=")
		if !ok || scope == "" || strings.TrimSpace(text) == "" {
			return clikit.UsageError("--scope-prompt %q: give PATH=TEXT", sp)
		}
		tasks[scope] = text
	}
	var reqs []delegator.ExportRequest
	var names []string
	for _, sc := range scopes {
		scope, peer, ok := strings.Cut(sc, "=")
		if !ok || scope == "" || peer == "" {
			return clikit.UsageError("--scope %q: give PATH=PEER", sc)
		}
		req := base
		req.Scope, req.Peer = scope, peer
		req.Prompt = strings.TrimSpace(base.Prompt + "\n\n" + tasks[scope]) // the delegator adds the scope's note
		delete(tasks, scope)
		reqs, names = append(reqs, req), append(names, "scope "+scope)
	}
	for scope := range tasks {
		fmt.Fprintf(c.App.ErrWriter, "awcp: --scope-prompt %s: no --scope %s=PEER: not used\n", scope, scope)
	}
	// All of them admitted before any starts: one started would change
	// the directory the refused one was to share.
	var paths []string
	for _, r := range reqs {
		paths = append(paths, r.Scope)
	}
	if err := delegator.AdmitScopes(base.Dir, paths); err != nil {
		return fail(c, err)
	}
	if c.Bool("wait") {
		// Each scope waits for its area as a single export does, until a
		// pass finds them all free at once.
		for waited := true; waited; {
			waited = false
			for _, r := range reqs {
				w, err := waitForHolder(ctx, c, e, r)
				if err != nil {
					return err
				}
				waited = waited || w
			}
		}
	}
	if done, err := runGroup(ctx, c, e, base.Group, reqs, names); !done || err != nil {
		return err
	}
	dlg, err := e.delegator(nil)
	if err != nil {
		return err
	}
	members, err := dlg.GroupMembers(base.Group)
	if err != nil {
		return err
	}
	failed := len(members) < len(scopes)
	for _, d := range members {
		fmt.Fprintf(c.App.Writer, "scope %s: delegation %s %s", d.Policy.WriteScope, d.ID, d.State)
		if d.Summary != "" {
			fmt.Fprintf(c.App.Writer, ": %s", clikit.Printable(strings.SplitN(strings.TrimSpace(d.Summary), "\n", 2)[0]))
		}
		fmt.Fprintln(c.App.Writer)
		for _, ch := range d.Changes {
			fmt.Fprintf(c.App.Writer, "  %s\n", clikit.Printable(ch))
		}
		if d.Audit != nil && d.Audit.Refused > 0 {
			fmt.Fprintf(c.App.Writer, "  refused: %d (outside its scope, or the policy's)\n", d.Audit.Refused)
		}
		failed = failed || d.State != lease.Completed
	}
	if failed {
		return clikit.Failed()
	}
	return nil
}

// waitForHolder waits while a live delegation that writes in place holds
// what req would change (its directory, or its scope there), saying which
// and how many wait before it (spec §6.5: a later task waits rather than
// fails). waited reports that it had to.
func waitForHolder(ctx context.Context, c *cli.Context, e *env, req delegator.ExportRequest) (waited bool, err error) {
	if req.Access == "ro" || req.Snapshot == lease.SnapshotStaged || req.Snapshot == lease.SnapshotDiscard {
		return false, nil // it writes nothing in place
	}
	area := req.Dir
	if req.Scope != "" {
		area = filepath.Join(req.Dir, filepath.FromSlash(req.Scope))
	}
	// The queue: a file per waiter in the state dir, named by when it
	// came, holding what it waits for; a waiter goes once none before it
	// waits for the same.
	queue := filepath.Join(e.state, "waiting")
	if err := os.MkdirAll(queue, 0o700); err != nil {
		return false, err
	}
	me := filepath.Join(queue, fmt.Sprintf("%020d-%d", time.Now().UnixNano(), os.Getpid()))
	if err := os.WriteFile(me, []byte(area), 0o600); err != nil {
		return false, err
	}
	defer os.Remove(me)
	said := ""
	for {
		ds, err := e.store.Delegations()
		if err != nil {
			return false, err
		}
		holder := ""
		for _, d := range ds {
			if !d.State.Terminal() && d.WritesInPlace() && lease.Overlaps(d.WriteArea(), area) {
				holder = d.ID
				break
			}
		}
		ahead := waitersAhead(queue, filepath.Base(me), area)
		if holder == "" && ahead == 0 {
			return said != "", nil
		}
		if now := fmt.Sprintf("%s %d", holder, ahead); now != said {
			if holder == "" {
				holder = "none now"
			}
			fmt.Fprintf(c.App.ErrWriter, "awcp: waiting: delegation %s holds %s; %d export(s) wait before this one (--wait)\n", holder, area, ahead)
			said = now
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitersAhead counts the waiters queued before me (by name) for an area
// overlapping area whose process still runs.
func waitersAhead(queue, me, area string) int {
	entries, err := os.ReadDir(queue)
	if err != nil {
		return 0
	}
	n := 0
	for _, en := range entries {
		if en.Name() >= me {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(en.Name()[strings.IndexByte(en.Name(), '-')+1:], "%d", &pid); err != nil ||
			syscall.Kill(pid, 0) != nil { // gone without cleaning up
			os.Remove(filepath.Join(queue, en.Name()))
			continue
		}
		if b, err := os.ReadFile(filepath.Join(queue, en.Name())); err == nil && lease.Overlaps(string(b), area) {
			n++
		}
	}
	return n
}
