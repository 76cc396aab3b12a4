package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/lendarchive"
	"github.com/awcp/awcp/control/delegator/lendgit"
	"github.com/awcp/awcp/control/delegator/lendlive"
	"github.com/awcp/awcp/control/discovery"
	"github.com/awcp/awcp/internal/metrics"
	"github.com/awcp/awcp/lease"
)

// exitPending is output's exit code for a delegation that has not ended.
const exitPending = 3

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
	audit := &delegator.AuditLog{Store: e.store, MaxRecords: records, Retention: clikit.Duration(c, "audit-retention"), Logger: e.log}
	opts := lendlive.SSHOptions{StateDir: e.state, Store: e.store, PerAddress: perAddress,
		Listen: listen, AdvertiseHost: host, AdvertisePort: port, Logger: e.log,
		Audit: audit, NoAudit: records == 0}
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

// view is a delegation as shown to the user: no secret in it.
type view struct {
	*lease.Delegation
	Token      string `json:"token,omitempty"`
	SessionKey string `json:"sessionKey,omitempty"`
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func redact(d *lease.Delegation) view { return view{Delegation: d} }

// report prints how a delegation stands or ended: the result to stdout, a
// failure (code, message, hint) to stderr. It returns the exit error.
func report(c *cli.Context, d *lease.Delegation) error {
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
	} else if d.State == lease.Completed && d.Transport == control.TransportArchive && d.AccessMode == control.AccessRW && d.Staged == nil {
		fmt.Fprintln(w, "changes: none")
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
		fmt.Fprintf(w, "note: %s\n", n)
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
	if n := len(d.Progress); n > 0 {
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
	case !d.State.Terminal():
		return clikit.Exit(exitPending)
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
				return c.Bool("active") && d.State.Terminal() || len(states) > 0 && !slices.Contains(states, string(d.State))
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
