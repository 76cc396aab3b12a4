package mcpserver

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
)

// Peer is an executor the delegate tool offers, as discovered at start.
type Peer struct {
	// URL is the executor's base URL as configured (--peers).
	URL string
	// Card is its agent card; nil when it could not be fetched.
	Card *control.AgentCard
	// Err says why there is no card: the peer is listed as offline.
	Err error
}

// Name is the card's name, or the URL for a peer without one.
func (p Peer) Name() string {
	if p.Card != nil && p.Card.Name != "" {
		return p.Card.Name
	}
	return p.URL
}

// Discover fetches the agent card of every URL at once (spec §8.3), each
// bounded by timeout. A peer that does not answer is returned with Err set:
// discovery never fails as a whole.
func Discover(ctx context.Context, client *http.Client, urls []string, token string, timeout time.Duration) []Peer {
	peers := make([]Peer, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		peers[i].URL = u
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			pc := &delegator.PeerClient{BaseURL: u, Token: token, HTTP: client}
			peers[i].Card, peers[i].Err = pc.AgentCard(cctx)
		}()
	}
	wg.Wait()
	return peers
}

// describePeers is the part of the delegate tool's description that lets a
// model choose an executor.
func describePeers(peers []Peer) string {
	if len(peers) == 0 {
		return "No executors are configured: pass peer_url (an `awcp-fs serve` URL such as http://host:10200)."
	}
	var b strings.Builder
	b.WriteString("Executors (pass one's URL as peer_url")
	if len(peers) == 1 {
		b.WriteString("; with only this one it is the default")
	}
	b.WriteString("):\n")
	for _, p := range peers {
		if p.Card == nil {
			fmt.Fprintf(&b, "- %s — offline at start (%s)\n", p.URL, oneLine(errText(p.Err)))
			continue
		}
		c := p.Card
		fmt.Fprintf(&b, "- %s — %s", p.URL, oneLine(c.Name))
		if c.Description != "" {
			fmt.Fprintf(&b, ": %s", oneLine(c.Description))
		}
		b.WriteString("\n")
		for _, s := range c.Skills {
			name := s.Name
			if name == "" {
				name = s.ID
			}
			if s.Description != "" {
				fmt.Fprintf(&b, "  skill %s: %s\n", oneLine(name), oneLine(s.Description))
			} else {
				fmt.Fprintf(&b, "  skill %s\n", oneLine(name))
			}
		}
		ext, ok := c.AWCP()
		if !ok {
			b.WriteString("  AWCP: not declared in its agent card\n")
			continue
		}
		fmt.Fprintf(&b, "  AWCP: yes")
		for _, k := range []string{"transports", "accessModes", "maxTtlSeconds", "maxConcurrent", "authRequired"} {
			if v, ok := ext.Params[k]; ok {
				fmt.Fprintf(&b, "; %s %v", k, v)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func errText(err error) string {
	if err == nil {
		return "no answer"
	}
	return err.Error()
}

// oneLine keeps a peer's self-description from reshaping the list: text
// from the network is folded to one line and cut at 300 characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 300 {
		s = string(r[:300]) + "…"
	}
	return s
}

// pickPeer resolves the peer_url argument: a URL, the name of a discovered
// peer, or empty for the only configured one.
func pickPeer(arg string, peers []Peer) (string, error) {
	if arg != "" {
		for _, p := range peers {
			if p.Card != nil && p.Card.Name == arg {
				return p.URL, nil
			}
		}
		if !strings.Contains(arg, "://") {
			return "", control.Errorf(control.CodeDeclined, "peer_url %q is neither a URL nor the name of a listed executor", arg).
				WithHint("pass an executor URL such as http://host:10200")
		}
		return arg, nil
	}
	switch len(peers) {
	case 0:
		return "", control.Errorf(control.CodeDeclined, "no executor given and none configured").
			WithHint("pass peer_url, the URL of an `awcp-fs serve` (e.g. http://host:10200)")
	case 1:
		return peers[0].URL, nil
	}
	urls := make([]string, len(peers))
	for i, p := range peers {
		urls[i] = p.URL
	}
	return "", control.Errorf(control.CodeDeclined, "several executors are configured and peer_url was not given").
		WithHint("choose one of " + strings.Join(urls, ", "))
}
