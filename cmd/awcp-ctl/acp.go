package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/gateway"
)

// acpCommand is the editor's agent command: ACP on stdio, each session a
// delegation of its cwd to the peer's ACP agent (control/delegator/gateway).
func acpCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:  "acp",
		Usage: "be an editor's ACP agent: each session lends its directory to the peer's ACP agent, for as many turns as the editor sends",
		Description: "Stdout carries only ACP; logs go to stderr or --log-file. Configure it as the editor's agent\n" +
			"command, e.g. Zed's agent_servers: {\"command\": \"awcp-ctl\", \"args\": [\"acp\", \"--peer\", \"https://builder:10200\"]}.",
		Flags: append(append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "peer", EnvVars: []string{"AWCP_PEER"}, Required: true,
				Usage: "the executor, started with --agent-acp: its URL (https://host:10200), or the name or agent id of one found on this network"},
			clikit.DurationFlag("ttl", 8*time.Hour, "longest life of each session's lease (the executor's --max-ttl may cap it)", "AWCP_TTL"),
			idleTTLFlag(),
			clikit.DurationFlag("auth-timeout", gateway.AuthTimeout, "how long the editor's authenticate may take on the executor, where the agent runs it before each session opens (a login that waits for a browser never ends there)"),
			&cli.StringFlag{Name: "access", EnvVars: []string{"AWCP_ACCESS"}, Value: "rw", Usage: "rw or ro"},
			&cli.StringFlag{Name: "transport", EnvVars: []string{"AWCP_TRANSPORT"}, Value: "auto", Usage: "auto, live (a live mount; sshfs on the wire), live-reverse (sshfs-reverse) or archive"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"AWCP_TOKEN"}, Usage: "credential the executor requires"},
			clikit.TokenFileFlag("a file holding the token, mode 600 (--token shows in ps)"),
			&cli.StringFlag{Name: "log-file", EnvVars: []string{"AWCP_LOG_FILE"}, Usage: "append logs to this file instead of stderr"},
		), append(append(policyFlags(), sshFlags()...), browseFlags()...)...),
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return clikit.UsageError("acp takes no arguments")
			}
			closeLog, err := logFile(c)
			if err != nil {
				return err
			}
			defer closeLog()
			token, err := clikit.PeerToken(c)
			if err != nil {
				return err
			}
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			req := delegator.ExportRequest{Peer: c.String("peer"), TTL: clikit.Duration(c, "ttl"), Access: c.String("access"),
				Transport: transportOf(c), Token: token, Hide: c.StringSlice("hide"), NoHideDefaults: c.Bool("no-hide-defaults"),
				NoDelete: c.Bool("no-delete"), AllowGitControl: c.Bool("allow-git-control"), PlainHTTP: c.Bool("plain-http"), PeerKey: c.String("peer-key"), LendHiddenHistory: c.Bool("lend-hidden-history"), MaxWriteBytes: clikit.Bytes(c, "max-write-bytes"), Limits: admissionLimits(c), Snapshot: c.String("snapshot")}
			if req.CallChain, err = callChain(); err != nil {
				return err
			}
			if err := e.resolvePeer(ctx, c, &req); err != nil {
				return err
			}
			sshCtx, stopSSH := context.WithCancel(context.Background())
			waitSSH, err := e.liveMount(sshCtx, c, req.Transport, func(err error) {
				e.log.Warn("no SSH server for a live mount; sessions use archive", "err", err)
			})
			if err != nil {
				stopSSH()
				return err
			}
			defer func() { stopSSH(); waitSSH() }()
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			runCtx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); dlg.RunScheduler(runCtx) }()
			defer func() { stop(); <-done }()
			pc := &delegator.PeerClient{BaseURL: req.Peer, Token: req.Token, AgentID: req.PeerAgentID, Key: req.PeerKey, PlainHTTP: req.PlainHTTP, Identity: e.identity}
			agentInit := func(ctx context.Context) (json.RawMessage, error) {
				for {
					m, err := pc.Manifest(ctx)
					switch {
					case err != nil:
						return nil, err
					case m.AWCP == nil || !slices.Contains(m.AWCP.Sessions, control.SessionACP):
						return nil, fmt.Errorf("the executor at %s holds no ACP sessions (is it started with --agent-acp?)", req.Peer)
					case len(m.AWCP.ACPAgent) > 0:
						return m.AWCP.ACPAgent, nil
					case m.AWCP.ACPAgentError != "":
						why := m.AWCP.ACPAgentError // the executor's: bounded, and no control byte
						if len(why) > 2048 {
							why = why[:2048] + "…"
						}
						return nil, fmt.Errorf("%w: %s", gateway.ErrAgentFailed, clikit.PrintableText(why))
					}
					// It has not asked its agent yet (it just started).
					select {
					case <-ctx.Done():
						return nil, fmt.Errorf("the executor at %s has not said what its agent can do: %w", req.Peer, ctx.Err())
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
			g := &gateway.Gateway{Delegator: dlg, Request: req, Version: clikit.Version, Logger: e.log, AgentInit: agentInit, IdleTTL: clikit.Duration(c, "idle-ttl"), AuthTimeout: clikit.Duration(c, "auth-timeout"),
				Started: func(session, id string) { e.log.Info("session lent", "session", session, "delegation", id) },
				Channel: dlg.RecordChannel}
			// The editor's pipe is the sessions' life; a signal to the
			// gateway ends them as its closing would.
			defer context.AfterFunc(ctx, func() { os.Stdin.Close() })()
			if err := g.Serve(ctx, os.Stdin, c.App.Writer); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		},
	}
}
