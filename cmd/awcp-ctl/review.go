package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// exitConflicts is apply's exit code when the owner's and the executor's
// changes met: the owner's versions were kept and the executor's saved
// beside them.
const exitConflicts = 4

func snapshotFlag() cli.Flag {
	return &cli.StringFlag{Name: "snapshot", Usage: "which of an archive result's snapshots (default: the one the executor recommended)"}
}

// diffCommand shows a staged result.
func diffCommand() *cli.Command {
	return &cli.Command{
		Name:      "diff",
		Usage:     "show a staged result as a unified diff (works while the agent still runs on a live mount)",
		ArgsUsage: "ID",
		Flags: append(clikit.CommonFlags(), snapshotFlag(),
			&cli.BoolFlag{Name: "stat", Usage: "a line per changed file with its line counts"},
			&cli.BoolFlag{Name: "name-status", Usage: "a line per changed file: A added, M modified, D deleted, T type changed"},
			&cli.BoolFlag{Name: "json", Usage: "the changed files as JSON"},
		),
		Action: func(c *cli.Context) error {
			dlg, d, err := delegatorFor(c)
			if err != nil {
				return err
			}
			r, _, err := dlg.OpenResult(d.ID, c.String("snapshot"))
			if err != nil {
				return fail(c, err)
			}
			defer r.Close()
			w := bufio.NewWriter(c.App.Writer)
			defer w.Flush()
			switch {
			case c.Bool("json"):
				files, err := r.Files()
				if err != nil {
					return err
				}
				return printJSON(w, map[string]any{"delegation": d.ID, "files": files})
			case c.Bool("stat"):
				return r.Stat(w)
			case c.Bool("name-status"):
				return r.NameStatus(w)
			}
			return r.Diff(w)
		},
	}
}

// applyCommand applies a staged result, or records it on a branch.
func applyCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "apply",
		Usage:     "apply a staged result to the directory, three-way: your edits made meanwhile stay, and a file both sides changed is a conflict (exit 4)",
		ArgsUsage: "ID",
		Flags: append(clikit.CommonFlags(), snapshotFlag(),
			&cli.StringFlag{Name: "branch", Usage: "in a git work tree: record the result as a commit on this new branch instead, leaving the working tree as it is"},
			&cli.BoolFlag{Name: "json", Usage: "print what was done as JSON"},
			&cli.BoolFlag{Name: "allow-git-control", Usage: "also write what the executor changed of what git runs or obeys (.git/config, .git/hooks, .git/info, …): left out unless given (diff shows it)"},
			&cli.BoolFlag{Name: "keep", Usage: "of an attempt: keep the group's other attempts (by default applying one discards them)"},
		),
		Action: func(c *cli.Context) error {
			dlg, d, err := delegatorFor(c)
			if err != nil {
				return err
			}
			out, err := dlg.ApplyResult(ctx, d.ID, c.String("snapshot"), c.String("branch"), c.Bool("allow-git-control"))
			if err != nil {
				return fail(c, err)
			}
			if c.Bool("json") {
				printJSON(c.App.Writer, out)
			} else if out.Branch != "" && out.Commits > 0 {
				fmt.Fprintf(c.App.Writer, "recorded on branch %s: the agent's %d commit(s) on top of your HEAD, the last %s; your working tree is as it was\n",
					out.Branch, out.Commits, shortCommit(out.Commit))
			} else if out.Branch != "" {
				fmt.Fprintf(c.App.Writer, "recorded on branch %s (commit %s); your working tree is as it was\n", out.Branch, shortCommit(out.Commit))
			} else {
				printApplied(c.App.Writer, out.Report.Created, out.Report.Modified, out.Report.Deleted, out.Report.Conflicts)
				for _, p := range out.Report.Merged {
					fmt.Fprintf(c.App.Writer, "merged: %s (changed on both sides, on different lines: both kept)\n", clikit.Printable(p))
				}
				for _, p := range out.Report.Ignored {
					fmt.Fprintf(c.App.Writer, "left out: %s\n", clikit.Printable(p))
				}
			}
			if d.Group != "" && !c.Bool("keep") {
				gone, err := dlg.DiscardAttemptsBut(d.ID)
				if err != nil {
					fmt.Fprintf(c.App.ErrWriter, "awcp: the group's other attempts: %v\n", err)
				}
				if len(gone) > 0 {
					fmt.Fprintf(c.App.ErrWriter, "awcp: discarded the other attempts of %s: %s\n", d.Group, strings.Join(gone, " "))
				}
			}
			if out.Report != nil && len(out.Report.Conflicts) > 0 {
				return clikit.Exit(exitConflicts)
			}
			return nil
		},
	}
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func printApplied(w io.Writer, created, modified, deleted, conflicts []string) {
	for _, x := range []struct {
		mark  string
		paths []string
	}{{"A", created}, {"M", modified}, {"D", deleted}} {
		for _, p := range x.paths {
			fmt.Fprintf(w, "%s %s\n", x.mark, clikit.Printable(p))
		}
	}
	// Directories (listed with their slash) are counted apart from files.
	count := func(paths []string) string {
		dirs := 0
		for _, p := range paths {
			if strings.HasSuffix(p, "/") {
				dirs++
			}
		}
		if dirs == 0 {
			return fmt.Sprint(len(paths))
		}
		return fmt.Sprintf("%d (and %d director%s)", len(paths)-dirs, dirs, map[bool]string{true: "y", false: "ies"}[dirs == 1])
	}
	fmt.Fprintf(w, "applied: %s added, %s modified, %s deleted\n", count(created), count(modified), count(deleted))
	if len(conflicts) > 0 {
		fmt.Fprintf(w, "conflicts (your versions kept):\n")
		for _, c := range conflicts {
			fmt.Fprintf(w, "  %s\n", clikit.Printable(c))
		}
	}
}

// discardCommand drops a staged result.
func discardCommand() *cli.Command {
	return &cli.Command{
		Name:      "discard",
		Usage:     "drop a staged result (or one snapshot of it): your directory stays as it is",
		ArgsUsage: "ID",
		Flags:     append(clikit.CommonFlags(), snapshotFlag()),
		Action: func(c *cli.Context) error {
			dlg, d, err := delegatorFor(c)
			if err != nil {
				return err
			}
			if err := dlg.DiscardResult(d.ID, c.String("snapshot")); err != nil {
				return fail(c, err)
			}
			what := "the staged result"
			if s := c.String("snapshot"); s != "" {
				what = "snapshot " + s
			}
			fmt.Fprintf(c.App.Writer, "discarded %s of %s\n", what, d.ID)
			return nil
		},
	}
}

// stagedLine says how a delegation's staged result stands, for status and
// the list; "" if it has none.
func stagedLine(d *lease.Delegation) string {
	st := d.Staged
	if st == nil {
		return ""
	}
	if d.SnapshotMode == lease.SnapshotDiscard {
		if !d.State.Terminal() {
			return "discard: the agent's changes go to a staging area, removed at the end"
		}
		return "discarded (--snapshot discard): " + d.LocalDir + " is as it was"
	}
	switch st.State {
	case lease.StagedPending:
		if !d.State.Terminal() {
			return "staged: the agent's changes go to a staging area; `awcp-ctl diff " + d.ID + "` shows them"
		}
		parts := []string{fmt.Sprintf("staged, pending review (%s", delegator.HumanBytes(st.Bytes()))}
		if len(st.Snapshots) > 1 {
			parts = append(parts, fmt.Sprintf(", %d snapshots", len(st.Snapshots)))
		}
		if !st.Until.IsZero() {
			parts = append(parts, ", kept until "+st.Until.Local().Format("2006-01-02 15:04"))
		}
		return strings.Join(parts, "") + "): awcp-ctl diff|apply|discard " + d.ID
	case lease.StagedApplied:
		if st.Branch != "" {
			return "staged result recorded on branch " + st.Branch
		}
		return "staged result applied"
	case lease.StagedEmpty:
		return "nothing staged: no result, or no change (see notes)"
	case lease.StagedConflicted:
		return fmt.Sprintf("staged result applied but for %d conflict(s): the executor's versions wait beside yours (see conflicts)", len(d.Conflicts))
	}
	return "staged result " + st.State
}
