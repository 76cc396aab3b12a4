package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/a2apeer"
	"github.com/awcp/awcp/control/delegator/lendarchive"
	"github.com/awcp/awcp/control/delegator/lendgit"
	"github.com/awcp/awcp/control/delegator/lendlive"
	"github.com/awcp/awcp/control/discovery"
	"github.com/awcp/awcp/internal/metrics"
	"github.com/awcp/awcp/lease"
)

// The delegator as each command assembles it: its state, its identity,
// its store, and the transports (lendarchive, lendlive with the SSH
// server it starts, lendgit) handed to the core.

// env is what every delegator command works with.
type env struct {
	state           string
	agentID         string             // this agent's (discovery.AgentID)
	identity        ed25519.PrivateKey // this delegator's (discovery.IdentityKey): its TLS certificate
	store           *lease.Store
	log             *slog.Logger
	sshfs           *lendlive.Transport                      // set while this process runs the SSH server
	metrics         *metrics.Registry                        // the daemon's, with --metrics-listen; nil: none
	transfer        func(id, what string, done, total int64) // draws archive transfers; nil: none
	admission       delegator.AdmissionLimits                // the daemon's defaults (serve --max-files …); zero: the transports'
	stagedRetention time.Duration                            // how long staged results wait (--snapshot-retention); zero: the default
	reconnectBound  time.Duration                            // --reconnect-bound, where the command has it
	daemon          bool                                     // this process is `awcp-ctl serve`
	resumed         chan struct{}                            // closed once what this process takes over is granted again (sshd.Options.Resumed): the daemon's takeover, or resumeWindow after acp's or mcp's start
	mcp             bool                                     // this process is `awcp-ctl mcp`: its delegations wait for its restart's delegate_recover
}

func openEnv(c *cli.Context) (*env, error) { return openEnvAs(c, false) }

// openEnvAs opens the state dir for a command, or for the daemon. A
// command ends what nothing follows any more — leases that ran out, and
// the delegations of commands that died, unless a daemon runs to take
// them over — so that a dead export never keeps its directory lent.
func openEnvAs(c *cli.Context, daemon bool) (*env, error) {
	log, err := clikit.Logger(c, c.App.ErrWriter)
	if err != nil {
		return nil, err
	}
	state, err := clikit.StateDir(c)
	if err != nil {
		return nil, err
	}
	// Shared: the daemon, a waiting export and these commands take turns.
	store, err := lease.Open(filepath.Join(state, "delegator.db"), lease.Options{Shared: true})
	if err != nil {
		return nil, err
	}
	agentID, err := discovery.AgentID(state)
	if err != nil {
		return nil, err
	}
	identity, err := discovery.IdentityKey(state)
	if err != nil {
		return nil, err
	}
	e := &env{state: state, agentID: agentID, identity: identity, store: store, log: log, reconnectBound: clikit.Duration(c, "reconnect-bound"), daemon: daemon,
		stagedRetention: clikit.Duration(c, "snapshot-retention")}
	if dlg, err := e.delegator(nil); err == nil {
		endOrphans := false
		if !daemon {
			_, running := delegator.DialLocal(e.socket())
			endOrphans = !running
		}
		dlg.Tidy(c.Context, endOrphans, store.Now().Add(-recordRetention))
	}
	return e, nil
}

func (e *env) socket() string { return filepath.Join(e.state, "ctl.sock") }

func (e *env) delegator(progress func(string, *control.Event)) (*delegator.Delegator, error) {
	staging := filepath.Join(e.state, "staging")
	archiveT := &lendarchive.Transport{Blobs: e.store, StagingDir: staging, ResultDir: filepath.Join(e.state, "results")}
	var m delegator.Metrics
	if e.metrics != nil {
		archiveT.Metrics, m = e.metrics, e.metrics
	}
	transports := map[string]control.DelegatorTransport{control.TransportArchive: archiveT}
	if e.sshfs != nil {
		transports[control.TransportSSHFS] = e.sshfs
		transports[control.TransportGit] = &lendgit.Transport{Live: e.sshfs, Archive: archiveT, RepoDir: filepath.Join(e.state, "git")}
	}
	return delegator.New(delegator.Options{
		Store:           e.store,
		Transports:      transports,
		Replayers:       map[string]delegator.BranchReplayer{control.TransportGit: lendgit.Replayer{}},
		A2A:             &a2apeer.Peer{Dir: filepath.Join(e.state, "a2a"), Logger: e.log},
		SpoolDir:        staging,
		Progress:        progress,
		ReconnectBound:  e.reconnectBound,
		AgentID:         e.agentID,
		Identity:        e.identity,
		Daemon:          e.daemon,
		MCP:             e.mcp,
		Metrics:         m,
		Transfer:        e.transfer,
		Admission:       e.admission,
		StagedDir:       filepath.Join(e.state, "staged"),
		StagedRetention: e.stagedRetention,
		Logger:          e.log,
	})
}

// sshFlags configure the embedded SSH server of export and serve.
func sshFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ssh-listen", EnvVars: []string{"AWCP_SSH_LISTEN"}, Value: ":0",
			Usage: "address of the embedded SSH/SFTP server for live mounts"},
		&cli.StringFlag{Name: "ssh-advertise", EnvVars: []string{"AWCP_SSH_ADVERTISE"},
			Usage: "host[:port] executors dial (default: this machine's address towards each executor, the listening port)"},
		clikit.DurationFlag("reconnect-bound", 30*time.Second, "how long an executor that went away may stay unreachable before its delegation fails (TASK_FAILED)", "AWCP_RECONNECT_BOUND"),
		&cli.IntFlag{Name: "audit-records", EnvVars: []string{"AWCP_AUDIT_RECORDS"}, Value: delegator.DefaultMaxAuditRecords,
			Usage: "operations of a live-mount delegation its audit log keeps (the oldest beyond are dropped and counted); 0 records none"},
		clikit.DurationFlag("snapshot-retention", delegator.DefaultStagedRetention, "how long a staged result waits for apply or discard before it is removed", "AWCP_SNAPSHOT_RETENTION"),
		clikit.DurationFlag("audit-retention", 30*24*time.Hour, "how long the audit log of an ended delegation is kept (its summary stays with the delegation)", "AWCP_AUDIT_RETENTION"),
	}
}

// liveMount starts the SSH server for a delegation's transport (auto,
// sshfs, sshfs-reverse or archive): none for archive; for auto, one that
// cannot start is told to warn and the delegations use archive; for the
// live mount asked for by name, that fails.
// wait (never nil) returns once the server has stopped.
func (e *env) liveMount(ctx context.Context, c *cli.Context, transport string, warn func(error)) (wait func(), err error) {
	if transport == control.TransportArchive {
		return func() {}, nil
	}
	wait, err = e.startSSH(ctx, c)
	switch {
	case err == nil:
		return wait, nil
	case transport == control.TransportSSHFS || transport == delegator.TransportSSHFSReverse || transport == control.TransportGit:
		return nil, err
	}
	warn(err)
	return func() {}, nil
}

// resumeWindow is how long after its start a process's SSH server holds
// certificates without a grant for one to appear (unless the daemon's
// takeover says sooner that it has granted all it will).
const resumeWindow = 10 * time.Second

// startSSH runs the embedded SSH server until ctx ends and registers the
// live-mount transport. wait returns once the server has stopped.
func (e *env) startSSH(ctx context.Context, c *cli.Context) (wait func(), err error) {
	host, port := "", 0
	if adv := c.String("ssh-advertise"); adv != "" {
		h, p, err := net.SplitHostPort(adv)
		if err != nil {
			h, p = adv, ""
		}
		host = h
		if p != "" {
			if port, err = strconv.Atoi(p); err != nil {
				return nil, clikit.UsageError("--ssh-advertise: bad port %q", p)
			}
		}
	}
	records := c.Int("audit-records")
	if records < 0 {
		return nil, clikit.UsageError("--audit-records must be 0 (none) or more")
	}
	listen := c.String("ssh-listen")
	if !c.IsSet("ssh-listen") && c.Command != nil && c.Command.Name == "export" {
		// One export, one executor: the SSH port is opened on the
		// address facing it only, not on every network of this machine.
		if u, err := url.Parse(c.String("peer")); err == nil && u.Hostname() != "" {
			listen = net.JoinHostPort(lendlive.AdvertiseHost(u.Hostname()), "0")
		}
	}
	perAddress := false
	if !c.IsSet("ssh-listen") && c.Command != nil && c.Command.Name == "serve" && c.String("ssh-advertise") == "" {
		// The daemon lends to executors anywhere: its SSH port is opened
		// on loopback, and on the address facing each executor while a
		// delegation to it runs — not on every network of this machine.
		listen, perAddress = "127.0.0.1:0", true
	}
	if h, _, err := net.SplitHostPort(listen); err == nil && (h == "" || h == "0.0.0.0" || h == "::") && c.Command != nil && c.Command.Name == "serve" {
		e.log.Warn("the SSH server for live mounts listens on every address of this machine (" + listen +
			"): only certificates this delegator issued get in, but anyone who reaches it can knock; without --ssh-listen it opens on the address facing each executor only")
	}
	if e.resumed == nil && (e.mcp || c.Command != nil && c.Command.Name == "acp") {
		// A process that takes delegations over on demand — an editor's
		// new gateway at session/load, mcp at delegate_recover — grants
		// them a moment after its server is up; the executors' re-dials
		// of its first seconds wait for that rather than be refused.
		// (An export takes nothing over: its server refuses at once.)
		e.resumed = make(chan struct{})
		time.AfterFunc(resumeWindow, func() { close(e.resumed) })
	}
	audit := &delegator.AuditLog{Store: e.store, MaxRecords: records, Retention: clikit.Duration(c, "audit-retention"), Logger: e.log}
	opts := lendlive.SSHOptions{StateDir: e.state, Store: e.store, PerAddress: perAddress,
		Listen: listen, AdvertiseHost: host, AdvertisePort: port, Logger: e.log,
		Audit: audit, NoAudit: records == 0, Resumed: e.resumed}
	if e.metrics != nil {
		opts.Metrics = e.metrics
	}
	lender, wait, err := lendlive.StartSSH(ctx, opts)
	if err != nil {
		return nil, err
	}
	lender.Tunnels = delegator.Tunnels{Identity: e.identity}
	e.sshfs = lender
	return wait, nil
}

// resolve finds a delegation by id or unique id prefix.
// openDelegation opens the state dir for a command whose one argument is
// a delegation id, and finds that delegation.
func openDelegation(c *cli.Context) (*env, *lease.Delegation, error) {
	if c.Args().Len() != 1 {
		return nil, nil, clikit.UsageError("%s takes exactly one delegation id", c.Command.Name)
	}
	e, err := openEnv(c)
	if err != nil {
		return nil, nil, err
	}
	d, err := e.resolve(c.Args().First())
	return e, d, err
}

// delegatorFor is openDelegation with a delegator on the state dir, for a
// command that acts on the delegation it names.
func delegatorFor(c *cli.Context) (*delegator.Delegator, *lease.Delegation, error) {
	e, d, err := openDelegation(c)
	if err != nil {
		return nil, nil, err
	}
	dlg, err := e.delegator(nil)
	return dlg, d, err
}

func (e *env) resolve(arg string) (*lease.Delegation, error) {
	if arg == "" {
		return nil, clikit.UsageError("a delegation id is required")
	}
	d, err := e.store.FindDelegation(arg)
	if errors.Is(err, lease.ErrNotFound) {
		return nil, fmt.Errorf("%s: no delegation %s (see `awcp-ctl status`)", control.CodeNotFound, arg)
	}
	return d, err
}
