package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/discovery"
	"github.com/awcp/awcp/control/skills"
	"github.com/awcp/awcp/lease"
)

// browseFlags configure LAN discovery where a command browses.
func browseFlags() []cli.Flag {
	return []cli.Flag{
		clikit.DurationFlag("browse-window", 1500*time.Millisecond, "how long an mDNS query listens for executors' answers", "AWCP_BROWSE_WINDOW"),
		clikit.DurationFlag("browse-interval", 5*time.Second, "between mDNS queries while watching; an executor silent for three is shown offline", "AWCP_BROWSE_INTERVAL"),
		&cli.StringSliceFlag{Name: "dns", Usage: "browse executors published in DNS under `DOMAIN` (DNS-SD: _awcp._tcp.DOMAIN), beside mDNS; repeatable", EnvVars: []string{"AWCP_DNS"}},
		&cli.StringFlag{Name: "dns-server", Usage: "the DNS server (`HOST:PORT`) --dns asks; default /etc/resolv.conf's", EnvVars: []string{"AWCP_DNS_SERVER"}},
	}
}

// browser finds executors by mDNS and under the --dns domains; for a
// peer argument dns:DOMAIN, under that domain alone.
func (e *env) browser(c *cli.Context, peerArgs ...string) *discovery.Browser {
	b := &discovery.Browser{
		Self: e.agentID, Book: filepath.Join(e.state, "peers.json"), Logger: e.log,
		Window: clikit.Duration(c, "browse-window"), Interval: clikit.Duration(c, "browse-interval"),
		Domains: c.StringSlice("dns"), DNSServer: c.String("dns-server"),
	}
	var only []string
	for _, arg := range peerArgs {
		if d, ok := discovery.DomainOf(arg); ok {
			only = append(only, d)
		}
	}
	if len(only) > 0 && len(only) == len(peerArgs) {
		b.Domains, b.NoMDNS = only, true
	}
	return b
}

// isURL tells a peer given as a URL from a name, an id or auto.
func isURL(peer string) bool { return strings.Contains(peer, "://") }

// resolvePeer turns req's peer, when it is not a URL, into the URL of an
// executor found on the network, and says which and why.
// choosePeers are the URLs of the n executors auto (or dns:DOMAIN)
// chooses for n attempts at req (discovery.ChooseN).
func (e *env) choosePeers(ctx context.Context, c *cli.Context, req delegator.ExportRequest, n int) ([]string, error) {
	b := e.browser(c, req.Peer)
	if err := b.Round(ctx); err != nil {
		return nil, control.Errorf(control.CodeDeclined, "cannot look for executors: %v", err)
	}
	if err := b.Save(); err != nil {
		e.log.Warn("peer book", "err", err)
	}
	chosen, err := discovery.ChooseN(discovery.Among(b.Peers(), req.Peer), discovery.Want{Transport: req.Transport, Access: req.Access, Self: e.agentID, Exclude: req.CallChain}, n)
	if err != nil {
		return nil, control.Errorf(control.CodeUsage, "--attempts %d: %v", n, err)
	}
	// Their URLs, whose trusted keys the book holds: each is reached
	// where this round found it, not looked up again by id (which would
	// browse mDNS, and find nothing where DNS found them).
	urls := make([]string, len(chosen))
	for i, p := range chosen {
		urls[i] = p.URL
	}
	return urls, nil
}

func (e *env) resolvePeer(ctx context.Context, c *cli.Context, req *delegator.ExportRequest) error {
	if u, ok := strings.CutPrefix(req.Peer, delegator.PeerPrefixA2A); ok {
		// An A2A agent, named by its URL; the delegator checks it. A key
		// trusted at that URL pins it, as an executor's.
		if req.PeerKey == "" && isURL(u) {
			_, req.PeerKey = e.browser(c).KeyAt(u)
		}
		return nil
	}
	if isURL(req.Peer) {
		// A URL the user trusted a key at (`peers trust URL`) is reached
		// pinned to that key.
		if req.PeerKey == "" {
			req.PeerAgentID, req.PeerKey = e.browser(c).KeyAt(req.Peer)
		}
		return nil
	}
	// host:port, as ssh and rsync take it, is an address, not a name.
	if host, port, err := net.SplitHostPort(req.Peer); err == nil && host != "" {
		if _, err := strconv.Atoi(port); err == nil {
			return clikit.UsageError("--peer %s is an address: give it as a URL, --peer https://%s (trusted first: awcp-ctl peers trust https://%s)", req.Peer, req.Peer, req.Peer)
		}
	}
	b := e.browser(c, req.Peer)
	if err := b.Round(ctx); err != nil {
		return control.Errorf(control.CodeDeclined, "cannot look for executors: %v", err).
			WithHint("give the executor's URL with --peer https://host:port (first `awcp-ctl peers trust https://host:port`)")
	}
	if err := b.Save(); err != nil {
		e.log.Warn("peer book", "err", err)
	}
	want := discovery.Want{Transport: req.Transport, Access: req.Access, Self: e.agentID, Exclude: req.CallChain}
	p, why, err := discovery.Resolve(b.Peers(), req.Peer, want)
	if err != nil {
		return control.Errorf(control.CodeDeclined, "--peer %s: %v", req.Peer, err) // offline, circular, untrusted: not all the caller's mistake
	}
	for _, q := range discovery.Fallbacks(b.Peers(), req.Peer, want, p.AgentID) {
		req.PeerFallbacks = append(req.PeerFallbacks, lease.PeerRef{URL: q.URL, AgentID: q.AgentID, Name: q.Name, Key: q.TrustedKey})
	}
	req.Peer, req.PeerAgentID, req.PeerName, req.PeerChoice, req.PeerKey = p.URL, p.AgentID, p.Name, why, p.TrustedKey
	return nil
}

// callChain is the chain this process was started in, if an executor
// started it ($AWCP_CALL_CHAIN).
func callChain() ([]string, error) {
	chain, err := control.ParseCallChain(os.Getenv(control.CallChainEnv))
	if err != nil {
		return nil, clikit.UsageError("%v", err)
	}
	return chain, nil
}

func peersCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:  "peers",
		Usage: "list the executors found on this network (mDNS) and under --dns domains, online or not",
		Description: "Executors advertise themselves with `awcp-fs serve --advertise`. Those found before and\n" +
			"not answering now are listed offline, with when they were last seen. Linux and macOS\n" +
			"answer alike; the query is IPv4 multicast on the default interface.",
		Subcommands: []*cli.Command{trustCommand(ctx), untrustCommand(), selfCommand()},
		Flags: append(append(clikit.CommonFlags(),
			&cli.BoolFlag{Name: "watch", Usage: "keep looking, and print each change as it happens"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: the list, or with --watch one change per line"},
			&cli.StringFlag{Name: "skills", Usage: "with --watch: keep an Agent Skill per trusted executor in `DIR` as they come and go (awcp-ctl skills sync)"},
		), browseFlags()...),
		Action: func(c *cli.Context) error {
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			b := e.browser(c)
			if c.IsSet("skills") && !c.Bool("watch") {
				return fmt.Errorf("--skills keeps skills in sync while watching: give --watch too, or run awcp-ctl skills sync --dir DIR once")
			}
			if !c.Bool("watch") {
				err := b.Round(ctx)
				if serr := b.Save(); serr != nil {
					e.log.Warn("peer book", "err", serr)
				}
				if err != nil {
					return fmt.Errorf("browse: %w", err)
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, b.Peers())
				}
				printPeers(c.App.Writer, e.agentID, b.Peers())
				return nil
			}
			return watchPeers(ctx, c, e, b)
		},
	}
}

// watchPeers browses until ctx ends, printing each change of a peer's
// state: online, offline (and how), or what it offers.
func watchPeers(ctx context.Context, c *cli.Context, e *env, b *discovery.Browser) error {
	w := c.App.Writer
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	// What the book remembers is not news: a peer online now would show
	// offline first. Print from the first round's answers on.
	for b.Rounds() == 0 {
		changed := b.Changed()
		if b.Rounds() > 0 {
			break
		}
		select {
		case <-changed:
		case err := <-done:
			return err
		}
	}
	var skillsDir string
	if c.IsSet("skills") {
		var err error
		if skillsDir, err = filepath.Abs(c.String("skills")); err != nil {
			return err
		}
	}
	last := map[string]string{}
	for {
		changed := b.Changed()
		peers := b.Peers()
		if skillsDir != "" {
			// Each change is one sync: what did not change is not
			// rewritten, so this costs a read of each skill.
			named, err := e.namedA2A(nil, nil)
			if err != nil {
				return err
			}
			rep, err := skills.Sync(skillsDir, peers, readCards(ctx, named)...)
			if err != nil {
				return err
			}
			printSkills(w, skillsDir, rep, false)
		}
		for _, p := range peers {
			key := peerState(p)
			if last[p.AgentID] == key {
				continue
			}
			last[p.AgentID] = key
			event := "offline"
			if p.Online {
				event = "online"
			}
			if c.Bool("json") {
				line, _ := json.Marshal(struct {
					Event string         `json:"event"`
					At    time.Time      `json:"at"`
					Peer  discovery.Peer `json:"peer"`
				}{event, time.Now(), p})
				fmt.Fprintf(w, "%s\n", line)
			} else {
				fmt.Fprintf(w, "%s %-7s %s\n", time.Now().Format("15:04:05"), event, peerLine(p))
			}
		}
		select {
		case <-changed:
		case err := <-done:
			return err
		}
	}
}

// peerState is what a change of is worth a line.
func peerState(p discovery.Peer) string {
	return fmt.Sprintf("%v|%s|%s|%s", p.Online, p.Gone, p.URL, offers(p))
}

func peerLine(p discovery.Peer) string {
	if !p.Online {
		return fmt.Sprintf("%s (%s) %s", clikit.Printable(p.Name), clikit.Printable(p.AgentID), discovery.OfflineSince(p))
	}
	return fmt.Sprintf("%s (%s) at %s: %s", clikit.Printable(p.Name), clikit.Printable(p.AgentID), clikit.Printable(p.URL), offers(p))
}

// offers says what a peer's manifest offers, in a few words.
func offers(p discovery.Peer) string {
	if p.Manifest == nil || p.Manifest.AWCP == nil {
		if p.ManifestError != "" {
			return "no manifest: " + p.ManifestError
		}
		return "-"
	}
	a := p.Manifest.AWCP
	mount := "no FUSE"
	if a.FUSE {
		mount = "live mount"
	}
	auth := ""
	if a.AuthRequired {
		auth = ", token required"
	}
	return fmt.Sprintf("%s; %s; %s; %d/%d free; ttl ≤ %s%s", strings.Join(a.Transports, ","), mount,
		strings.Join(a.AccessModes, ","), a.FreeSlots, a.MaxConcurrent, control.Seconds(a.MaxTTLSeconds), auth)
}

func printPeers(w io.Writer, self string, peers []discovery.Peer) {
	fmt.Fprintf(w, "this agent: %s\n", self)
	if len(peers) == 0 {
		fmt.Fprintln(w, "no executors found (they advertise with `awcp-fs serve --advertise`, or are published in DNS: docs/discovery.md)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tAGENT ID\tSTATE\tTRUST\tFOUND BY\tURL\tOFFERS")
	var untrusted []discovery.Peer
	for _, p := range peers {
		state := "online"
		if !p.Online {
			state = "offline: " + discovery.OfflineSince(p)
		}
		id := p.AgentID
		if id == self {
			id += " (this agent)"
		}
		trust := "trusted"
		switch {
		case p.Impostor != "":
			trust = "trusted; IMPOSTOR SEEN"
		case p.TrustedKey == "":
			trust = "not trusted"
			untrusted = append(untrusted, p)
		case !p.Trusted():
			trust = "KEY CHANGED"
		}
		via := p.Via
		if via == "" {
			via = "-" // named by its URL (peers trust URL)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clikit.Printable(p.Name), id, state, trust, via, p.URL, offers(p))
	}
	tw.Flush()
	for _, p := range untrusted {
		if k := p.Key(); k != "" && p.AgentID != self {
			fmt.Fprintf(w, "%s shows key %s; if `awcp-fs serve` on it logs that identity: awcp-ctl peers trust %s\n", clikit.Printable(p.Name), control.Fingerprint(k), p.AgentID)
		}
	}
}

// trustCommand is `peers trust ID`: the user's yes to an executor's key.
// selfCommand prints this delegator's identity key: its TLS certificate
// toward executors, which an executor's operator may authorize
// (awcp-fs serve --authorized-delegators).
func selfCommand() *cli.Command {
	return &cli.Command{
		Name:  "self",
		Usage: "print this delegator's identity key and fingerprint: executors may admit it by key (awcp-fs serve --authorized-delegators)",
		Flags: clikit.CommonFlags(),
		Action: func(c *cli.Context) error {
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			pub := control.IdentityPublic(e.identity)
			fmt.Fprintf(c.App.Writer, "%s\nfingerprint %s\nagent id %s\n", pub, control.Fingerprint(pub), e.agentID)
			return nil
		},
	}
}

// untrustCommand is `peers untrust ID`: the user's trust taken back.
func untrustCommand() *cli.Command {
	return &cli.Command{
		Name:      "untrust",
		Usage:     "take back the trust in an executor's key: it is chosen no more, and a delegation naming it is refused",
		ArgsUsage: "NAME|AGENT-ID",
		Flags:     clikit.CommonFlags(),
		Action: func(c *cli.Context) error {
			if c.Args().Len() != 1 {
				return clikit.UsageError("peers untrust takes one executor: a name or an agent id (or its first 8 characters)")
			}
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			p, err := e.browser(c).Untrust(c.Args().First())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "no longer trusted: %s (%s), key %s\n", clikit.Printable(p.Name), p.AgentID, control.Fingerprint(p.TrustedKey))
			return nil
		},
	}
}

func trustCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "trust",
		Usage:     "trust an executor's identity key: only trusted executors are chosen by --peer NAME|ID|auto, and every connection to one is TLS pinned to its key",
		ArgsUsage: "NAME|AGENT-ID|https://HOST:PORT",
		Description: "Names and ids on mDNS are claims anyone on the network can make. Check the key shown\n" +
			"(`awcp-fs id` on the executor prints it; `awcp-fs serve` logs it) before you trust it.\n" +
			"Given a URL, the key the executor shows over TLS is pinned for that URL: --peer URL then\n" +
			"needs no --peer-key.",
		Flags: append(append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "key", Usage: "the key to trust (ssh-ed25519 AAAA…), instead of the one the executor shows now"},
		), browseFlags()...),
		Action: func(c *cli.Context) error {
			if c.Args().Len() != 1 {
				return clikit.UsageError("peers trust takes one executor: a name, an agent id (or its first 8 characters) or https://HOST:PORT")
			}
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			b := e.browser(c)
			if arg := c.Args().First(); isURL(arg) {
				p, err := b.TrustAt(ctx, arg, c.String("key"))
				if err != nil {
					return fail(c, err)
				}
				fmt.Fprintf(c.App.Writer, "trusted %s (%s) at %s: key %s\n", clikit.Printable(p.Name), p.AgentID, p.URL, control.Fingerprint(p.TrustedKey))
				if c.String("key") == "" {
					fmt.Fprintf(c.App.Writer, "first contact: compare that fingerprint with what `awcp-fs id` prints on the executor; if they differ, run `awcp-ctl peers trust %s --key KEY` with the right key\n", p.URL)
				}
				fmt.Fprintf(c.App.Writer, "this delegator is %s: its operator may admit it by key (`awcp-ctl peers self` prints it)\n", control.Fingerprint(control.IdentityPublic(e.identity)))
				return nil
			}
			if c.String("key") == "" {
				if err := b.Round(ctx); err != nil {
					return fmt.Errorf("browse: %w", err)
				}
			}
			p, err := b.Trust(c.Args().First(), c.String("key"))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "trusted %s (%s): key %s\n", clikit.Printable(p.Name), p.AgentID, control.Fingerprint(p.TrustedKey))
			return nil
		},
	}
}
