package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/internal/metrics"
	"github.com/awcp/awcp/lease"
)

func serveCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the delegator daemon: leases, expiry, background delegations, the local API",
		Flags: append(append(append(clikit.DaemonFlags(), sshFlags()...), clikit.MetricsListenFlag(), idleTTLFlag(),
			clikit.DurationFlag("exit-when-idle", 0, "exit once no delegation has been live, and no command has asked anything, for this long (the daemon a command starts: 1m); 0: never")),
			admissionFlags()...),
		Action: func(c *cli.Context) error {
			ctx, stop := context.WithCancel(ctx) // ends on a signal, or `awcp-ctl stop`
			defer stop()
			e, err := openEnvAs(c, true)
			if err != nil {
				return err
			}
			// One daemon a state dir, held by a lock for its life: two
			// commands that start one at the same moment both find no
			// socket answering, and the second must give way, not take
			// the socket over.
			lock, err := os.OpenFile(filepath.Join(e.state, "daemon.lock"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				return err
			}
			defer lock.Close()
			if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				return fmt.Errorf("a daemon already serves %s", e.state)
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
			// The delegations lent before a restart are granted again
			// by their takeover, after the SSH server is up: their
			// executors' re-dials wait for it, not refused meanwhile.
			e.resumed = make(chan struct{})
			waitSSH, err := e.startSSH(sshCtx, c)
			if err != nil {
				stopSSH()
				return err
			}
			// The SSH server stops after the delegations this daemon follows.
			defer func() { stopSSH(); waitSSH() }()
			e.admission = admissionLimits(c) // for delegations that set none
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			srv := &delegator.LocalServer{Delegator: dlg, Stop: stop, Drive: e.driver(dlg, c).Drive,
				Resumed: sync.OnceFunc(func() { close(e.resumed) })}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); dlg.RunScheduler(ctx) }()
			if idle := clikit.Duration(c, "exit-when-idle"); idle > 0 {
				wg.Add(1)
				go func() { defer wg.Done(); exitWhenIdle(ctx, e, srv, idle, stop) }()
			}
			e.log.Info("daemon serving", "socket", e.socket())
			err = srv.Serve(ctx, e.socket())
			wg.Wait()
			return err
		},
	}
}

// stopCommand stops the daemon `export --background` (or anyone) started.
func stopCommand() *cli.Command {
	return &cli.Command{
		Name:  "stop",
		Usage: "stop the daemon (awcp-ctl serve) of this state dir; its delegations run on, and it takes them over when started again",
		Flags: clikit.CommonFlags(),
		Action: func(c *cli.Context) error {
			state, err := clikit.StateDir(c)
			if err != nil {
				return err
			}
			sock := filepath.Join(state, "ctl.sock")
			daemon, running := delegator.DialLocal(sock)
			if !running {
				fmt.Fprintf(c.App.Writer, "no daemon runs for %s\n", state)
				return nil
			}
			if err := daemon.Stop(); err != nil {
				return err
			}
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if _, running := delegator.DialLocal(sock); !running {
					fmt.Fprintf(c.App.Writer, "stopped the daemon of %s\n", state)
					return nil
				}
			}
			return fmt.Errorf("the daemon of %s was asked to stop and still runs after 30s", state)
		},
	}
}

// exitWhenIdle calls stop once no delegation of the store has been live,
// and srv has taken no request, for idle: the daemon a command started
// for it goes once its work is done, where it would run on unseen.
func exitWhenIdle(ctx context.Context, e *env, srv *delegator.LocalServer, idle time.Duration, stop func()) {
	tick := min(idle/4, 5*time.Second)
	busySince := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(tick):
		}
		// The census reads each record's state alone, not the whole
		// record: this runs every few seconds over a week of them.
		census, err := e.store.DelegationCensus()
		live := err != nil
		for k := range census { // state, transport
			live = live || !lease.State(k[0]).Terminal()
		}
		if live {
			busySince = time.Now()
			continue
		}
		if last := srv.LastRequest(); last.After(busySince) {
			busySince = last
		}
		if time.Since(busySince) >= idle {
			e.log.Info("no delegation live for a while: the daemon exits (--exit-when-idle)", "idle", idle)
			stop()
			return
		}
	}
}
