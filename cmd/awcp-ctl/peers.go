package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/discovery"
)

// browseFlags configure LAN discovery where a command browses.
func browseFlags() []cli.Flag {
	return []cli.Flag{
		clikit.DurationFlag("browse-window", 1500*time.Millisecond, "how long an mDNS query listens for executors' answers", "AWCP_BROWSE_WINDOW"),
		clikit.DurationFlag("browse-interval", 5*time.Second, "between mDNS queries while watching; an executor silent for three is shown offline", "AWCP_BROWSE_INTERVAL"),
	}
}

func (e *env) browser(c *cli.Context) *discovery.Browser {
	return &discovery.Browser{
		Self: e.agentID, Book: filepath.Join(e.state, "peers.json"), Logger: e.log,
		Window: clikit.Duration(c, "browse-window"), Interval: clikit.Duration(c, "browse-interval"),
	}
}

// isURL tells a peer given as a URL from a name, an id or auto.
func isURL(peer string) bool { return strings.Contains(peer, "://") }

// resolvePeer turns req's peer, when it is not a URL, into the URL of an
// executor found on the network, and says which and why.
func (e *env) resolvePeer(ctx context.Context, c *cli.Context, req *delegator.ExportRequest) error {
	if isURL(req.Peer) {
		return nil
	}
	b := e.browser(c)
	if err := b.Round(ctx); err != nil {
		return control.Errorf(control.CodeDeclined, "cannot look for executors on this network: %v", err).
			WithHint("give the executor's URL with --peer http://host:port")
	}
	if err := b.Save(); err != nil {
		e.log.Warn("peer book", "err", err)
	}
	p, why, err := discovery.Resolve(b.Peers(), req.Peer, discovery.Want{
		Transport: req.Transport, Access: req.Access, Self: e.agentID, Exclude: req.CallChain})
	if err != nil {
		return control.Errorf(control.CodeDeclined, "--peer %s: %v", req.Peer, err)
	}
	req.Peer, req.PeerAgentID, req.PeerName, req.PeerChoice = p.URL, p.AgentID, p.Name, why
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
		Usage: "list the executors found on this network (mDNS), online or not",
		Description: "Executors advertise themselves with `awcp-fs serve --advertise`. Those found before and\n" +
			"not answering now are listed offline, with when they were last seen. Linux and macOS\n" +
			"answer alike; the query is IPv4 multicast on the default interface.",
		Flags: append(append(clikit.CommonFlags(),
			&cli.BoolFlag{Name: "watch", Usage: "keep looking, and print each change as it happens"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: the list, or with --watch one change per line"},
		), browseFlags()...),
		Action: func(c *cli.Context) error {
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			b := e.browser(c)
			if !c.Bool("watch") {
				err := b.Round(ctx)
				if serr := b.Save(); serr != nil {
					e.log.Warn("peer book", "err", serr)
				}
				if err != nil {
					return fmt.Errorf("mDNS: %w", err)
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, b.Peers())
				}
				printPeers(c.App.Writer, e.agentID, b.Peers())
				return nil
			}
			return watchPeers(ctx, c, b)
		},
	}
}

// watchPeers browses until ctx ends, printing each change of a peer's
// state: online, offline (and how), or what it offers.
func watchPeers(ctx context.Context, c *cli.Context, b *discovery.Browser) error {
	w := c.App.Writer
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	last := map[string]string{}
	for {
		changed := b.Changed()
		for _, p := range b.Peers() {
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
		return fmt.Sprintf("%s (%s) %s", p.Name, p.AgentID, discovery.OfflineSince(p))
	}
	return fmt.Sprintf("%s (%s) at %s: %s", p.Name, p.AgentID, p.URL, offers(p))
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
		strings.Join(a.AccessModes, ","), a.FreeSlots, a.MaxConcurrent, time.Duration(a.MaxTTLSeconds)*time.Second, auth)
}

func printPeers(w io.Writer, self string, peers []discovery.Peer) {
	fmt.Fprintf(w, "this agent: %s\n", self)
	if len(peers) == 0 {
		fmt.Fprintln(w, "no executors found (they advertise with `awcp-fs serve --advertise`)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tAGENT ID\tSTATE\tURL\tOFFERS")
	for _, p := range peers {
		state := "online"
		if !p.Online {
			state = "offline: " + discovery.OfflineSince(p)
		}
		id := p.AgentID
		if id == self {
			id += " (this agent)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, id, state, p.URL, offers(p))
	}
	tw.Flush()
}
