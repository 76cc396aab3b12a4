package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/turns"
	"github.com/awcp/awcp/lease"
)

// idleTTLFlag is how long a session may go with nothing through it
// (seed 003 §6.4).
func idleTTLFlag() cli.Flag {
	return clikit.DurationFlag("idle-ttl", 30*time.Minute, "end a session nothing went through for this long, no turn running; 0: never", "AWCP_IDLE_TTL")
}

// driver drives dlg's sessions whose turns come from the store.
func (e *env) driver(dlg *delegator.Delegator, c *cli.Context) *turns.Driver {
	idle := 30 * time.Minute
	if c != nil && c.IsSet("idle-ttl") {
		idle = clikit.Duration(c, "idle-ttl")
	}
	return &turns.Driver{Delegator: dlg, Store: e.store, IdleTTL: idle, Logger: e.log}
}

// Sessions from the command line (seed 003 §5.5): `export --session new`
// opens one, held by the daemon (started if needed) so that it outlives
// the command, and prints the agent's first turn once it awaits; `answer`
// and `export --session ID` go on with it; `close` ends it.

// exportSession opens a session with req.Prompt its first turn, and
// follows the turn until the agent awaits.
func exportSession(ctx context.Context, c *cli.Context, e *env, req delegator.ExportRequest) error {
	daemon, err := daemonOrStart(c, e)
	if err != nil {
		return err
	}
	req.Driven = true
	newID, err := daemon.Export(req)
	if err != nil {
		return fail(c, err)
	}
	fmt.Fprintf(c.App.ErrWriter, "awcp: session %s: lending %s to %s\n", newID, req.Dir, req.Peer)
	return followTurn(ctx, c, e, newID)
}

// say queues prompt as session id's next turn and follows it.
func say(ctx context.Context, c *cli.Context, e *env, id, prompt string) error {
	d, err := e.resolve(id)
	if err != nil {
		return err
	}
	dlg, err := e.delegator(nil)
	if err != nil {
		return err
	}
	if _, err := dlg.Say(d.ID, prompt, "awcp-ctl by "+userName()); err != nil {
		return fail(c, err)
	}
	return followTurn(ctx, c, e, d.ID)
}

// followTurn prints session id's progress until its agent awaits or the
// session ends, then the turn's reply (stdout) and what it waits for.
func followTurn(ctx context.Context, c *cli.Context, e *env, id string) error {
	p := &logPrinter{w: c.App.ErrWriter}
	var d *lease.Delegation
	var err error
	if d, err = e.store.Delegation(id); err != nil {
		return err
	}
	p.last = lastLine(d) // what came before this turn was shown before
	if t := d.LastTurn(); t != nil {
		p.holdEnd = fmt.Sprintf("turn %d: ", t.N)
	} else {
		p.holdEnd = "turn 1: " // the session's first, not queued yet
	}
	for {
		if d, err = e.store.Delegation(id); err != nil {
			return err
		}
		p.print(d)
		if d.State.Terminal() || d.Awaiting() {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(c.App.ErrWriter, "awcp: no longer following; session %s goes on (awcp-ctl output %s)\n", id, id)
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	if c.Bool("json") {
		p.flushHeld()
		if err := printJSON(c.App.Writer, redact(d)); err != nil {
			return err
		}
		return exitFor(d) // what it awaits, or that it failed to open or ended, by its exit too
	}
	t := d.LastTurn()
	if t != nil && t.Reply != "" {
		fmt.Fprintln(c.App.Writer, clikit.PrintableText(strings.TrimRight(t.Reply, "\n")))
	}
	p.flushHeld() // the turn's end after all it said and did
	if t != nil && t.Error != "" {
		fmt.Fprintf(c.App.ErrWriter, "awcp: turn %d failed: %s\n", t.N, clikit.PrintableText(t.Error))
	}
	switch pending := d.PendingPermission(); {
	case d.State.Terminal():
		return report(c, d)
	case pending != nil:
		fmt.Fprintf(c.App.ErrWriter, "awcp: session %s awaits a permission decision (%s): %s\n", d.ID, clikit.Printable(pending.RequestID), clikit.PrintableText(pending.Title))
		fmt.Fprintf(c.App.ErrWriter, "awcp: answer with: awcp-ctl answer %s --option OPTION (one of %s)\n", d.ID, clikit.Printable(lease.Choices(pending.Options)))
	default:
		fmt.Fprintf(c.App.ErrWriter, "awcp: session %s awaits your next prompt: awcp-ctl answer %s TEXT; awcp-ctl close %s ends it\n", d.ID, d.ID, d.ID)
	}
	// Not 0: the session has not ended; a script tells what it awaits.
	return exitFor(d)
}

// lastLine is the last of d's progress lines, or nil.
func lastLine(d *lease.Delegation) *lease.ProgressLine {
	if len(d.Progress) == 0 {
		return nil
	}
	return &d.Progress[len(d.Progress)-1]
}

// answerCommand answers what a session awaits: a permission decision
// (--option) or the agent's question (TEXT, the next turn).
func answerCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "answer",
		Usage:     "answer what a session's agent awaits: a permission (--option) or its question (TEXT, the next turn); then follow the turn",
		ArgsUsage: "ID [TEXT]",
		Flags: append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "option", Usage: "the option chosen for the permission the agent awaits"},
			&cli.BoolFlag{Name: "json", Usage: "print the session's record as JSON once the agent awaits again"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Len() < 1 || c.Args().Len() > 2 {
				return clikit.UsageError("answer takes a session's id and, unless --option, the text of the answer")
			}
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			d, err := e.resolve(c.Args().Get(0))
			if err != nil {
				return err
			}
			text, opt := c.Args().Get(1), c.String("option")
			pending := d.PendingPermission()
			if pending == nil && opt != "" {
				return fail(c, control.Errorf(control.CodeUsage, "session %s awaits no permission decision", d.ID).WithHint("answer with TEXT: it is the next turn"))
			}
			if pending == nil {
				return say(ctx, c, e, d.ID, text)
			}
			if opt == "" {
				return fail(c, control.Errorf(control.CodeUsage, "session %s awaits a permission decision (%s): %s", d.ID, pending.RequestID, pending.Title).
					WithHint("answer with --option, one of "+lease.Choices(pending.Options)))
			}
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			if err := dlg.Permit(ctx, d.ID, pending.RequestID, opt, "awcp-ctl answer by "+userName()); err != nil {
				return fail(c, err)
			}
			// Follow once the agent has the answer: until then the request
			// still looks pending.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if d, err = e.store.Delegation(d.ID); err != nil {
					return err
				}
				if p := d.PendingPermission(); p == nil || p.RequestID != pending.RequestID {
					break
				}
			}
			return followTurn(ctx, c, e, d.ID)
		},
	}
}

// closeCommand ends a session: the agent's session closes, then its
// delegation, done, with the usual clean-up.
func closeCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "close",
		Usage:     "end a session (export --session): its agent's session closes, the lease ends",
		ArgsUsage: "ID",
		Flags:     append(clikit.CommonFlags(), &cli.BoolFlag{Name: "json", Usage: "print the outcome as JSON"}),
		Action: func(c *cli.Context) error {
			e, d, err := openDelegation(c)
			if err != nil {
				return err
			}
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			if err := dlg.EndSession(d.ID); err != nil {
				return fail(c, err)
			}
			for deadline := time.Now().Add(time.Minute); !d.State.Terminal() && time.Now().Before(deadline); {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(200 * time.Millisecond):
				}
				if d, err = e.store.Delegation(d.ID); err != nil {
					return err
				}
			}
			if !d.State.Terminal() {
				fmt.Fprintf(c.App.ErrWriter, "awcp: session %s is closing; awcp-ctl output %s shows when it has ended\n", d.ID, d.ID)
				return nil
			}
			return report(c, d)
		},
	}
}

// printTurn shows a driven session's last turn, and what it awaits.
func printTurn(w io.Writer, d *lease.Delegation) {
	t := d.LastTurn()
	if t == nil {
		return
	}
	fmt.Fprintf(w, "session: turn %d %s %s\n", t.N, t.State, t.StopReason)
	// An ended session's summary already holds its turns' replies: the
	// last one is not printed a second time under it.
	if t.Reply != "" && !strings.Contains(d.Summary, strings.TrimSpace(t.Reply)) {
		fmt.Fprintf(w, "  the agent said:\n%s\n", indent(indent(clikit.PrintableText(t.Reply))))
	}
	if t.Error != "" {
		fmt.Fprintf(w, "  turn error: %s\n", clikit.PrintableText(t.Error))
	}
	switch p := d.PendingPermission(); {
	case !d.Awaiting():
	case p != nil:
		fmt.Fprintf(w, "  AWAITING a permission decision (%s): awcp-ctl answer %s --option OPTION\n", clikit.Printable(p.RequestID), d.ID)
	default:
		fmt.Fprintf(w, "  AWAITING the next prompt: awcp-ctl answer %s TEXT (awcp-ctl close %s ends the session)\n", d.ID, d.ID)
	}
}
