package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/discovery"
	"github.com/awcp/awcp/internal/sandbox"
)

// maxClockSkew is the most the delegator's and the executor's clocks may
// differ: leases and the live mount's certificates are timed by both.
const maxClockSkew = 30 * time.Second

func doctorCommand(ctx context.Context) *cli.Command {
	// `doctor --config FILE` checks what serve will be given.
	clikit.SettingsOf("doctor", "serve")
	return &cli.Command{
		Name:  "doctor",
		Usage: "check this machine as a delegator, and with --peer an executor both ways: each line OK or FAIL with the fix",
		Flags: append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "peer", EnvVars: []string{"AWCP_PEER"},
				Usage: "an executor to check against: its URL (https://host:10200, with --peer-key)"},
			&cli.StringFlag{Name: "peer-key", EnvVars: []string{"AWCP_PEER_KEY"}, Usage: "the executor's identity key (`awcp-fs id` prints it)"},
			&cli.BoolFlag{Name: "plain-http", EnvVars: []string{"AWCP_PLAIN_HTTP"}, Usage: "check an http:// executor over plain HTTP"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"AWCP_TOKEN"}, Usage: "credential the executor requires"},
			clikit.TokenFileFlag("a file holding the token, mode 600 (--token shows in ps)"),
			&cli.StringFlag{Name: "ssh-listen", EnvVars: []string{"AWCP_SSH_LISTEN"}, Value: ":0",
				Usage: "address of the embedded SSH server, as export and serve are given it"},
		),
		Action: func(c *cli.Context) error { return doctor(ctx, c) },
	}
}

func doctor(ctx context.Context, c *cli.Context) error {
	l := &clikit.Checklist{W: c.App.Writer}
	clikit.CheckSettingsSecrets(l, c)
	state, err := clikit.StateDirPath(c)
	if err != nil {
		return err
	}
	clikit.CheckStateDir(l, state, "delegator.db", "agent-id")
	_, running := delegator.DialLocal(filepath.Join(state, "ctl.sock"))
	if running {
		l.OK("daemon", "awcp-ctl serve runs on "+state)
	} else {
		l.OK("daemon", "none runs (export starts what it needs; export --background starts one)")
	}
	sshListen := c.String("ssh-listen")
	_, portText, err := net.SplitHostPort(sshListen)
	if err != nil {
		return clikit.UsageError("--ssh-listen %q: %v", sshListen, err)
	}
	fixedPort := portText != "0" && portText != ""
	if fixedPort {
		clikit.CheckPortFree(l, "ssh port", sshListen, running, "stop what holds it, or give another --ssh-listen")
	} else {
		l.OK("ssh port", "a free port is taken for each run (--ssh-listen "+sshListen+"); behind a firewall, fix one, e.g. --ssh-listen :2222")
	}

	checkForeignSandbox(l)

	peer := c.String("peer")
	if peer == "" {
		l.Info("executor", "not checked: give --peer URL to check the network both ways and the clocks")
		return l.Result()
	}
	if !isURL(peer) {
		return clikit.UsageError("--peer takes the executor's URL here (https://host:port); `awcp-ctl peers` lists those on this network")
	}
	token, err := clikit.PeerToken(c)
	if err != nil {
		return err
	}
	// The delegator's certificate, where it has an identity already
	// (doctor makes nothing in a state dir).
	var identity ed25519.PrivateKey
	if _, err := os.Stat(state); err == nil {
		identity, _ = discovery.IdentityKey(state)
	}
	client := &delegator.PeerClient{BaseURL: peer, Token: token, HTTP: &http.Client{Timeout: 10 * time.Second},
		Key: c.String("peer-key"), PlainHTTP: c.Bool("plain-http"), Identity: identity}
	if client.Key == "" {
		client.AgentID, client.Key = (&discovery.Browser{Book: filepath.Join(state, "peers.json")}).KeyAt(peer)
	}
	reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	card, err := client.AgentCard(reqCtx)
	if err != nil {
		l.Fail("executor reachable", control.AsProtocolError(err, control.CodeDeclined).Message, "check the URL, that `awcp-fs serve` runs there, and that its --listen is an address this machine can reach")
		return l.Result()
	}
	l.OK("executor reachable", fmt.Sprintf("%s (%s %s)", peer, card.Name, card.Version))
	manifest, err := client.Manifest(reqCtx)
	if err != nil {
		l.Fail("executor manifest", err.Error(), "upgrade the executor: an awcp-fs serve answers GET /manifest")
	}

	// The executor dials back: to the port the SSH server will listen on,
	// which a stand-in greets as an SSH server would. A running daemon's
	// own port is not known here; a random one says only that this
	// machine is reachable at all.
	listenAddr := sshListen
	if fixedPort && running {
		l.Info("executor → here", "the daemon holds "+sshListen+"; checking another port of this machine instead")
		listenAddr = net.JoinHostPort(hostOf(sshListen), "0")
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		l.Fail("executor → here", "cannot listen on "+listenAddr+": "+err.Error(), "give a free --ssh-listen")
		return l.Result()
	}
	var greeter sync.WaitGroup
	greeter.Add(1)
	go func() { defer greeter.Done(); greet(ln) }()
	defer greeter.Wait()
	defer ln.Close() // first: greet returns once it is closed
	port := ln.Addr().(*net.TCPAddr).Port
	before := time.Now()
	res, date, err := client.Probe(reqCtx, port)
	after := time.Now()
	if !date.IsZero() {
		// Date has whole seconds: the skew is known to about one.
		skew := date.Sub(before.Add(after.Sub(before) / 2)).Round(time.Second)
		if skew.Abs() > maxClockSkew {
			l.Fail("clock", fmt.Sprintf("the executor's clock is %v off this one's (more than %v)", skew, maxClockSkew),
				"synchronise both clocks (chrony or systemd-timesyncd): leases and certificates are timed by them")
		} else {
			l.OK("clock", fmt.Sprintf("the executor's clock is within %v of this one's (%v)", maxClockSkew, skew))
		}
	}
	live, reverse := false, false
	switch {
	case err != nil:
		pe := control.AsProtocolError(err, "")
		if pe.Code == control.CodeAuthFailed {
			l.Fail("executor → here", "the executor requires a token", "pass --token (the executor's --token)")
		} else {
			l.Fail("executor → here", "the executor could not be asked to connect back: "+err.Error(), "upgrade the executor (GET /awcp/probe)")
		}
	case !res.Reachable:
		l.Info("executor → here", fmt.Sprintf("the executor cannot open port %d of this machine (%s): the live mount will run in reverse, over connections this machine opens", port, res.Error))
		reverse = true
	case !res.SSH:
		l.Info("executor → here", fmt.Sprintf("port %d answered the executor, but not as this SSH server (a proxy in between?): the live mount will run in reverse", port))
		reverse = true
	default:
		l.OK("executor → here", fmt.Sprintf("the executor reaches port %d of this machine", port))
		live = true
	}
	if manifest != nil && manifest.AWCP != nil {
		switch fuse := manifest.AWCP.FUSE; {
		case live && fuse:
			l.Info("transport", "auto will use sshfs (the live mount)")
		case reverse && fuse:
			l.Info("transport", "auto will use sshfs in reverse (the live mount, this machine opening its connections)")
		case !fuse:
			l.Info("transport", "auto will use archive: the executor cannot mount (FUSE)")
		default:
			l.Info("transport", "auto will use sshfs, the executor dialling this machine (it could not be asked whether it can)")
		}
	}
	return l.Result()
}

// greet answers each connection with an SSH server's first line, as the
// real one would, and closes it.
func greet(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		conn.Write([]byte("SSH-2.0-awcp_doctor\r\n"))
		conn.Close()
	}
}

func hostOf(addr string) string {
	host, _, _ := net.SplitHostPort(addr)
	return host
}

// checkForeignSandbox says whether compare --check can run here: the
// executor's code runs on this machine only in a sandbox of its own
// (sandbox.ForeignCode), which is built and tried.
func checkForeignSandbox(l *clikit.Checklist) {
	dir, err := os.MkdirTemp("", "awcp-doctor-check-")
	if err != nil {
		l.Info("check sandbox", "not checked: "+err.Error())
		return
	}
	defer os.RemoveAll(dir)
	p, err := sandbox.ForeignCode(dir, 0)
	if err != nil {
		l.Info("check sandbox", "WARNING: compare --check is refused here: "+err.Error())
		return
	}
	l.OK("check sandbox", "compare --check runs the executor's code in "+sandbox.Describe(p))
}
