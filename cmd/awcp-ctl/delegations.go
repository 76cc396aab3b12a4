package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// Exit codes of a delegation that has not ended: exitPending when it runs
// or a session awaits its next prompt, exitAwaitsPermission when its agent
// waits on a permission decision (export --session, answer, output).
const (
	exitPending          = 3
	exitAwaitsPermission = 5
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// view is a delegation as shown to the user: no secret in it.
type view struct {
	*lease.Delegation
	Token      string `json:"token,omitempty"`
	SessionKey string `json:"sessionKey,omitempty"`
}

func redact(d *lease.Delegation) view { return view{Delegation: d} }

// report prints how a delegation stands or ended: the result to stdout, a
// failure (code, message, hint) to stderr. It returns the exit error.
func report(c *cli.Context, d *lease.Delegation) error { return reportAs(c, d, false) }

// reportFollowed is report after the agent's output was shown line by
// line as it came (export, waiting): it is not repeated at the end.
func reportFollowed(c *cli.Context, d *lease.Delegation) error { return reportAs(c, d, true) }

func reportAs(c *cli.Context, d *lease.Delegation, outputShown bool) error {
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, redact(d)); err != nil {
			return err
		}
		return exitFor(d)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "delegation %s %s\n", d.ID, d.State)
	transport := d.Transport
	if d.Connect == control.ConnectReverse {
		transport += " in reverse"
	}
	fmt.Fprintf(w, "  directory: %s\n  executor:  %s (%s, %s)\n", d.LocalDir, d.Peer, transport, d.AccessMode)
	if d.Group != "" {
		fmt.Fprintf(w, "  attempt:   of group %s (awcp-ctl compare %s)\n", d.Group, d.Group)
	}
	if d.Channel != nil && !d.State.Terminal() {
		fmt.Fprintf(w, "  channel:   %s\n", delegator.ChannelText(d.Channel))
	}
	for _, g := range d.Gaps {
		fmt.Fprintf(w, "  lost:      events %d–%d (the executor no longer had them when its stream was followed again)\n", g.From, g.To)
	}
	if d.State == lease.Completed {
		fmt.Fprintf(w, "summary:\n%s\n", indent(clikit.PrintableText(d.Summary)))
		if len(d.Highlights) > 0 {
			fmt.Fprintf(w, "highlights:\n%s\n", indent(strings.Join(printables(d.Highlights), "\n")))
		}
	}
	if len(d.Changes) > 0 {
		title := "changes made live in " + d.LocalDir
		switch {
		case d.SnapshotMode == lease.SnapshotDiscard:
			title = "changes the agent made, discarded (" + d.LocalDir + " is untouched)"
		case d.Staged != nil && d.Staged.State != lease.StagedApplied && d.Staged.State != lease.StagedConflicted:
			title = "changes staged for review (" + d.LocalDir + " is untouched)"
		case d.Transport == control.TransportArchive || d.Staged != nil:
			title = "changes applied to " + d.LocalDir
		}
		fmt.Fprintf(w, "%s:\n%s\n", title, indent(strings.Join(printableChanges(d.Changes), "\n")))
	} else if d.State == lease.Completed && d.AccessMode == control.AccessRW && d.Staged == nil &&
		(d.Transport == control.TransportArchive || d.Audit != nil) {
		// Completed is the agent's word that its turn ended, not that it
		// did the task: a run that was to write and wrote nothing says so.
		fmt.Fprintf(w, "changes: none (the agent wrote nothing in %s)\n", d.LocalDir)
	}
	if len(d.Conflicts) > 0 {
		fmt.Fprintf(w, "conflicts (local versions kept):\n%s\n", indent(strings.Join(printables(d.Conflicts), "\n")))
	}
	if liveChangesStay(d) {
		fmt.Fprintf(w, "note: the %s delegation's changes above stay in %s: the live mount wrote them there as the agent worked, and ending it undoes nothing\n",
			d.State, d.LocalDir)
	}
	if line := stagedLine(d); line != "" {
		fmt.Fprintf(w, "result: %s\n", line)
	}
	for _, n := range d.Notes {
		fmt.Fprintf(w, "note: %s\n", clikit.PrintableText(n))
	}
	if r := d.MountRefused; r != nil {
		fmt.Fprintf(w, "refused at the mount: %d writes of the agent (a read-only delegation): %s\n", r.Count, strings.Join(printables(r.Examples), "; "))
	}
	if d.AgentStderr != "" {
		fmt.Fprintf(w, "agent stderr (its end):\n%s\n", indent(clikit.PrintableText(d.AgentStderr)))
	}
	if d.Audit != nil {
		fmt.Fprintf(w, "audit: %s\n", summaryLine(d.Audit, d.MountRefused))
		if !d.Audit.FromDiff {
			fmt.Fprintf(w, "  every operation: awcp-ctl audit %s\n", d.ID)
		}
	}
	printPermissions(w, d)
	printTurn(w, d)
	if ch := d.SessionChannel; ch != nil {
		declared := "the editor declared " + strings.Join(ch.Capabilities, ", ")
		if len(ch.Capabilities) == 0 {
			declared = "no file or terminal capability declared" // a CLI or MCP session, or a bare editor
		}
		fmt.Fprintf(w, "session channel %s (%s to the %s; %s), last seen %s\n", clikit.Printable(ch.ID), ch.Transport, ch.PeerRole,
			declared, ch.LastSeenAt.Local().Format(time.TimeOnly))
		for _, ev := range d.SessionEvents[max(0, len(d.SessionEvents)-outputProgressLines):] {
			fmt.Fprintf(w, "  %s  %s  %s\n", ev.At.Local().Format(time.TimeOnly), ev.Event, clikit.PrintableText(ev.Detail))
		}
	}
	if n := len(d.Progress); n > 0 && !outputShown {
		last := d.Progress[max(0, n-outputProgressLines):]
		fmt.Fprintf(w, "agent output (last %d lines; all kept: awcp-ctl logs %s):\n", len(last), d.ID)
		for _, l := range last {
			// An agent's chunk often ends its line itself: each of its
			// lines is shown as one, not the chunk quoted whole.
			for _, line := range strings.Split(strings.TrimRight(l.Text, "\r\n"), "\n") {
				fmt.Fprintf(w, "  | %s\n", clikit.PrintableText(line))
			}
		}
	}
	if f := d.Failed(); f != nil {
		fmt.Fprintf(c.App.ErrWriter, "error %s: %s\n", clikit.Printable(f.Code), clikit.PrintableText(f.Message))
		if len(f.CallChain) > 0 {
			fmt.Fprintf(c.App.ErrWriter, "call chain: %s\n", control.FormatCallChain(f.CallChain))
		}
		if f.Hint != "" {
			fmt.Fprintf(c.App.ErrWriter, "hint: %s\n", f.Hint)
		}
	}
	if !d.State.Terminal() && !d.ExpiresAt.IsZero() {
		fmt.Fprintf(w, "  lease expires: %s\n", d.ExpiresAt.Local().Format(time.DateTime))
	}
	return exitFor(d)
}

// printPermissions shows the agent's permission requests: how each was
// decided and by whom, and how to answer the pending ones.
func printPermissions(w io.Writer, d *lease.Delegation) {
	for _, p := range d.Permissions {
		switch p.Outcome {
		case control.PermissionPending:
			fmt.Fprintf(w, "permission %s PENDING: %s\n", p.RequestID, p.Title)
			printHowToAnswer(w, d.ID, p.RequestID, p.Options)
		case control.PermissionSelected:
			fmt.Fprintf(w, "permission %s: %s: %s, decided by %s%s\n", p.RequestID, p.Title, p.OptionID, p.DecidedBy, provenance(p))
		default:
			fmt.Fprintf(w, "permission %s: %s: %s (%s)%s\n", p.RequestID, p.Title, p.Outcome, p.DecidedBy, provenance(p))
		}
	}
}

// provenance is how a decided permission request was decided and who
// asked: " (user: awcp-ctl permit by ana; asked by the agent on URL)".
func provenance(p lease.Permission) string {
	var parts []string
	switch {
	case p.How != "" && p.Answerer != "":
		parts = append(parts, p.How+": "+p.Answerer)
	case p.How != "":
		parts = append(parts, p.How)
	}
	if p.AskedBy != "" {
		parts = append(parts, "asked by "+p.AskedBy)
	}
	if p.Holds != "" {
		parts = append(parts, "holds for "+p.Holds)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// printHowToAnswer follows a pending permission request with its options
// and the command that answers it.
func printHowToAnswer(w io.Writer, id, requestID string, opts []lease.PermissionOption) {
	fmt.Fprintf(w, "  options: %s\n  answer: awcp-ctl permit %s %s OPTION\n", lease.Choices(opts), id, requestID)
}

func exitFor(d *lease.Delegation) error {
	switch {
	case d.State == lease.Completed:
		return nil
	case !d.State.Terminal() && d.PendingPermission() != nil:
		return clikit.Exit(exitAwaitsPermission)
	case !d.State.Terminal():
		return clikit.Exit(exitPending)
	case d.Failure != nil && d.Failure.Code == control.CodeUsage:
		return clikit.Exit(clikit.ExitUsage) // the caller's own mistake, as a bad flag
	}
	return clikit.Failed()
}

// outputProgressLines is how many of the agent's last progress lines a
// delegation's report shows.
const outputProgressLines = 10

// liveChangesStay reports whether d ended other than completed after its
// agent changed the directory through the live mount: those changes are
// the owner's now, and the user must be told.
func liveChangesStay(d *lease.Delegation) bool {
	return d.Transport == control.TransportSSHFS && d.State.Terminal() && d.State != lease.Completed && len(d.Changes) > 0 && d.Staged == nil
}

func indent(s string) string { return "  " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ") }

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "list delegations, or show one, or a group's (grp-…: attempts or scopes)",
		ArgsUsage: "[ID|GROUP]",
		Flags: append(clikit.CommonFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.BoolFlag{Name: "active", Usage: "only the delegations that have not ended"},
			&cli.StringSliceFlag{Name: "state", Usage: "only the delegations in these states (running, completed, error, cancelled, expired, …); repeatable"},
		),
		Action: func(c *cli.Context) error {
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			if arg := c.Args().First(); strings.HasPrefix(arg, delegator.GroupPrefix) {
				return printGroup(c, e, arg)
			}
			if c.Args().Len() > 0 {
				d, err := e.resolve(c.Args().First())
				if err != nil {
					return err
				}
				report(c, d) // status informs; its exit code does not judge the outcome
				return nil
			}
			ds, err := e.store.Delegations()
			if err != nil {
				return err
			}
			states := c.StringSlice("state")
			ds = slices.DeleteFunc(ds, func(d *lease.Delegation) bool {
				return d.RefusedHere() || c.Bool("active") && d.State.Terminal() || len(states) > 0 && !slices.Contains(states, string(d.State))
			})
			if c.Bool("json") {
				out := make([]view, 0, len(ds))
				for _, d := range ds {
					out = append(out, redact(d))
				}
				return printJSON(c.App.Writer, out)
			}
			if len(ds) == 0 {
				fmt.Fprintln(c.App.Writer, "no delegations (`awcp-ctl prune` removes ended ones; they go by themselves after 7 days)")
				return nil
			}
			printTable(c.App.Writer, ds)
			return nil
		},
	}
}

// printTable lists delegations, one a line: the state (with how the
// executor's side stands, where that is not simply running), the
// executor (its name, or its URL), the transport and access in words.
func printTable(w io.Writer, ds []*lease.Delegation) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tGROUP\tEXECUTOR\tTRANSPORT\tACCESS\tCREATED\tDIRECTORY\tTASK")
	for _, d := range ds {
		state := string(d.State)
		if d.Awaiting() {
			state = "awaiting" // a session's agent waits on its user
			if p := d.PendingPermission(); p != nil {
				state += " (a permission: " + p.RequestID + ")"
			}
		} else if ch := d.Channel; ch != nil && !d.State.Terminal() && ch.State != lease.ChannelRunning {
			if ch.State == lease.ChannelFinishing {
				state += " (applying the result)"
			} else {
				state += " (executor " + ch.State + ")"
			}
		}
		if st := d.Staged; st != nil && d.SnapshotMode == lease.SnapshotDiscard {
			state += " (result discarded)"
		} else if st != nil && d.State.Terminal() && st.State == lease.StagedPending {
			state += " (staged " + delegator.HumanBytes(st.Bytes()) + ", pending review)"
		} else if st != nil && d.State.Terminal() {
			state += " (staged, " + st.State + ")"
		}
		executor := d.Peer
		if d.PeerName != "" {
			executor = d.PeerName
		}
		transport := "archive"
		if d.Transport == control.TransportSSHFS {
			transport = "live mount"
			if d.Connect == control.ConnectReverse {
				transport = "live mount, reverse"
			}
		}
		access := "read-write"
		if d.AccessMode == control.AccessRO {
			access = "read-only"
		}
		group := d.Group
		if group == "" {
			group = "-"
		}
		if f := d.Failed(); f != nil && d.State.Terminal() {
			state += " (" + f.Code + ")" // the reason's code; status ID says the rest
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, state, group, clikit.Printable(executor), transport, access,
			d.CreatedAt.Local().Format(time.DateTime), d.LocalDir, clikit.Printable(delegator.TaskLine(d)))
	}
	tw.Flush()
}

func outputCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "output",
		Usage:     "show a delegation's result (exit 0 completed, 1 ended otherwise, 3 not ended yet)",
		ArgsUsage: "ID",
		Flags: append(clikit.CommonFlags(),
			&cli.BoolFlag{Name: "block", Usage: "wait until the delegation ends (a session: or its agent awaits)"},
			clikit.DurationFlag("timeout", 60*time.Second, "longest wait with --block"),
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		),
		Action: func(c *cli.Context) error {
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			d, err := e.resolve(c.Args().First())
			if err != nil {
				return err
			}
			if c.Bool("block") {
				deadline := time.NewTimer(clikit.Duration(c, "timeout"))
				defer deadline.Stop()
				tick := time.NewTicker(200 * time.Millisecond)
				defer tick.Stop()
			wait:
				for !d.State.Terminal() && !d.Awaiting() {
					select {
					case <-ctx.Done():
						break wait
					case <-deadline.C:
						break wait
					case <-tick.C:
					}
					if d, err = e.store.Delegation(d.ID); err != nil {
						return err
					}
				}
			}
			return report(c, d)
		},
	}
}

func cancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel a delegation, a group's attempts, or all live ones",
		ArgsUsage: "ID | GROUP | --all",
		Flags: append(clikit.CommonFlags(),
			&cli.BoolFlag{Name: "all", Usage: "cancel every live delegation"},
			&cli.BoolFlag{Name: "turn", Usage: "of a session: cancel only the turn that runs; the session stays open"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		),
		Action: func(c *cli.Context) error {
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			if c.Bool("turn") {
				return cancelTurn(c, e)
			}
			var ids []string
			if c.Bool("all") {
				ds, err := e.store.Delegations()
				if err != nil {
					return err
				}
				for _, d := range ds {
					if !d.State.Terminal() {
						ids = append(ids, d.ID)
					}
				}
			} else if arg := c.Args().First(); strings.HasPrefix(arg, delegator.GroupPrefix) {
				// A group: its attempts still running.
				ds, err := e.store.Delegations()
				if err != nil {
					return err
				}
				for _, d := range ds {
					if d.Group == arg && !d.State.Terminal() {
						ids = append(ids, d.ID)
					}
				}
				if len(ids) == 0 {
					return fmt.Errorf("no attempt of group %s runs", arg)
				}
			} else {
				d, err := e.resolve(arg)
				if err != nil {
					return err
				}
				if d.State.Terminal() {
					return fmt.Errorf("delegation %s already ended (%s)", d.ID, d.State)
				}
				ids = []string{d.ID}
			}
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			var failed bool
			for _, id := range ids {
				if err := cancelOne(e, dlg, id); err != nil {
					failed = true
					fmt.Fprintf(c.App.ErrWriter, "cancel %s: %v\n", id, err)
					continue
				}
				fmt.Fprintf(c.App.Writer, "cancelled %s\n", id)
			}
			if failed {
				return clikit.Failed()
			}
			return nil
		},
	}
}

// cancelOne cancels delegation id through the daemon that follows it,
// where one runs (it then ends what it follows), else here.
func cancelOne(e *env, dlg *delegator.Delegator, id string) error {
	if daemon, ok := delegator.DialLocal(e.socket()); ok {
		return daemon.Cancel(id)
	}
	_, err := dlg.Cancel(context.Background(), id)
	return err
}

// cancelTurn asks the process driving session ID to cancel the turn that
// runs (session/cancel); the session stays open for the next.
func cancelTurn(c *cli.Context, e *env) error {
	d, err := e.resolve(c.Args().First())
	if err != nil {
		return err
	}
	if !d.SessionDriven {
		return clikit.UsageError("delegation %s is no session driven from here (--turn cancels a turn of export --session or an MCP session)", d.ID)
	}
	var n int
	_, err = e.store.UpdateDelegation(d.ID, func(d *lease.Delegation) error {
		t := d.LastTurn()
		if d.State.Terminal() || t == nil || t.Ended() {
			return control.Errorf(control.CodeUsage, "session %s has no turn running", d.ID)
		}
		t.CancelAsked, n = true, t.N
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "asked to cancel turn %d of %s; the session stays open\n", n, d.ID)
	return nil
}

func permitCommand() *cli.Command {
	return &cli.Command{
		Name:      "permit",
		Usage:     "answer a permission request the executor's agent forwarded",
		ArgsUsage: "ID REQUEST OPTION",
		Flags:     clikit.CommonFlags(),
		Action: func(c *cli.Context) error {
			if c.Args().Len() != 3 {
				return clikit.UsageError("permit takes a delegation id, a request id and an option id (see `awcp-ctl output ID`)")
			}
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			d, err := e.resolve(c.Args().Get(0))
			if err != nil {
				return err
			}
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			req, opt := c.Args().Get(1), c.Args().Get(2)
			ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
			defer cancel()
			if err := dlg.Permit(ctx, d.ID, req, opt, "awcp-ctl permit by "+userName()); err != nil {
				return fail(c, err)
			}
			fmt.Fprintf(c.App.Writer, "answered %s of %s: %s\n", req, d.ID, opt)
			return nil
		},
	}
}

// userName is who runs this command, for the record of what they decided.
func userName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

// printables is each of names as clikit.Printable shows it.
// printableChanges is change lines ("A path") with each path quoted as
// Printable quotes it: the executor chose the names.
func printableChanges(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		kind, p, ok := strings.Cut(l, " ")
		if !ok {
			out[i] = clikit.Printable(l)
			continue
		}
		out[i] = kind + " " + clikit.Printable(p)
	}
	return out
}

func printables(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = clikit.Printable(n)
	}
	return out
}

// transportOf is --transport with the live mount's own names read as the
// wire's: live is sshfs, live-reverse sshfs-reverse.
func transportOf(c *cli.Context) string {
	switch t := c.String("transport"); t {
	case delegator.TransportLive:
		return control.TransportSSHFS
	case delegator.TransportLiveReverse:
		return delegator.TransportSSHFSReverse
	default:
		return t
	}
}

// printGroup shows group: its state (running while a member runs, then
// how its members ended) and its members, as the list shows them.
func printGroup(c *cli.Context, e *env, group string) error {
	dlg, err := e.delegator(nil)
	if err != nil {
		return err
	}
	members, err := dlg.GroupMembers(group)
	if err != nil {
		return fail(c, err)
	}
	state := delegator.GroupState(members)
	if c.Bool("json") {
		views := make([]view, 0, len(members))
		for _, d := range members {
			views = append(views, redact(d))
		}
		return printJSON(c.App.Writer, map[string]any{"group": group, "state": state, "members": views})
	}
	fmt.Fprintf(c.App.Writer, "group %s %s, %d members\n", group, state, len(members))
	printTable(c.App.Writer, members)
	return nil
}
