// Command awcp-fs is the executor side of AWCP: `awcp-fs serve` takes
// delegations and runs the configured agent command on them.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/discovery"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/a2aface"
	"github.com/awcp/awcp/control/executor/acp"
	"github.com/awcp/awcp/control/executor/agent"
	awcpfs "github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/internal/metrics"
	"github.com/awcp/awcp/internal/sandbox"
	"github.com/awcp/awcp/lease"
)

func main() { clikit.Run(newApp, clikit.ExecutorProcs) }

func newApp(ctx context.Context, stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "awcp-fs",
		Usage:     "AWCP executor: work on workspaces delegated to this machine",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     clikit.CommonFlags(),
		Commands:  []*cli.Command{serveCommand(ctx), statusCommand(), mountCommand(ctx), umountCommand(), doctorCommand(ctx), idCommand(), gitBridgeCommand(), clikit.CompletionCommand()},
		// Commands and flags for the shells' completion (`completion`).
		EnableBashCompletion: true,
	}
}

// The host key of a delegator whose START carries none (another
// implementation's): checked against a known_hosts file, or accepted
// unchecked only when asked.
var (
	knownHostsFlag = &cli.StringFlag{Name: "known-hosts", EnvVars: []string{"AWCP_KNOWN_HOSTS"},
		Usage: "OpenSSH known_hosts file for delegators whose START sends no host key"}
	insecureHostKeyFlag = &cli.BoolFlag{Name: "insecure-accept-host-key", EnvVars: []string{"AWCP_INSECURE_ACCEPT_HOST_KEY"},
		Usage: "accept any host key from a delegator whose START sends none (anyone on the path could stand in for it)"}
)

func serveCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the executor daemon (spec §7)",
		Flags: append(append(clikit.DaemonFlags(),
			&cli.StringFlag{Name: "work-root", EnvVars: []string{"AWCP_WORK_ROOT"}, Required: true,
				Usage: "directory under which each delegation gets {work-root}/{delegationId}"},
			&cli.StringFlag{Name: "agent-cmd", EnvVars: []string{"AWCP_AGENT_CMD"},
				Usage: "shell command run in the work dir for each task; the task comes in $AWCP_PROMPT and on stdin"},
			&cli.StringFlag{Name: "agent-acp", EnvVars: []string{"AWCP_AGENT_ACP"},
				Usage: "instead of --agent-cmd: an ACP agent's command (e.g. an ACP adapter of a coding agent), spoken to over its stdio"},
			&cli.StringFlag{Name: "permission", EnvVars: []string{"AWCP_PERMISSION"}, Value: executor.PermissionAuto,
				Usage: "ACP permission requests: auto (allow, once where the agent offers it), deny (reject, once where offered) or forward (the delegator decides)"},
			clikit.DurationFlag("permission-timeout", 5*time.Minute, "a forwarded permission request unanswered this long is cancelled", "AWCP_PERMISSION_TIMEOUT"),
			&cli.BoolFlag{Name: "a2a", EnvVars: []string{"AWCP_A2A"}, Value: true,
				Usage: "serve A2A (0.3, JSON-RPC) at /a2a beside AWCP: a task with its workspace as a ZIP file part is a delegation, under the same credentials, admission and sandbox"},
			&cli.BoolFlag{Name: "allow-exec", EnvVars: []string{"AWCP_ALLOW_EXEC"}, Value: true,
				Usage: "let ACP agents run commands through terminal/create (declared in ACCEPT's sandbox profile)"},
			&cli.StringFlag{Name: "listen", EnvVars: []string{"AWCP_LISTEN"}, Value: "127.0.0.1:10200",
				Usage: "HTTP address to serve /awcp on"},
			&cli.IntFlag{Name: "max-concurrent", EnvVars: []string{"AWCP_MAX_CONCURRENT"}, Value: 5,
				Usage: "delegations active at once; more are DECLINED"},
			clikit.DurationFlag("max-ttl", time.Hour, "longest lease granted", "AWCP_MAX_TTL"),
			&cli.StringSliceFlag{Name: "access", EnvVars: []string{"AWCP_ACCESS"}, Value: cli.NewStringSlice("rw", "ro"),
				Usage: "access modes allowed; rw asked of a ro-only executor is downgraded"},
			&cli.StringSliceFlag{Name: "token", EnvVars: []string{"AWCP_TOKEN"},
				Usage: "if set, INVITE must carry one of these tokens (repeatable; shows in ps: prefer --token-file)"},
			clikit.TokenFileFlag("a file of tokens INVITE may carry, one a line, mode 600"),
			&cli.StringFlag{Name: "authorized-delegators", EnvVars: []string{"AWCP_AUTHORIZED_DELEGATORS"},
				Usage: "a file of delegators' identity keys (authorized_keys form: `awcp-ctl peers self` prints one), admitted over TLS without a token"},
			&cli.BoolFlag{Name: "plain-http", EnvVars: []string{"AWCP_PLAIN_HTTP"},
				Usage: "accept plain HTTP beside TLS, for delegators that speak nothing else (the reference implementation): their token, workspace and session travel in clear"},
			clikit.DurationFlag("retention", time.Hour, "how long a finished delegation's events stay available", "AWCP_RETENTION"),
			clikit.DurationFlag("start-timeout", 2*time.Minute, "how long an accepted INVITE waits for START", "AWCP_START_TIMEOUT"),
			clikit.DurationFlag("round-wait", time.Minute, "how long a head delegation's workspace stays lent after a round for the delegator's CONTINUE or CLOSE (the reference's rounds); 0: no rounds", "AWCP_ROUND_WAIT"),
			&cli.StringSliceFlag{Name: "git-remote-allow", EnvVars: []string{"AWCP_GIT_REMOTE_ALLOW"},
				Usage: "a URL prefix of the git remotes a delegator of the reference implementation may name for its git transport (repeatable); none is taken otherwise"},
			&cli.StringSliceFlag{Name: "transports", EnvVars: []string{"AWCP_TRANSPORTS"}, Value: cli.NewStringSlice("sshfs", "archive", "git"),
				Usage: "transports offered, preferred first: sshfs (live mount), archive, git (a clone on this disk; needs git)"},
			clikit.BytesFlag("max-workspace-bytes", 1<<30, "most bytes an archive workspace may expand to, e.g. 500M or 2G (zip bombs stop here)", "AWCP_MAX_WORKSPACE_BYTES"),
			clikit.DurationFlag("keepalive", 15*time.Second, "interval of SSE keep-alive comments", "AWCP_KEEPALIVE"),
			clikit.DurationFlag("reconnect-bound", 30*time.Second, "how long a call on a live mount waits for an unreachable delegator, from the call, before it fails with EIO", "AWCP_RECONNECT_BOUND"),
			knownHostsFlag, insecureHostKeyFlag,
			&cli.StringFlag{Name: "name", EnvVars: []string{"AWCP_NAME"}, Value: discovery.DefaultName(),
				Usage: "this executor's name in its agent card, manifest and advertisement"},
			&cli.BoolFlag{Name: "advertise", EnvVars: []string{"AWCP_ADVERTISE"},
				Usage: "advertise this executor on the local network with mDNS (_awcp._tcp, _acp-agent._tcp), for awcp-ctl peers and --peer NAME|auto"},
			&cli.StringFlag{Name: "description", EnvVars: []string{"AWCP_DESCRIPTION"},
				Usage: "what this executor's agent does, for delegators choosing a peer (agent card)"},
			&cli.GenericFlag{Name: "skill", EnvVars: []string{"AWCP_SKILL"}, Value: &repeated{},
				Usage: `a skill for the agent card, "name: description" (repeatable)`},
			clikit.MetricsListenFlag(),
		), append(sandboxFlags(), agentEnvFlags()...)...),
		Action: func(c *cli.Context) error { return serve(ctx, c) },
	}
}

func serve(ctx context.Context, c *cli.Context) error {
	log, err := clikit.Logger(c, c.App.ErrWriter)
	if err != nil {
		return err
	}
	state, err := clikit.StateDir(c)
	if err != nil {
		return err
	}
	root, err := filepath.Abs(c.String("work-root"))
	if err != nil {
		return clikit.UsageError("--work-root: %v", err)
	}
	tokens := c.StringSlice("token")
	if p := c.String("token-file"); p != "" {
		more, err := clikit.ReadTokenFile(p)
		if err != nil {
			return err
		}
		tokens = append(tokens, more...)
	}
	if clikit.TokenOnCommandLine() {
		log.Warn("--token on the command line shows in ps and /proc to every user of this machine: use --token-file")
	}
	// The agents this daemon starts must not inherit its secrets.
	clikit.ScrubSecrets(tokens)
	authorized, err := readAuthorizedKeys(c.String("authorized-delegators"))
	if err != nil {
		return err
	}
	if len(tokens) == 0 && len(authorized) == 0 && !loopbackOnly(c.String("listen")) {
		log.Warn("SERVING WITHOUT A TOKEN ON A NON-LOOPBACK ADDRESS: anyone who can reach " + c.String("listen") +
			" can delegate work to this machine's agent; give --token-file, or --listen 127.0.0.1:PORT")
	}
	for _, m := range c.StringSlice("access") {
		if m != control.AccessRO && m != control.AccessRW {
			return clikit.UsageError("--access takes rw and/or ro, not %q", m)
		}
	}
	// Metrics are recorded only when someone can read them.
	var reg *metrics.Registry
	var mountMetrics awcpfs.Metrics
	var execMetrics executor.Metrics
	if c.String("metrics-listen") != "" {
		reg = metrics.New()
		mountMetrics, execMetrics = reg, reg
	}
	var transports []control.ExecutorTransport
	offered := map[string]bool{}
	for _, name := range c.StringSlice("transports") {
		offered[name] = true
	}
	// The live mount's executor, offered or not, also checks host keys and
	// holds the reverse connections' slots for the git transport.
	live := &executor.SSHFSExecutor{Logger: log, ReconnectBound: clikit.Duration(c, "reconnect-bound"), Metrics: mountMetrics,
		KnownHosts: c.String("known-hosts"), InsecureAcceptHostKey: c.Bool("insecure-accept-host-key")}
	for _, name := range c.StringSlice("transports") {
		switch name {
		case control.TransportSSHFS:
			transports = append(transports, live)
		case control.TransportGit:
			transports = append(transports, &executor.GitExecutor{Live: live, Logger: log, AllowRemotes: c.StringSlice("git-remote-allow")})
		case control.TransportArchive:
			transports = append(transports, &executor.ArchiveExecutor{
				Limits: archive.Limits{MaxBytes: clikit.Bytes(c, "max-workspace-bytes")},
			})
		default:
			return clikit.UsageError("--transports takes sshfs, archive and/or git, not %q", name)
		}
	}
	if !offered[control.TransportSSHFS] {
		// Still known, so that INVITEs asking for it get DEP_MISSING and
		// a delegator on auto falls back.
		live.Disabled = true
		transports = append(transports, live)
	}
	var worker executor.Worker
	var sessions executor.SessionRunner // an ACP agent also serves editors' sessions
	var probe func(context.Context, agent.Task) (json.RawMessage, string, error)
	var profile *control.SandboxProfile
	switch cmd, acpCmd := c.String("agent-cmd"), c.String("agent-acp"); {
	case cmd != "" && acpCmd != "":
		return clikit.UsageError("give --agent-cmd or --agent-acp, not both")
	case cmd == "" && acpCmd == "":
		return clikit.UsageError("an agent is required: --agent-cmd CMD, or --agent-acp CMD for an ACP agent")
	case acpCmd != "":
		w := acp.Worker{Command: acpCmd, AllowExec: c.Bool("allow-exec"), Logger: log}
		worker, sessions, probe = w, w, w.ProbeStderr
		// What the ACP client enforces: its file and terminal callbacks
		// stay in the work dir, and terminal/create follows --allow-exec.
		yes, exec := true, c.Bool("allow-exec")
		profile = &control.SandboxProfile{CwdOnly: &yes, AllowNetwork: &yes, AllowExec: &exec}
	}
	if msg, hint := notInstalled(c.String("agent-cmd") + c.String("agent-acp")); msg != "" {
		// Refused at start, not at the first delegation's status 127.
		return clikit.UsageError("%s; %s", msg, hint)
	}
	confine, err := sandboxPolicy(c, c.String("agent-cmd"), c.String("agent-acp"))
	if err != nil {
		return err
	}
	agentEnviron, unset, err := agentEnv(c)
	if err != nil {
		return err
	}
	if len(unset) > 0 {
		log.Warn("--agent-env names variables this daemon's environment does not set: not passed", "names", strings.Join(unset, " "))
	}
	log.Info("agents' environment", "from this daemon", "PATH, the locale, TZ", "named", envNames(agentEnviron))
	if confine != nil && confine.Isolated {
		// Built once now: where it cannot be, every delegation would
		// fail its agent; a daemon that says so at once is not Ready.
		// As a delegation's agent runs: a user of its own.
		probe := *confine
		probe.User = &sandbox.User{UID: executor.ProbeUID, GID: executor.ProbeUID}
		if err := sandbox.Check(probe); err != nil {
			return fmt.Errorf("the agents' sandbox cannot be built here: %w (see SECURITY.md; --sandbox off runs them unconfined)", err)
		}
	}
	if confine != nil && profile == nil {
		// ACCEPT says what confines the agent: writes in its work dir
		// (and a temporary dir of its own) only.
		yes := true
		profile = &control.SandboxProfile{CwdOnly: &yes, AllowNetwork: &yes, AllowExec: &yes}
	}
	if confine == nil {
		log.Warn("agents run unconfined (--sandbox off): each reaches what this daemon reaches")
	} else if abi := sandbox.ABI(); abi < sandbox.MinABI {
		log.Warn("agents are not fully confined: this kernel's Landlock ABI is too old", "abi", abi, "needed", sandbox.MinABI)
	} else if !confine.Isolated {
		log.Warn("agents run as this daemon's user, in its mount namespace: a root and a user of their own each need the daemon to be root (with CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER); see SECURITY.md")
	}
	// The daemon holds its store for its whole life: a second one on the
	// same state dir finds it locked and stops at once, saying why.
	store, err := lease.Open(filepath.Join(state, "executor.db"), lease.Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	defer store.Close()
	agentID, err := discovery.AgentID(state)
	if err != nil {
		return err
	}
	identity, err := discovery.IdentityKey(state)
	if err != nil {
		return err
	}
	exec, err := executor.New(executor.Options{
		WorkRoot:             root,
		AgentCommand:         c.String("agent-cmd"),
		Worker:               worker,
		Sessions:             sessions,
		Sandbox:              profile,
		Confine:              confine,
		AgentEnv:             agentEnviron,
		Permission:           c.String("permission"),
		PermissionTimeout:    clikit.Duration(c, "permission-timeout"),
		Store:                store,
		StateDir:             state,
		NoAgentCaches:        c.String("agent-cache") != "delegator",
		Transports:           transports,
		MaxConcurrent:        c.Int("max-concurrent"),
		MaxTTL:               clikit.Duration(c, "max-ttl"),
		AccessModes:          c.StringSlice("access"),
		Tokens:               tokens,
		AuthorizedDelegators: authorized,
		PlainHTTP:            c.Bool("plain-http"),
		Retention:            clikit.Duration(c, "retention"),
		StartTimeout:         clikit.Duration(c, "start-timeout"),
		RoundWait:            clikit.Duration(c, "round-wait"),
		KeepAlive:            clikit.Duration(c, "keepalive"),
		Name:                 c.String("name"),
		AgentID:              agentID,
		IdentityKey:          identity,
		Description:          c.String("description"),
		Skills:               skills(*c.Generic("skill").(*repeated)),
		Version:              clikit.Version,
		Metrics:              execMetrics,
		Logger:               log,
	})
	if err != nil {
		return clikit.UsageError("%v", err)
	}
	if c.Bool("a2a") {
		exec.MountA2A(a2aface.Path, a2aface.New(ctx, exec, a2aface.Options{Logger: log, TTL: min(30*time.Minute, clikit.Duration(c, "max-ttl"))}))
	}
	if reg != nil {
		reg.CountDelegations("executor", store.AssignmentCensus)
		reg.CountSlots(c.Int("max-concurrent"), store.ActiveAssignments)
		stop, err := clikit.ServeMetrics(ctx, reg, c.String("metrics-listen"), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The key delegators are told to compare (peers trust), whatever the
	// log level.
	fmt.Fprintf(c.App.Writer, "awcp-fs: listening on https://%s, identity %s\n", ln.Addr(), control.Fingerprint(control.IdentityPublic(identity)))
	log.Info("executor", "name", c.String("name"), "agent", agentID,
		"identity", control.Fingerprint(control.IdentityPublic(identity)), "key", control.IdentityPublic(identity))
	if c.Bool("plain-http") {
		log.Warn("plain HTTP accepted beside TLS (--plain-http): a delegator that uses it sends its token, workspace and session in clear", "url", "http://"+ln.Addr().String())
	}
	if c.Bool("advertise") {
		adv, err := advertise(c, log, agentID, ln.Addr().(*net.TCPAddr))
		if err != nil {
			ln.Close()
			return err
		}
		// Withdrawn once the executor has stopped taking delegations.
		defer adv.Close()
	}
	if probe != nil {
		// What the agent can do, for editors' gateways (the manifest's
		// acp_agent), asked once, beside the service.
		pctx, stopProbe := context.WithTimeout(ctx, 30*time.Second)
		probed := make(chan struct{})
		go func() {
			defer close(probed)
			probeACPAgent(pctx, probe, confine, c.String("name"), agentEnviron, exec, log)
		}()
		defer func() { stopProbe(); <-probed }()
	}
	stopOperator, err := serveOperator(ctx, state, exec, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopOperator()
	return exec.Serve(ctx, ln)
}

// probeACPAgent asks the ACP agent for its initialize answer, started as
// a session's agent is (executor.ProbeTask), in a scratch directory, and
// gives it to the executor's manifest — or why it gave none.
func probeACPAgent(ctx context.Context, probe func(context.Context, agent.Task) (json.RawMessage, string, error),
	confine *sandbox.Policy, name string, env []string, ex *executor.Executor, log *slog.Logger) {
	scratch, err := os.MkdirTemp("", "awcp-acp-probe-")
	if err != nil {
		log.Warn("ACP agent not probed", "err", err)
		return
	}
	defer os.RemoveAll(scratch)
	t, cleanup, err := executor.ProbeTask(confine, scratch, name, env)
	if err != nil {
		log.Warn("ACP agent not probed", "err", err)
		return
	}
	defer cleanup()
	init, stderr, err := probe(ctx, t)
	if err != nil {
		log.Warn("the ACP agent did not answer initialize; editors' gateways say so", "err", err, "stderr", stderr)
		why := err.Error()
		if line := lease.TellingLine(stderr); line != "" {
			why += "; its stderr: " + line
		}
		ex.SetACPAgentError(why)
		return
	}
	ex.SetACPAgent(init)
}

// advertise announces the executor on the local network, warning when
// that tells more than the LAN about it.
func advertise(c *cli.Context, log *slog.Logger, agentID string, addr *net.TCPAddr) (*discovery.Advertiser, error) {
	ips, public, err := discovery.ListenerIPs(addr)
	if err != nil {
		return nil, fmt.Errorf("--advertise: %w", err)
	}
	if len(ips) == 0 {
		return nil, clikit.UsageError("--advertise: the listener %s has no address another machine could reach", addr)
	}
	if addr.IP.IsLoopback() {
		log.Warn("advertising a loopback listener: only this machine can reach it", "listen", addr)
	}
	if public {
		log.Warn("advertising on a public address: every machine on that network learns of this executor; require a --token", "addresses", ips)
	}
	adv, err := discovery.Advertise(discovery.Advertisement{
		AgentID: agentID, Name: c.String("name"), Version: clikit.Version, Port: addr.Port, IPs: ips,
	}, log)
	if err != nil {
		return nil, err
	}
	log.Info("advertised with mDNS", "service", discovery.ServiceAWCP, "addresses", ips)
	return adv, nil
}

// repeated is a flag given several times whose values may hold commas
// (urfave/cli's slice flags split on them).
type repeated []string

func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }
func (r *repeated) String() string     { return strings.Join(*r, "; ") }

// skills parses --skill values, "name: description" or just a name.
func skills(flags []string) []control.CardSkill {
	var out []control.CardSkill
	for _, f := range flags {
		name, desc, _ := strings.Cut(f, ":")
		name, desc = strings.TrimSpace(name), strings.TrimSpace(desc)
		if name == "" {
			continue
		}
		out = append(out, control.CardSkill{ID: name, Name: name, Description: desc, Tags: []string{}})
	}
	return out
}

// loopbackOnly reports whether listen is an address only this machine
// reaches.
func loopbackOnly(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// gitBridgeCommand is what git runs, on the executor, as its upload-pack
// or receive-pack for the git transport: it joins git's stdin and stdout
// to the delegation's SSH session through the daemon's socket
// (executor.GitExecutor). Not for people.
func gitBridgeCommand() *cli.Command {
	return &cli.Command{
		Name:      "git-bridge",
		Hidden:    true,
		ArgsUsage: "SOCKET upload|receive [PATH]",
		Action: func(c *cli.Context) error {
			if c.Args().Len() < 2 {
				return clikit.UsageError("git-bridge takes a socket and a verb")
			}
			return executor.RunGitBridge(c.Args().Get(0), c.Args().Get(1), os.Stdin, os.Stdout)
		},
	}
}
