package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/mcpserver"
	"github.com/awcp/awcp/lease"
)

func mcpCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve the delegate tools to an MCP client over stdio (spec §8.2)",
		Description: "Stdout carries only MCP; logs go to stderr or --log-file. Delegations go through the\n" +
			"`awcp-ctl serve` daemon when one runs, else run in this process (with its own SSH server for\n" +
			"live mounts) and are cancelled when the MCP client goes away.",
		Flags: append(append(clikit.CommonFlags(),
			&cli.StringSliceFlag{Name: "peers", Aliases: []string{"peer"}, EnvVars: []string{"AWCP_PEERS", "AWCP_PEER"},
				Usage: "executor URLs, comma-separated; their agent cards are described to the model (peer, as export names it, in a config file too)"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"AWCP_TOKEN"}, Usage: "credential the executors require"},
			clikit.TokenFileFlag("a file holding the token, mode 600 (--token shows in ps)"),
			&cli.StringFlag{Name: "transport", EnvVars: []string{"AWCP_TRANSPORT"}, Value: "auto", Usage: "auto, live (a live mount; sshfs on the wire), live-reverse (sshfs-reverse) or archive"},
			&cli.StringFlag{Name: "dialect", EnvVars: []string{"AWCP_DIALECT"}, Value: "auto", Usage: "AWCP dialect: auto, seed or head"},
			clikit.DurationFlag("discovery-timeout", 3*time.Second, "how long to wait for each peer's agent card at start"),
			&cli.BoolFlag{Name: "discover", EnvVars: []string{"AWCP_DISCOVER"},
				Usage: "look for executors on the local network (mDNS) for as long as the server runs: the peers tool lists them, and delegate takes their names, ids or auto"},
			&cli.StringFlag{Name: "log-file", EnvVars: []string{"AWCP_LOG_FILE"}, Usage: "append logs to this file instead of stderr"},
			idleTTLFlag(),
		), append(append(policyFlags(), sshFlags()...), browseFlags()...)...),
		Action: func(c *cli.Context) error { return serveMCP(ctx, c) },
	}
}

func serveMCP(ctx context.Context, c *cli.Context) error {
	if c.Args().Len() > 0 {
		return clikit.UsageError("mcp takes no arguments")
	}
	switch t := transportOf(c); t {
	case "auto", control.TransportSSHFS, delegator.TransportSSHFSReverse, control.TransportArchive:
	default:
		return clikit.UsageError("--transport must be auto, live, live-reverse or archive, not %q", t)
	}
	switch d := c.String("dialect"); d {
	case "auto", control.DialectSeed, control.DialectHead:
	default:
		return clikit.UsageError("--dialect must be auto, seed or head, not %q", d)
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
	e.mcp = true
	book := e.browser(c)
	peers := mcpserver.Discover(ctx, nil, c.StringSlice("peers"), token, c.Bool("plain-http"), book.KeyAt, clikit.Duration(c, "discovery-timeout"))
	for _, p := range peers {
		if p.Err != nil {
			e.log.Warn("peer offline at start", "peer", p.URL, "err", p.Err)
		}
	}
	maxWrite := clikit.Bytes(c, "max-write-bytes")
	chain, err := callChain()
	if err != nil {
		return err
	}
	var finder mcpserver.PeerFinder
	if c.Bool("discover") || len(c.StringSlice("dns")) > 0 {
		b := e.browser(c)
		browseCtx, stopBrowsing := context.WithCancel(ctx)
		browsed := make(chan struct{})
		go func() {
			defer close(browsed)
			if err := b.Run(browseCtx); err != nil {
				e.log.Warn("discovery", "err", err)
			}
		}()
		defer func() { stopBrowsing(); <-browsed }()
		finder = b
	}
	dlg := &mcpDelegator{e: e, c: c}
	defer dlg.close()
	srv, err := mcpserver.New(mcpserver.Options{
		Hide:              c.StringSlice("hide"),
		NoHideDefaults:    c.Bool("no-hide-defaults"),
		NoDelete:          c.Bool("no-delete"),
		AllowGitControl:   c.Bool("allow-git-control"),
		PlainHTTP:         c.Bool("plain-http"),
		KeyFor:            book.KeyAt,
		LendHiddenHistory: c.Bool("lend-hidden-history"),
		MaxWriteBytes:     maxWrite,
		Limits:            admissionLimits(c),
		SnapshotMode:      c.String("snapshot"),
		Delegator:         dlg,
		Peers:             peers,
		Finder:            finder,
		Self:              e.agentID,
		CallChain:         chain,
		Token:             token,
		Transport:         transportOf(c),
		Dialect:           c.String("dialect"),
		Version:           clikit.Version,
		Logger:            e.log,
	})
	if err != nil {
		return err
	}
	e.log.Info("mcp server on stdio", "peers", len(peers))
	err = srv.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(c.App.Reader), Writer: nopWriteCloser{c.App.Writer}})
	if ctx.Err() != nil || err == nil || err == io.EOF {
		return nil // the client went away, or a signal: both are a normal end
	}
	return fmt.Errorf("mcp: %w", err)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// mcpDelegator runs the tools' delegations through the `awcp-ctl serve`
// daemon when one answers, else in this process: a Delegator with its own
// SSH server, made at the first delegation that needs it and kept until
// close.
// mcpDelegator has the snapshot tools: their absence would be silent.
var _ mcpserver.Reviewer = (*mcpDelegator)(nil)

type mcpDelegator struct {
	e *env
	c *cli.Context

	mu      sync.Mutex // guards the fields below; held across nothing but the local delegator's start-up
	local   *delegator.Delegator
	started []string           // delegations run by local
	runCtx  context.Context    // lives until close: local's followers, scheduler and SSH server
	stop    context.CancelFunc // ends runCtx
	runs    sync.WaitGroup     // local's followers
	sched   chan struct{}      // closed when local's scheduler has returned
	waitSSH func()
}

var _ mcpserver.Delegator = (*mcpDelegator)(nil)

func (m *mcpDelegator) daemon() (*delegator.LocalClient, bool) {
	return delegator.DialLocal(m.e.socket())
}

// inProcess returns the local delegator, starting it (and its SSH server
// and scheduler) the first time.
func (m *mcpDelegator) inProcess() (*delegator.Delegator, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.local != nil {
		return m.local, nil
	}
	runCtx, stop := context.WithCancel(context.Background())
	wait, err := m.e.liveMount(runCtx, m.c, transportOf(m.c), func(err error) {
		m.e.log.Warn("no SSH server for live mounts; delegations use archive", "err", err)
	})
	if err != nil {
		stop()
		return nil, err
	}
	m.waitSSH = wait
	dlg, err := m.e.delegator(nil)
	if err != nil {
		stop()
		return nil, err
	}
	m.local, m.runCtx, m.stop, m.sched = dlg, runCtx, stop, make(chan struct{})
	go func(done chan struct{}) { defer close(done); dlg.RunScheduler(runCtx) }(m.sched)
	return dlg, nil
}

func (m *mcpDelegator) Start(ctx context.Context, req delegator.ExportRequest) (string, error) {
	if d, ok := m.daemon(); ok {
		return d.Export(req)
	}
	dlg, err := m.inProcess()
	if err != nil {
		return "", err
	}
	del, err := dlg.Create(req)
	if err != nil {
		return "", err
	}
	m.follow(dlg, del)
	return del.ID, nil
}

// follow has the local delegator follow del until it ends or close.
func (m *mcpDelegator) follow(dlg *delegator.Delegator, del *lease.Delegation) {
	m.mu.Lock()
	m.started = append(m.started, del.ID)
	m.runs.Add(1)
	runCtx := m.runCtx
	m.mu.Unlock()
	go func() {
		defer m.runs.Done()
		// Not the call's context: a background delegation outlives its call.
		if del.SessionDriven {
			m.e.driver(dlg, m.c).Drive(runCtx, del.ID)
			return
		}
		if _, err := dlg.Run(runCtx, del.ID); err != nil {
			m.e.log.Warn("delegation", "delegation", del.ID, "err", err)
		}
	}()
}

// ResultFiles, ApplyResult and DiscardResult work on the store and the
// staged results' directories, daemon or not.
func (m *mcpDelegator) ResultFiles(id, snap string) ([]delegator.ChangedFile, error) {
	dlg, err := m.e.delegator(nil)
	if err != nil {
		return nil, err
	}
	return dlg.ResultFiles(id, snap)
}

func (m *mcpDelegator) ApplyResult(ctx context.Context, id, snap, branch string, allowGitControl bool) (*delegator.Applied, error) {
	dlg, err := m.e.delegator(nil)
	if err != nil {
		return nil, err
	}
	return dlg.ApplyResult(ctx, id, snap, branch, allowGitControl)
}

func (m *mcpDelegator) CompareGroup(group string) ([]delegator.Attempt, error) {
	dlg, err := m.e.delegator(nil)
	if err != nil {
		return nil, err
	}
	return dlg.CompareGroup(group)
}

func (m *mcpDelegator) DiscardAttemptsBut(keep string) ([]string, error) {
	dlg, err := m.e.delegator(nil)
	if err != nil {
		return nil, err
	}
	return dlg.DiscardAttemptsBut(keep)
}

func (m *mcpDelegator) DiscardResult(id, snap string) error {
	dlg, err := m.e.delegator(nil)
	if err != nil {
		return err
	}
	return dlg.DiscardResult(id, snap)
}

// Recover takes back delegation id if the process that followed it
// ended (this server's previous run): this process follows it, or the
// daemon, which adopts such delegations, does.
func (m *mcpDelegator) Recover(ctx context.Context, id string) (*lease.Delegation, string, error) {
	del, err := m.e.store.Delegation(id)
	if err != nil {
		return nil, "", err
	}
	switch {
	case del.State.Terminal():
		return del, "it had ended already: this is its outcome", nil
	case !delegator.OwnerGone(del):
		return del, fmt.Sprintf("it is followed by a running process (pid %d): nothing to recover; delegate_output reports it", del.OwnerPID), nil
	case !delegator.Adoptable(del):
		return del, "it cannot be re-attached: its live mount was served by the process that ended; delegate_cancel ends it", nil
	}
	if d, ok := m.daemon(); ok {
		if err := d.Adopt(id); err != nil {
			return nil, "", err
		}
		del, err = m.e.store.Delegation(id)
		return del, "re-attached: the daemon follows it now; delegate_output (block: true) waits for its end", err
	}
	dlg, err := m.inProcess()
	if err != nil {
		return nil, "", err
	}
	m.follow(dlg, del)
	return del, "re-attached: this server follows it now; delegate_output (block: true) waits for its end", nil
}

func (m *mcpDelegator) Cancel(ctx context.Context, id string) error {
	if d, ok := m.daemon(); ok {
		return d.Cancel(id)
	}
	m.mu.Lock()
	dlg := m.local
	m.mu.Unlock()
	if dlg == nil {
		var err error
		if dlg, err = m.e.delegator(nil); err != nil {
			return err
		}
	}
	_, err := dlg.Cancel(ctx, id)
	return err
}

func (m *mcpDelegator) Find(idOrPrefix string) (*lease.Delegation, error) {
	return m.e.store.FindDelegation(idOrPrefix)
}

func (m *mcpDelegator) List() ([]*lease.Delegation, error) { return m.e.store.Delegations() }

// Permit goes to the executor straight from here: the store has its
// address and token, daemon or not.
func (m *mcpDelegator) Permit(ctx context.Context, id, requestID, optionID, answerer string) error {
	dlg, err := m.e.delegator(nil)
	if err != nil {
		return err
	}
	return dlg.Permit(ctx, id, requestID, optionID, answerer)
}

// Say and EndSession write the session's record, where its driver (this
// process's or the daemon's) reads them.
func (m *mcpDelegator) Say(id, prompt, by string) (int, error) {
	dlg, err := m.e.delegator(nil)
	if err != nil {
		return 0, err
	}
	return dlg.Say(id, prompt, by)
}

func (m *mcpDelegator) EndSession(id string) error {
	dlg, err := m.e.delegator(nil)
	if err != nil {
		return err
	}
	return dlg.EndSession(id)
}

// close cancels the delegations this process still runs — their SSH
// server ends with it — and waits for every goroutine it started.
func (m *mcpDelegator) close() {
	m.mu.Lock()
	dlg, ids, stop, sched, waitSSH := m.local, m.started, m.stop, m.sched, m.waitSSH
	m.mu.Unlock()
	if dlg == nil {
		return
	}
	cancelled := 0
	for _, id := range ids {
		d, err := m.e.store.Delegation(id)
		if err != nil || d.State.Terminal() {
			continue
		}
		if delegator.Adoptable(d) {
			// A restarted server's delegate_recover (or the daemon,
			// after a grace) takes it back; the executor works on.
			// Not in the middle of its handshake, though: that is
			// not resumed, so it is given the time to end.
			m.e.log.Info("the MCP client went away: left running for delegate_recover", "delegation", id)
			m.pastHandshake(id, time.Now().Add(10*time.Second))
			continue
		}
		m.e.log.Info("the MCP client went away: cancelling", "delegation", id)
		if _, err := dlg.Cancel(context.Background(), id); err != nil {
			m.e.log.Warn("cancel", "delegation", id, "err", err)
		}
		cancelled++
	}
	// Followers return once their delegations are terminal; one that does
	// not within 10s is stopped, leaving its delegation to expire.
	runsDone := make(chan struct{})
	go func() { m.runs.Wait(); close(runsDone) }()
	if cancelled > 0 {
		select {
		case <-runsDone:
		case <-time.After(10 * time.Second):
			m.e.log.Warn("delegations still followed after 10s; stopping")
		}
	}
	stop()
	<-runsDone
	<-sched
	if waitSSH != nil {
		waitSSH()
	}
}

// pastHandshake waits, until deadline, for delegation id to be running
// at its executor, or ended.
func (m *mcpDelegator) pastHandshake(id string, deadline time.Time) {
	for time.Now().Before(deadline) {
		d, err := m.e.store.Delegation(id)
		if err != nil || d.State == lease.Running || d.State.Terminal() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.e.log.Warn("the delegation's handshake did not end in time", "delegation", id)
}

// logFile sends the command's logs to --log-file, if given, instead of
// stderr (the stdio servers, mcp and acp, keep stdout for their protocol
// and may have no one reading stderr).
func logFile(c *cli.Context) (closeLog func(), err error) {
	path := c.String("log-file")
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--log-file: %w", err)
	}
	c.App.ErrWriter = f
	return func() { f.Close() }, nil
}
