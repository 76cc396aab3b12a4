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
	"github.com/awcp/awcp/control/discovery"
	"github.com/awcp/awcp/lease"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Peer is an executor the delegate tool offers, as discovered at start.
type Peer struct {
	// URL is the executor's base URL as configured (--peers).
	URL string
	// AgentID and Key are the identity trusted at URL (`awcp-ctl peers
	// trust URL`), if any: it is reached over TLS pinned to Key.
	AgentID, Key string
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
// discovery never fails as a whole. plain allows http:// URLs (plain
// HTTP, the token in clear); without it they are refused.
func Discover(ctx context.Context, client *http.Client, urls []string, token string, plain bool, keyFor KeyFor, timeout time.Duration) []Peer {
	peers := make([]Peer, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		peers[i].URL = u
		if keyFor != nil {
			peers[i].AgentID, peers[i].Key = keyFor(u)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			pc := &delegator.PeerClient{BaseURL: u, Token: token, HTTP: client, PlainHTTP: plain, AgentID: peers[i].AgentID, Key: peers[i].Key}
			peers[i].Card, peers[i].Err = pc.AgentCard(cctx)
		}()
	}
	wg.Wait()
	return peers
}

// describePeers is the part of the delegate tool's description that lets a
// model choose an executor.
func describePeers(peers []Peer, discovering bool) string {
	if len(peers) == 0 && discovering {
		return "No executors are configured; executors on the local network are found by discovery: the peers tool " +
			"lists them. Pass one's name or agent id as peer_url, or leave it out (auto: one that can take the " +
			"delegation now, preferring a live mount)."
	}
	if len(peers) == 0 {
		return "No executors are configured: pass peer_url (an `awcp-fs serve` URL such as https://host:10200)."
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
			if s.ID == control.CapabilityDelegation {
				continue // the A2A face's own skill: how an A2A client sends a ZIP, not how delegate lends
			}
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
		for _, k := range []string{"transports", "accessModes", "sessions", "maxTtlSeconds", "maxConcurrent", "authRequired"} {
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

// PeerFinder is LAN discovery as the tools use it (discovery.Browser).
type PeerFinder interface {
	// Peers are those found, online or not.
	Peers() []discovery.Peer
	// Lookup resolves a name, an agent id or discovery.Auto.
	Lookup(ctx context.Context, arg string, want discovery.Want) (discovery.Peer, string, error)
}

// KeyFor is the agent id and identity key the user trusts at a URL, if
// any (discovery.Browser.KeyAt).
type KeyFor func(url string) (agentID, key string)

// chosenPeer is the executor a delegation goes to, and how it was chosen
// when discovery chose it.
type chosenPeer struct {
	URL, AgentID, Name, Key, why string
	// fallbacks are invited in turn when it declines for want of a slot
	// (auto and dns:DOMAIN).
	fallbacks []lease.PeerRef
}

// pickPeer resolves the peer_url argument: a URL, the name of a configured
// peer, else (with discovery) a discovered executor's name or id, or auto;
// empty is the only configured peer, or auto when discovering with none.
func (s *server) pickPeer(ctx context.Context, arg, access string) (chosenPeer, error) {
	peers := s.opts.Peers
	if arg != "" {
		for _, p := range peers {
			if p.Card != nil && p.Card.Name == arg {
				return chosenPeer{URL: p.URL, AgentID: p.AgentID, Key: p.Key}, nil
			}
		}
		if strings.Contains(arg, "://") {
			c := chosenPeer{URL: arg}
			if s.opts.KeyFor != nil {
				c.AgentID, c.Key = s.opts.KeyFor(arg)
			}
			return c, nil
		}
		if s.opts.Finder == nil {
			return chosenPeer{}, control.Errorf(control.CodeUsage, "peer_url %q is neither a URL nor the name of a listed executor", arg).
				WithHint("pass an executor URL such as https://host:10200")
		}
		return s.discover(ctx, arg, access)
	}
	switch {
	case len(peers) == 1:
		return chosenPeer{URL: peers[0].URL, AgentID: peers[0].AgentID, Key: peers[0].Key}, nil
	case len(peers) == 0 && s.opts.Finder != nil:
		return s.discover(ctx, discovery.Auto, access)
	case len(peers) == 0:
		return chosenPeer{}, control.Errorf(control.CodeUsage, "no executor given and none configured").
			WithHint("pass peer_url, the URL of an `awcp-fs serve` (e.g. https://host:10200)")
	}
	urls := make([]string, len(peers))
	for i, p := range peers {
		urls[i] = p.URL
	}
	return chosenPeer{}, control.Errorf(control.CodeUsage, "several executors are configured and peer_url was not given").
		WithHint("choose one of " + strings.Join(urls, ", "))
}

func (s *server) discover(ctx context.Context, arg, access string) (chosenPeer, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	want := discovery.Want{Transport: s.opts.Transport, Access: access, Self: s.opts.Self, Exclude: s.opts.CallChain}
	p, why, err := s.opts.Finder.Lookup(lctx, arg, want)
	if err != nil {
		return chosenPeer{}, control.Errorf(control.CodeUsage, "peer_url %s: %v", arg, err).
			WithHint("the peers tool lists the executors found")
	}
	c := chosenPeer{URL: p.URL, AgentID: p.AgentID, Name: p.Name, Key: p.TrustedKey, why: why}
	for _, q := range discovery.Fallbacks(s.opts.Finder.Peers(), arg, want, p.AgentID) {
		c.fallbacks = append(c.fallbacks, lease.PeerRef{URL: q.URL, AgentID: q.AgentID, Name: q.Name, Key: q.TrustedKey})
	}
	return c, nil
}

type peersArgs struct{}

// PeersResult is the peers tool's result.
type PeersResult struct {
	Peers []PeerView `json:"peers"`
	Error *Failure   `json:"error,omitempty"`
}

// PeerView is one executor as the peers tool shows it.
type PeerView struct {
	Name    string `json:"name"`
	AgentID string `json:"agent_id,omitempty"`
	URL     string `json:"url"`
	Source  string `json:"source" jsonschema:"configured (--peers) or discovered (mDNS or DNS)"`
	FoundBy string `json:"found_by,omitempty" jsonschema:"how a discovered executor was found: mdns, or dns:DOMAIN"`
	Online  bool   `json:"online"`
	// Offline says how and since when, for a peer that is not online.
	Offline     string   `json:"offline,omitempty"`
	LastSeen    string   `json:"last_seen,omitempty"`
	Transports  []string `json:"transports,omitempty"`
	LiveMount   bool     `json:"live_mount,omitempty"`
	FreeSlots   *int     `json:"free_slots,omitempty"`
	Description string   `json:"description,omitempty"`
}

func (r PeersResult) failed() bool                 { return r.Error != nil }
func (PeersResult) refused(f *Failure) PeersResult { return PeersResult{Error: f} }

func (r PeersResult) text() string {
	if r.Error != nil {
		return strings.TrimRight(r.Error.text(), "\n")
	}
	if len(r.Peers) == 0 {
		return "no executors configured or found"
	}
	var b strings.Builder
	for _, p := range r.Peers {
		state := "online"
		if !p.Online {
			state = "offline (" + p.Offline + ")"
		}
		fmt.Fprintf(&b, "%s  %s  %s  %s", p.Name, p.URL, state, p.Source)
		if p.AgentID != "" {
			fmt.Fprintf(&b, "  agent %s", p.AgentID)
		}
		if len(p.Transports) > 0 {
			fmt.Fprintf(&b, "  transports %s", strings.Join(p.Transports, ","))
		}
		if p.FreeSlots != nil {
			fmt.Fprintf(&b, "  %d free", *p.FreeSlots)
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func (s *server) peers(_ context.Context, _ *mcp.CallToolRequest, _ peersArgs) (PeersResult, error) {
	res := PeersResult{Peers: []PeerView{}}
	for _, p := range s.opts.Peers {
		v := PeerView{Name: oneLine(p.Name()), URL: p.URL, Source: "configured", Online: p.Card != nil}
		if p.Card == nil {
			v.Offline = "at start: " + oneLine(errText(p.Err))
		} else {
			v.Description = oneLine(p.Card.Description)
		}
		res.Peers = append(res.Peers, v)
	}
	if s.opts.Finder == nil {
		return res, nil
	}
	for _, p := range s.opts.Finder.Peers() {
		v := PeerView{Name: oneLine(p.Name), AgentID: p.AgentID, URL: p.URL, Source: "discovered", FoundBy: p.Via, Online: p.Online,
			LastSeen: control.Timestamp(p.LastSeen)}
		if !p.Online {
			v.Offline = discovery.OfflineSince(p)
		}
		if m := p.Manifest; m != nil {
			v.Description = oneLine(m.Description)
			if a := m.AWCP; a != nil {
				free := a.FreeSlots
				v.Transports, v.LiveMount, v.FreeSlots = a.Transports, a.FUSE, &free
			}
		}
		res.Peers = append(res.Peers, v)
	}
	return res, nil
}
