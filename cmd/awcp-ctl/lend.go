package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// lendCommand lends a directory for a mount by hand: it writes the START
// that `awcp-fs mount --start` takes, and serves the live mount until the
// lease ends or Ctrl-C cancels it. No executor daemon is involved.
func lendCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "lend",
		Usage:     "lend DIR for a mount by hand: write its START for `awcp-fs mount --start`, and serve it until the lease ends",
		ArgsUsage: "DIR",
		Flags: append(append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "start-file", Required: true, Usage: "where to write the START (mode 600; it holds the mount's credential)"},
			&cli.StringFlag{Name: "to", Usage: "the host that will mount it, to choose this machine's address in START (default: this machine)"},
			clikit.DurationFlag("ttl", time.Hour, "length of the lease", "AWCP_TTL"),
			&cli.StringFlag{Name: "access", EnvVars: []string{"AWCP_ACCESS"}, Value: "rw", Usage: "rw or ro"},
			&cli.StringFlag{Name: "description", Usage: "a name for it in status and the audit"},
		), append(policyFlags(), sshFlags()...)...),
		Action: func(c *cli.Context) error {
			if c.Args().Len() != 1 {
				return clikit.UsageError("lend takes exactly one directory")
			}
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			dir, err := filepath.Abs(c.Args().First())
			if err != nil {
				return err
			}
			req := delegator.ExportRequest{Dir: dir, TTL: clikit.Duration(c, "ttl"), Access: c.String("access"),
				Description: c.String("description"), Hide: c.StringSlice("hide"), NoHideDefaults: c.Bool("no-hide-defaults"),
				NoDelete: c.Bool("no-delete"), AllowGitControl: c.Bool("allow-git-control"), PlainHTTP: c.Bool("plain-http"), PeerKey: c.String("peer-key"), LendHiddenHistory: c.Bool("lend-hidden-history"), MaxWriteBytes: clikit.Bytes(c, "max-write-bytes"), Limits: admissionLimits(c), Snapshot: c.String("snapshot")}
			if req.Description == "" {
				req.Description = "lent by hand: " + dir
			}
			sshCtx, stopSSH := context.WithCancel(context.Background())
			waitSSH, err := e.startSSH(sshCtx, c)
			if err != nil {
				stopSSH()
				return err
			}
			defer func() { stopSSH(); waitSSH() }()
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			d, st, err := dlg.LendByHand(c.Context, req, c.String("to"))
			if err != nil {
				return fail(c, err)
			}
			if err := writeStart(c.String("start-file"), st); err != nil {
				dlg.Cancel(context.Background(), d.ID)
				return err
			}
			errw := c.App.ErrWriter
			fmt.Fprintf(errw, "awcp: delegation %s: %s lent until %s (%s)\n", d.ID, d.LocalDir, d.ExpiresAt.Local().Format(time.DateTime), d.AccessMode)
			fmt.Fprintf(errw, "awcp: on the machine that mounts it: awcp-fs mount --start %s MOUNTPOINT\n", c.String("start-file"))
			fmt.Fprintf(errw, "awcp: Ctrl-C ends the lease (the mount fails at once); so does `awcp-ctl cancel %s`\n", d.ID[:8])

			runCtx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); dlg.RunScheduler(runCtx) }() // expiry
			defer func() { stop(); wg.Wait() }()
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for !d.State.Terminal() {
				select {
				case <-ctx.Done():
					fmt.Fprintf(errw, "awcp: interrupted; ending %s\n", d.ID)
					if _, err := dlg.Cancel(context.Background(), d.ID); err != nil && !errors.As(err, new(*lease.TransitionError)) {
						return err
					}
				case <-tick.C:
				}
				if d, err = e.store.Delegation(d.ID); err != nil {
					return err
				}
			}
			// The mount learns that the lease is over when its re-dial is
			// refused; with the server gone it would take the outage for a
			// network one and retry for its reconnect bound. Its first
			// re-dial comes within 100 ms: serve a second more.
			time.Sleep(time.Second)
			if d.State == lease.Cancelled || d.State == lease.Expired {
				report(c, d) // the normal end of a lending by hand
				return nil
			}
			return report(c, d)
		},
	}
}

// writeStart writes st to path, mode 600, never over an existing file.
func writeStart(path string, st *control.Start) error {
	data, err := control.Marshal(st)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("--start-file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("--start-file: %w", err)
	}
	return f.Close()
}
