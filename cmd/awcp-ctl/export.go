package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/discovery"
	"github.com/awcp/awcp/lease"
)

func exportCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "lend DIR to an executor for a task and wait for the result",
		ArgsUsage: "DIR",
		Flags: append(append(clikit.CommonFlags(),
			&cli.StringSliceFlag{Name: "peer", EnvVars: []string{"AWCP_PEER"},
				Usage: "the executor (required): its URL (https://host:10200), or the name or agent id of one found on this network, or auto (awcp-ctl peers lists them), or a2a:URL for an A2A agent (the directory goes to it as a ZIP; docs/a2a.md); several: attempts at the task, one per executor, each staged, compared with awcp-ctl compare"},
			// Not $AWCP_PROMPT: the executor gives its agent its own task
			// there, and a nested export without --prompt would send the
			// parent's task on.
			&cli.StringFlag{Name: "prompt", EnvVars: []string{"AWCP_EXPORT_PROMPT"}, Usage: "the task, in full (required, unless each --scope has its --scope-prompt)"},
			&cli.StringFlag{Name: "description", Usage: "short description for logs and lists (default: the prompt's first line)"},
			clikit.DurationFlag("ttl", time.Hour, "length of the lease", "AWCP_TTL"),
			&cli.StringFlag{Name: "access", EnvVars: []string{"AWCP_ACCESS"}, Value: "rw", Usage: "rw or ro"},
			&cli.StringFlag{Name: "transport", EnvVars: []string{"AWCP_TRANSPORT"}, Value: "auto", Usage: "auto, live (the live mount; sshfs on the wire), live-reverse (the live mount over connections this machine opens: for a delegator behind NAT; sshfs-reverse) or archive"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"AWCP_TOKEN"}, Usage: "credential the executor requires"},
			clikit.TokenFileFlag("a file holding the token, mode 600 (--token shows in ps)"),
			&cli.StringFlag{Name: "dialect", EnvVars: []string{"AWCP_DIALECT"}, Value: "auto",
				Usage: "AWCP dialect: auto (the executor's, from its ACCEPT), seed (the specification's) or head (the reference implementation's later wire)"},
			&cli.IntFlag{Name: "attempts", Usage: "with --peer auto: run the task as N attempts, on the N best trusted executors found (awcp-ctl compare GROUP)"},
			&cli.StringSliceFlag{Name: "scope", Usage: "PATH=PEER (repeatable): split the task — each executor gets the whole directory, read-write only under its PATH, all at once; or PATH alone with one --peer: that delegation may change PATH only"},
			&cli.StringSliceFlag{Name: "scope-prompt", Usage: "PATH=TEXT (repeatable): the task of the --scope at PATH, instead of --prompt (given too, it comes first, for all)"},
			&cli.BoolFlag{Name: "wait", Usage: "if what this delegation would change is held by another one now, wait for it to end instead of failing"},
			&cli.BoolFlag{Name: "background", Usage: "hand the delegation to the daemon (started if needed), print its id and return"},
			&cli.BoolFlag{Name: "json", Usage: "print the outcome as JSON"},
			&cli.StringFlag{Name: "session", Usage: "new: open a session with the executor's ACP agent, held by the daemon, for follow-up turns " +
				"(awcp-ctl answer ID TEXT); ID: the prompt is the next turn of that session (no DIR then)"},
		), append(append(policyFlags(), sshFlags()...), browseFlags()...)...),
		Action: func(c *cli.Context) error {
			if c.String("prompt") == "" && len(c.StringSlice("scope-prompt")) == 0 {
				return clikit.UsageError("--prompt is required (on the command line, in its environment variable, or as prompt in --config)")
			}
			if id := c.String("session"); id != "" && id != "new" {
				if c.Args().Len() != 0 {
					return clikit.UsageError("export --session %s continues that session, in the directory it was lent: drop %s (see awcp-ctl status %s)", id, c.Args().First(), id)
				}
				e, err := openEnv(c)
				if err != nil {
					return err
				}
				return say(ctx, c, e, id, c.String("prompt"))
			}
			if c.Args().Len() != 1 {
				return clikit.UsageError("export takes exactly one directory")
			}
			peers := c.StringSlice("peer")
			if len(peers) == 0 && len(c.StringSlice("scope")) == 0 {
				return clikit.UsageError("export needs --peer: the executor")
			}
			if len(peers) == 0 {
				peers = []string{""} // each --scope names its own
			}
			token, err := clikit.PeerToken(c)
			if err != nil {
				return err
			}
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			req := delegator.ExportRequest{
				Dir: c.Args().First(), Peer: peers[0], Prompt: c.String("prompt"),
				Description: c.String("description"), TTL: clikit.Duration(c, "ttl"), Access: c.String("access"),
				Transport: transportOf(c), Token: token, Dialect: c.String("dialect"),
				Hide: c.StringSlice("hide"), NoHideDefaults: c.Bool("no-hide-defaults"), NoDelete: c.Bool("no-delete"), AllowGitControl: c.Bool("allow-git-control"), PlainHTTP: c.Bool("plain-http"), PeerKey: c.String("peer-key"), LendHiddenHistory: c.Bool("lend-hidden-history"), GitHistory: c.Int("git-history"),
				Limits: admissionLimits(c), Snapshot: c.String("snapshot"),
			}
			req.MaxWriteBytes = clikit.Bytes(c, "max-write-bytes")
			if abs, err := filepath.Abs(req.Dir); err == nil {
				req.Dir = abs
			}
			if req.CallChain, err = callChain(); err != nil {
				return err
			}
			if scopes := c.StringSlice("scope"); len(scopes) > 1 || len(scopes) == 1 && strings.Contains(scopes[0], "=") {
				if c.IsSet("peer") && !(len(peers) == 1 && peers[0] == "") {
					return clikit.UsageError("--scope PATH=PEER names each scope's executor: no --peer beside it")
				}
				return exportScopes(ctx, c, e, req, scopes)
			} else if len(scopes) == 1 {
				req.Scope = scopes[0]
			}
			if n := c.Int("attempts"); n > 1 {
				if len(peers) != 1 || !discovery.Chooses(peers[0]) {
					return clikit.UsageError("--attempts N goes with --peer auto or --peer dns:DOMAIN; name the executors with several --peer instead")
				}
				if peers, err = e.choosePeers(ctx, c, req, n); err != nil {
					return fail(c, err)
				}
			}
			if len(peers) > 1 {
				if c.String("session") != "" {
					return clikit.UsageError("a session is held with one executor: give one --peer")
				}
				return exportAttempts(ctx, c, e, req, peers)
			}
			if err := e.resolvePeer(ctx, c, &req); err != nil {
				return fail(c, err)
			}
			if req.PeerChoice != "" {
				fmt.Fprintf(c.App.ErrWriter, "awcp: --peer %s: %s (%s) at %s, %s\n", peers[0], clikit.Printable(req.PeerName), clikit.Printable(req.PeerAgentID), req.Peer, req.PeerChoice)
			}
			if c.Bool("wait") {
				if _, err := waitForHolder(ctx, c, e, req); err != nil {
					return err
				}
			}
			if c.String("session") == "new" {
				return exportSession(ctx, c, e, req)
			}
			if c.Bool("background") {
				return exportBackground(c, e, req)
			}
			return exportWait(ctx, c, e, req)
		},
	}
}

// exportWait runs the delegation in this process and reports its outcome.
// Ctrl-C cancels it.
func exportWait(ctx context.Context, c *cli.Context, e *env, req delegator.ExportRequest) error {
	errw := c.App.ErrWriter
	// The SSH server lives as long as this delegation is followed here; it
	// outlives ctx (Ctrl-C) until the cancel has been carried out.
	sshCtx, stopSSH := context.WithCancel(context.Background())
	waitSSH, err := e.liveMount(sshCtx, c, req.Transport, func(err error) {
		fmt.Fprintf(errw, "awcp: no SSH server for a live mount (%v); using archive\n", err)
	})
	if err != nil {
		stopSSH()
		return err
	}
	defer func() { stopSSH(); waitSSH() }()
	bar := newTransferBar(errw)
	if bar != nil {
		e.transfer = bar.update
	}
	away := false // the channel was last in another state than running
	dlg, err := e.delegator(func(id string, ev *control.Event) {
		bar.done()
		switch {
		case ev.Type == delegator.EventNote:
			fmt.Fprintf(errw, "awcp: %s\n", clikit.PrintableText(ev.Message))
		case ev.Type == control.EventStatus && ev.Status == control.StatusRunning:
			fmt.Fprintf(errw, "awcp: executor is running the task\n")
		case ev.Type == control.EventStatus:
			fmt.Fprintf(errw, "  | %s\n", clikit.PrintableText(ev.Message))
		case ev.Type == control.EventPermission && ev.Outcome == control.PermissionPending:
			fmt.Fprintf(errw, "awcp: the agent asks permission (%s): %s\n", clikit.Printable(ev.RequestID), clikit.PrintableText(ev.Message))
			printHowToAnswer(errw, id, ev.RequestID, ev.Options)
		case ev.Type == control.EventPermission:
			fmt.Fprintf(errw, "awcp: permission %s: %s %s (%s)\n", ev.RequestID, ev.Outcome, ev.OptionID, ev.DecidedBy)
		case ev.Type == control.EventChannel && ev.Status == lease.ChannelRunning && !away:
			// "executor is running the task" said it already
		case ev.Type == control.EventChannel && ev.Status == lease.ChannelFinishing:
			away = false
			fmt.Fprintf(errw, "awcp: the executor finished; applying its result\n")
		case ev.Type == control.EventChannel:
			away = ev.Status != lease.ChannelRunning
			since, _ := time.Parse(time.RFC3339Nano, ev.Timestamp)
			fmt.Fprintf(errw, "awcp: executor %s\n", delegator.ChannelText(&lease.Channel{State: ev.Status, Since: since, Detail: ev.Message}))
		}
	})
	if err != nil {
		return err
	}
	d, err := dlg.Create(req)
	if err != nil {
		return fail(c, err)
	}
	for _, n := range d.Notes {
		fmt.Fprintf(errw, "awcp: %s\n", clikit.PrintableText(n))
	}
	fmt.Fprintf(errw, "awcp: delegation %s: lending %s to %s\n", d.ID, d.LocalDir, d.Peer)

	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); dlg.RunScheduler(runCtx) }()
	done := make(chan struct{})
	go func() { defer close(done); d, err = dlg.Run(runCtx, d.ID) }()
	select {
	case <-done:
	case <-ctx.Done():
		fmt.Fprintf(errw, "awcp: interrupted; cancelling %s\n", d.ID)
		cancelled, cerr := dlg.Cancel(context.Background(), d.ID)
		if cerr != nil {
			fmt.Fprintf(errw, "awcp: cancel: %v\n", cerr)
		}
		<-done
		if cerr == nil && err == nil {
			d = cancelled // with what its clean-up found changed
		}
	}
	stop()
	wg.Wait()
	bar.done()
	if err != nil {
		return err
	}
	return reportFollowed(c, d)
}

// fail prints a spec error (code, message, hint) and exits 1 — 2 for
// the caller's own mistake (USAGE), as for a bad flag.
func fail(c *cli.Context, err error) error {
	var pe *control.ProtocolError
	if !errors.As(err, &pe) {
		return err
	}
	if c.Bool("json") {
		printJSON(c.App.Writer, pe.ToMessage(""))
	}
	fmt.Fprintf(c.App.ErrWriter, "error %s: %s\n", clikit.Printable(pe.Code), clikit.PrintableText(pe.Message))
	if len(pe.CallChain) > 0 {
		fmt.Fprintf(c.App.ErrWriter, "call chain: %s\n", control.FormatCallChain(pe.CallChain))
	}
	if pe.Hint != "" {
		fmt.Fprintf(c.App.ErrWriter, "hint: %s\n", pe.Hint)
	}
	if pe.Code == control.CodeUsage {
		return clikit.Exit(clikit.ExitUsage)
	}
	return clikit.Failed()
}

// exportBackground hands the delegation to the daemon, starting it first
// if none runs.
func exportBackground(c *cli.Context, e *env, req delegator.ExportRequest) error {
	daemon, err := daemonOrStart(c, e)
	if err != nil {
		return err
	}
	id, err := daemon.Export(req)
	if err != nil {
		return fail(c, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]string{"delegationId": id})
	}
	fmt.Fprintln(c.App.Writer, id)
	return nil
}

// daemonOrStart is the daemon of e's state dir, started if none runs.
func daemonOrStart(c *cli.Context, e *env) (*delegator.LocalClient, error) {
	if daemon, ok := delegator.DialLocal(e.socket()); ok {
		return daemon, nil
	}
	return startDaemon(c, e)
}

// startDaemon runs `awcp-ctl serve` detached, logging to daemon.log in the
// state dir, and waits until it answers.
func startDaemon(c *cli.Context, e *env) (*delegator.LocalClient, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(e.state, "daemon.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// It goes by itself once its delegations have ended (AWCP_DAEMON_IDLE:
	// how long after; 1m by default); `awcp-ctl serve` keeps one.
	idle := os.Getenv("AWCP_DAEMON_IDLE")
	if idle == "" {
		idle = "1m"
	}
	cmd := exec.Command(self, "serve", "--state-dir", e.state, "--log-level", "info", "--exit-when-idle", idle)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	var gone time.Time // when ours exited
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if cl, ok := delegator.DialLocal(e.socket()); ok {
			if gone.IsZero() {
				fmt.Fprintf(c.App.ErrWriter, "awcp: started the daemon (pid %d, log %s); it stops %s after its last delegation ends (`awcp-ctl serve` keeps one running)\n", cmd.Process.Pid, logf.Name(), idle)
			}
			return cl, nil
		}
		if !gone.IsZero() && time.Since(gone) > 3*time.Second {
			return nil, fmt.Errorf("the daemon exited at start; see %s", logf.Name())
		}
		select {
		case <-exited:
			// One daemon serves a state dir: a command started beside
			// this one may have started it first, and ours gave way.
			// That one answers soon, or none does.
			gone, exited = time.Now(), nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("the daemon did not answer within 10s; see %s", logf.Name())
}
