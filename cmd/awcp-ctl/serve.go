package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/internal/metrics"
)

func serveCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the delegator daemon: leases, expiry, background delegations, the local API",
		Flags: append(append(clikit.CommonFlags(), sshFlags()...), clikit.MetricsListenFlag()),
		Action: func(c *cli.Context) error {
			e, err := openEnvAs(c, true)
			if err != nil {
				return err
			}
			if _, running := delegator.DialLocal(e.socket()); running {
				return fmt.Errorf("a daemon already serves %s", e.state)
			}
			if addr := c.String("metrics-listen"); addr != "" {
				e.metrics = metrics.New()
				e.metrics.CountDelegations("delegator", e.store.DelegationCensus)
				stop, err := clikit.ServeMetrics(ctx, e.metrics, addr, e.log)
				if err != nil {
					return err
				}
				defer stop()
			}
			sshCtx, stopSSH := context.WithCancel(context.Background())
			waitSSH, err := e.startSSH(sshCtx, c)
			if err != nil {
				stopSSH()
				return err
			}
			// The SSH server stops after the delegations this daemon follows.
			defer func() { stopSSH(); waitSSH() }()
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			srv := &delegator.LocalServer{Delegator: dlg}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); dlg.RunScheduler(ctx) }()
			e.log.Info("daemon serving", "socket", e.socket())
			err = srv.Serve(ctx, e.socket())
			wg.Wait()
			return err
		},
	}
}
