package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

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
			daemon, viaDaemon := delegator.DialLocal(e.socket())
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			var failed bool
			for _, id := range ids {
				if viaDaemon {
					err = daemon.Cancel(id)
				} else {
					_, err = dlg.Cancel(context.Background(), id)
				}
				if err != nil {
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
			return control.Errorf(control.CodeDeclined, "session %s has no turn running", d.ID)
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
