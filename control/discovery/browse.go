package discovery

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/mdns"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/untrusted"
)

// Peer is an executor found on the network, online or not.
type Peer struct {
	AgentID string `json:"agentId"`
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	// URL is where it answers: https://address:port of its advertisement.
	URL       string    `json:"url"`
	Online    bool      `json:"online"`
	FirstSeen time.Time `json:"firstSeen"`
	LastSeen  time.Time `json:"lastSeen"`
	// Gone says why an offline peer is: GoneWithdrawn or GoneSilent.
	Gone     string            `json:"gone,omitempty"`
	Manifest *control.Manifest `json:"manifest,omitempty"`
	// ManifestError is why its manifest could not be read, if it could not.
	ManifestError string `json:"manifestError,omitempty"`
	// TrustedKey is the identity key the user trusts for this agent id
	// (`awcp-ctl peers trust`): only a peer whose manifest shows it is
	// ever chosen, and it proves it holds it before any token goes.
	TrustedKey string `json:"trustedKey,omitempty"`
	// Impostor says an answer claimed this agent id with another key, and
	// was ignored.
	Impostor string `json:"impostor,omitempty"`
	// Via is how it was last found: ViaMDNS, or ViaDNS(domain).
	Via string `json:"via,omitempty"`
}

// Key is the identity key p's manifest shows; "" if none.
func (p Peer) Key() string {
	if p.Manifest == nil || p.Manifest.AWCP == nil {
		return ""
	}
	return p.Manifest.AWCP.IdentityKey
}

// Trusted reports whether p shows the key the user trusts for it.
func (p Peer) Trusted() bool { return p.TrustedKey != "" && p.Key() == p.TrustedKey }

// Why a peer is offline.
const (
	GoneWithdrawn = "withdrawn" // it said goodbye: a graceful stop
	GoneSilent    = "silent"    // it stopped answering: a crash, or the network
)

// The bounds on what the network can make a browser hold.
const (
	MaxPeers         = 256
	maxManifestBytes = 64 << 10
	maxTXTValue      = 256
	recordTTL        = 120 * time.Second // the mDNS library's TTL
)

// Browser finds executors: it queries every Interval, listens for
// goodbyes, and fetches the manifest of each peer that answers. Set the
// fields, then Run.
type Browser struct {
	// Interval between queries; Window how long each listens for answers.
	// Defaults 5s and 1s. A peer that has not answered for three rounds
	// (never more than the records' TTL of 120s) is offline.
	Interval, Window time.Duration
	// Self is this agent's id; an executor of its own state dir is listed
	// (Resolve never chooses it).
	Self string
	// Book, if set, is the file peers are kept in between runs.
	Book string
	// Iface, if set, is the interface to query on.
	Iface  *net.Interface
	Logger *slog.Logger
	// HTTP fetches manifests. Default: a client with a 3s timeout.
	HTTP *http.Client
	// Domains are browsed by DNS-SD over unicast DNS (dnssd.go) beside
	// mDNS, at DNSServer (host:port; default /etc/resolv.conf's first).
	Domains   []string
	DNSServer string
	// NoMDNS browses Domains alone, without multicast.
	NoMDNS bool

	dns dnsCache

	mu      sync.Mutex // guards the fields below
	peers   map[string]*Peer
	rounds  int
	changed chan struct{} // closed and replaced after every round and change
	dirty   bool          // a peer came, went or moved since the book was saved
	saved   time.Time     // when the book was last written
	// book is the book file as this browser last read or wrote it: one
	// changed since was written by another process (a trust given or
	// taken back), whose trust the next round takes up.
	book os.FileInfo
}

func (b *Browser) init() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peers != nil {
		return
	}
	if b.Interval <= 0 {
		b.Interval = 5 * time.Second
	}
	if b.Window <= 0 {
		b.Window = time.Second
	}
	if b.Logger == nil {
		b.Logger = slog.Default()
	}
	if b.HTTP == nil {
		b.HTTP = ManifestClient(3 * time.Second)
	}
	b.peers = map[string]*Peer{}
	b.changed = make(chan struct{})
	if b.Book != "" {
		b.book, _ = os.Stat(b.Book)
		known, err := readBook(b.Book)
		if err != nil {
			b.Logger.Warn("peer book unreadable; starting a new one", "book", b.Book, "err", err)
		}
		for _, p := range known {
			if len(b.peers) < MaxPeers {
				p.Online = false
				b.peers[p.AgentID] = p
			}
		}
	}
}

// Peers returns every peer known, online first, then by name.
func (b *Browser) Peers() []Peer {
	b.init()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Peer, 0, len(b.peers))
	for _, p := range b.peers {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(x, y Peer) int {
		if x.Online != y.Online {
			if x.Online {
				return -1
			}
			return 1
		}
		return strings.Compare(strings.ToLower(x.Name)+x.AgentID, strings.ToLower(y.Name)+y.AgentID)
	})
	return out
}

// Changed returns a channel closed at the next change of Peers.
func (b *Browser) Changed() <-chan struct{} {
	b.init()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// Rounds is how many query rounds have completed.
func (b *Browser) Rounds() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rounds
}

// Run browses until ctx ends, saving the book when a peer came, went or
// moved, at least once a minute while any answers, and at the end.
func (b *Browser) Run(ctx context.Context) error {
	b.init()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	if b.NoMDNS {
		// DNS alone: no goodbyes to hear.
	} else if ln, err := listenGoodbyes(b.Iface); err != nil {
		b.Logger.Warn("mDNS: cannot listen for goodbyes; a stopped peer shows offline only once it is silent", "err", err)
	} else {
		wg.Add(1)
		go func() { defer wg.Done(); b.goodbyes(ctx, ln) }()
	}
	for {
		if err := b.Round(ctx); err != nil && ctx.Err() == nil {
			b.Logger.Warn("browse", "err", err)
		}
		if err := b.saveIfDue(); err != nil {
			b.Logger.Warn("peer book", "err", err)
		}
		select {
		case <-ctx.Done():
			return b.save()
		case <-time.After(b.Interval):
		}
	}
}

// Round queries once, fetches the manifests of the peers that answered,
// and marks offline those silent too long.
func (b *Browser) Round(ctx context.Context) error {
	b.init()
	b.rereadTrust()
	var seen []*Peer
	var qerr error
	if !b.NoMDNS {
		seen, qerr = b.queryMDNS(ctx)
		if qerr != nil && len(b.Domains) > 0 {
			b.Logger.Debug("mDNS query failed; browsing DNS", "err", qerr)
			qerr = nil // DNS may find them: the domains were asked for
		}
	}
	for _, domain := range b.Domains {
		ps, err := b.browseDNS(ctx, domain)
		seen = append(seen, ps...)
		qerr = errors.Join(qerr, err)
	}
	seen = append(seen, b.trustedByURL(seen)...)
	now := time.Now()
	var wg sync.WaitGroup
	for _, p := range seen {
		wg.Add(1)
		go func() { defer wg.Done(); b.fetchManifest(ctx, p) }()
	}
	wg.Wait()

	silentAfter := min(3*(b.Interval+b.Window), recordTTL)
	b.mu.Lock()
	for _, p := range seen {
		if p.Via != ViaMDNS && p.Manifest == nil {
			// Listed in DNS, or trusted by its URL, which say nothing
			// of whether it runs: an executor is online when it answers.
			b.unreachable(p)
			continue
		}
		b.merge(p, now)
	}
	for _, p := range b.peers {
		if p.Online && now.Sub(p.LastSeen) > silentAfter {
			p.Online, p.Gone = false, GoneSilent
			b.dirty = true
		}
	}
	b.rounds++
	b.notifyLocked()
	b.mu.Unlock()
	return qerr
}

// trustedByURL are the executors trusted by their URL (`awcp-ctl peers
// trust URL`: found by nothing) that seen does not hold: each round asks
// them where they are, as it asks those DNS lists, so that one that
// answers is online — the same notion of online as doctor's and
// export's, which reach it there.
func (b *Browser) trustedByURL(seen []*Peer) []*Peer {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*Peer
	for _, p := range b.peers {
		if p.Via != "" || p.URL == "" || p.TrustedKey == "" ||
			slices.ContainsFunc(seen, func(s *Peer) bool { return s.AgentID == p.AgentID }) {
			continue
		}
		out = append(out, &Peer{AgentID: p.AgentID, Name: p.Name, URL: p.URL})
	}
	return out
}

// queryMDNS asks the link once and returns the executors that answered.
func (b *Browser) queryMDNS(ctx context.Context) ([]*Peer, error) {
	entries := make(chan *mdns.ServiceEntry, MaxPeers)
	qerr := mdns.QueryContext(ctx, &mdns.QueryParam{
		Service: ServiceAWCP, Domain: "local", Timeout: b.Window, Interface: b.Iface,
		Entries: entries, DisableIPv6: true, Logger: mdnsLogger(b.Logger),
	})
	close(entries)
	if qerr != nil && strings.Contains(qerr.Error(), "failed to bind") {
		qerr = fmt.Errorf("%w: no network interface here takes IPv4 multicast (discovery needs one: a default route, or `ip route add 224.0.0.0/4 dev IFACE`); or name the executor by its URL, --peer https://HOST:10200, or browse DNS with --dns DOMAIN", qerr)
	}
	nets, err := hostNets()
	if err != nil {
		return nil, errors.Join(qerr, err)
	}
	var seen []*Peer
	for e := range entries {
		if p, ok := fromEntry(e, nets); ok {
			seen = append(seen, p)
		} else {
			b.Logger.Debug("mDNS: ignored an answer", "instance", e.Name, "address", e.AddrV4)
		}
	}
	return seen, qerr
}

// fromEntry reads an answer; ok is false for one that is not a usable
// AWCP executor, or whose address is on none of nets. The address is the
// answer's A record, which its sender writes as it likes: taken from
// anywhere, it would have this host send manifest requests, and INVITEs
// with their token, wherever an advertisement says (a cloud's metadata
// address, say). An executor that answers multicast on a link is on it.
func fromEntry(e *mdns.ServiceEntry, nets []*net.IPNet) (*Peer, bool) {
	txt := map[string]string{}
	for _, f := range e.InfoFields {
		k, v, _ := strings.Cut(f, "=")
		if len(v) <= maxTXTValue {
			txt[k] = v
		}
	}
	id := txt[txtAgentID]
	if control.CheckCallChain([]string{id}) != nil || e.AddrV4 == nil || e.Port <= 0 || e.AddrV4.IsLoopback() ||
		!slices.ContainsFunc(nets, func(n *net.IPNet) bool { return n.Contains(e.AddrV4) }) {
		return nil, false
	}
	name := printable(txt[txtName])
	if name == "" {
		name = id
	}
	hostPort := net.JoinHostPort(e.AddrV4.String(), strconv.Itoa(e.Port))
	return &Peer{AgentID: id, Name: name, Version: printable(txt[txtVersion]), URL: baseFrom(txt[txtManifestURL], hostPort), Via: ViaMDNS}, true
}

// hostNets are the networks this host's interfaces are on.
func hostNets() ([]*net.IPNet, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("interface addresses: %w", err)
	}
	var nets []*net.IPNet
	for _, a := range addrs {
		// Loopback is no network an executor answers from: an answer
		// naming 127.0.0.1 would aim this host's requests at itself.
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			nets = append(nets, n)
		}
	}
	return nets, nil
}

// baseFrom is the peer's base URL: TLS at the address the answer came
// with, whatever the advertised manifest URL says — one elsewhere would
// have this browser fetch from wherever an advertisement says, and one in
// plain HTTP would let the path read and change what it fetches.
func baseFrom(manifestURL, hostPort string) string {
	return "https://" + hostPort
}

func printable(s string) string { return untrusted.Line(s, maxPeerName) }

// maxPeerName bounds a name an executor gives itself.
const maxPeerName = 128

func (b *Browser) fetchManifest(ctx context.Context, p *Peer) {
	m, tlsKey, err := fetchManifest(ctx, b.HTTP, p.URL)
	if err != nil {
		p.ManifestError = err.Error()
		return
	}
	if p.AgentID == "" {
		// Found by an SRV record alone (a Kubernetes Service): the
		// manifest names it, read from the address DNS gave.
		if m.AgentID == "" || control.CheckCallChain([]string{m.AgentID}) != nil {
			p.ManifestError = "its manifest names no agent id"
			return
		}
		p.AgentID = m.AgentID
		if m.Name != "" {
			p.Name = printable(m.Name) // not the SRV target's pod name
		}
	}
	// The key is the connection's: the manifest read over TLS must name
	// the key its certificate holds, so what the book records of a peer
	// is what answered at that address, not what it relayed.
	if m.AWCP != nil && m.AWCP.IdentityKey != "" && m.AWCP.IdentityKey != tlsKey {
		p.ManifestError = fmt.Sprintf("its manifest shows key %s, but its TLS certificate holds %s", control.Fingerprint(m.AWCP.IdentityKey), control.Fingerprint(tlsKey))
		return
	}
	if m.AgentID != "" && m.AgentID != p.AgentID {
		p.ManifestError = fmt.Sprintf("its manifest names agent %s, not %s", m.AgentID, p.AgentID)
		return
	}
	p.Manifest = m
}

// FetchManifest reads GET base/manifest, bounded in size.
func FetchManifest(ctx context.Context, client *http.Client, base string) (*control.Manifest, error) {
	m, _, err := fetchManifest(ctx, client, base)
	return m, err
}

// fetchManifest is FetchManifest, with the identity key of the TLS
// certificate it was read under ("" over plain HTTP).
func fetchManifest(ctx context.Context, client *http.Client, base string) (*control.Manifest, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/manifest", nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("manifest: %w", err)
	}
	defer resp.Body.Close()
	tlsKey := ""
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		tlsKey = control.CertificateKey([][]byte{resp.TLS.PeerCertificates[0].Raw})
	}
	m, err := readManifest(resp)
	return m, tlsKey, err
}

func readManifest(resp *http.Response) (*control.Manifest, error) {
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("manifest: HTTP %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if len(body) > maxManifestBytes {
		return nil, fmt.Errorf("manifest: larger than %d bytes", maxManifestBytes)
	}
	var m control.Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return &m, nil
}

// ManifestClient reads manifests over TLS whatever key the executor
// shows: a manifest is public, and the key is taken from the connection
// (fetchManifest), then compared with what the user trusts.
func ManifestClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	tr.ForceAttemptHTTP2 = false
	return &http.Client{Timeout: timeout, Transport: tr, CheckRedirect: control.SameServerRedirects}
}

// merge records p, seen at now. Called with b.mu held.
//
// What an answer may do is bounded, as answers are claims: a new agent is
// recorded only once its manifest was read from the address it answered
// with and names it, at most maxAgentsPerHost per address; an agent the
// user trusts keeps its place and its address against an answer with
// another key; and a full book makes room by forgetting the untrusted
// agent heard from longest ago, never a trusted one.
func (b *Browser) merge(p *Peer, now time.Time) {
	cur, ok := b.peers[p.AgentID]
	if ok && cur.TrustedKey != "" && p.Manifest == nil && p.URL == cur.URL {
		// Its manifest could not be read this round, at its known
		// address: seen, nothing more.
		cur.Online, cur.Gone, cur.LastSeen, cur.ManifestError = true, "", now, p.ManifestError
		return
	}
	if ok && cur.TrustedKey != "" && p.Key() != cur.TrustedKey {
		cur.Impostor = fmt.Sprintf("%s answered as this agent with key %s, not the one trusted (%s): ignored",
			p.URL, control.Fingerprint(p.Key()), control.Fingerprint(cur.TrustedKey))
		b.Logger.Warn("discovery: an answer claims a trusted agent's id with another key; ignored", "agent", p.AgentID, "url", p.URL, "via", p.Via)
		return
	}
	if !ok {
		if p.Manifest == nil {
			return // not recorded until its manifest names it
		}
		if b.agentsAt(p.URL) >= maxAgentsPerHost {
			b.Logger.Debug("mDNS: more agents at one address than a browser keeps; ignoring", "agent", p.AgentID, "url", p.URL)
			return
		}
		if len(b.peers) >= MaxPeers && !b.evictUntrusted() {
			b.Logger.Warn("mDNS: more trusted peers than a browser keeps; ignoring", "agent", p.AgentID, "max", MaxPeers)
			return
		}
		cur = &Peer{AgentID: p.AgentID, FirstSeen: now}
		b.peers[p.AgentID] = cur
	}
	if !cur.Online || cur.Name != p.Name || cur.URL != p.URL || cur.Via != p.Via {
		b.dirty = true
	}
	cur.Name, cur.Version, cur.URL, cur.Via = p.Name, p.Version, p.URL, p.Via
	cur.Online, cur.Gone, cur.LastSeen = true, "", now
	// A manifest that could not be read this round leaves the last one.
	if cur.ManifestError = p.ManifestError; p.Manifest != nil {
		cur.Manifest = p.Manifest
	}
}

// unreachable records that p, listed in DNS, did not answer: a peer
// known at its address goes offline now. Called with b.mu held.
func (b *Browser) unreachable(p *Peer) {
	for _, cur := range b.peers {
		if cur.URL == p.URL && (p.AgentID == "" || cur.AgentID == p.AgentID) && (cur.Online || cur.Gone != GoneUnreachable) {
			cur.Online, cur.Gone, cur.ManifestError = false, GoneUnreachable, p.ManifestError
			b.dirty = true
		}
	}
}

func (b *Browser) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Lookup resolves arg (Resolve) among the peers found, after the first
// round of a browser that Run is running; it waits for that round at most
// as long as ctx.
func (b *Browser) Lookup(ctx context.Context, arg string, want Want) (Peer, string, error) {
	for b.Rounds() == 0 {
		changed := b.Changed()
		if b.Rounds() > 0 {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Peer{}, "", fmt.Errorf("no answer from the network yet: %w", ctx.Err())
		}
	}
	return Resolve(b.Peers(), arg, want)
}

// maxAgentsPerHost is how many agents one address may have recorded: one
// host answering for hundreds of forged agents fills nothing.
const maxAgentsPerHost = 4

// agentsAt counts the peers recorded at base URL u's host. b.mu is held.
func (b *Browser) agentsAt(u string) int {
	host := hostOf(u)
	n := 0
	for _, p := range b.peers {
		if hostOf(p.URL) == host {
			n++
		}
	}
	return n
}

func hostOf(u string) string {
	if pu, err := url.Parse(u); err == nil {
		return pu.Hostname()
	}
	return u
}

// evictUntrusted forgets the untrusted peer heard from longest ago, an
// offline one first; false if every peer is trusted. b.mu is held.
func (b *Browser) evictUntrusted() bool {
	var victim *Peer
	for _, p := range b.peers {
		if p.TrustedKey != "" {
			continue
		}
		if victim == nil || (victim.Online && !p.Online) || (victim.Online == p.Online && p.LastSeen.Before(victim.LastSeen)) {
			victim = p
		}
	}
	if victim == nil {
		return false
	}
	delete(b.peers, victim.AgentID)
	b.dirty = true
	return true
}

// idFor is the agent id arg names among the peers known, as --peer takes
// it: the id, a unique prefix of it (eight characters at least), or the
// name of exactly one peer. An arg that names none is taken as an id (a
// peer trusted before it is seen, with --key). b.mu is held.
func (b *Browser) idFor(arg string) (string, error) {
	if _, ok := b.peers[arg]; ok {
		return arg, nil
	}
	var byID, byName []string
	for id, p := range b.peers {
		switch {
		case len(arg) >= 8 && strings.HasPrefix(id, arg):
			byID = append(byID, id)
		case strings.EqualFold(p.Name, arg):
			byName = append(byName, id)
		}
	}
	for _, ids := range [][]string{byID, byName} {
		switch len(ids) {
		case 0:
			continue
		case 1:
			return ids[0], nil
		default:
			slices.Sort(ids)
			return "", fmt.Errorf("%q names several executors (%s): give its agent id", arg, strings.Join(ids, ", "))
		}
	}
	return arg, nil
}

// Trust pins key as agent id's identity in the book (`awcp-ctl peers
// trust`); key "" is the key its manifest shows now. It returns the peer.
func (b *Browser) Trust(id, key string) (Peer, error) {
	b.init()
	b.mu.Lock()
	id, err := b.idFor(id)
	if err != nil {
		b.mu.Unlock()
		return Peer{}, err
	}
	p, ok := b.peers[id]
	if !ok {
		if key == "" {
			b.mu.Unlock()
			return Peer{}, fmt.Errorf("no executor with agent id %s has been found on this network; give its key with --key to trust it before it is seen", id)
		}
		if len(b.peers) >= MaxPeers && !b.evictUntrusted() {
			b.mu.Unlock()
			return Peer{}, fmt.Errorf("the book holds %d trusted peers already", MaxPeers)
		}
		p = &Peer{AgentID: id, Name: id}
		b.peers[id] = p
	}
	if key == "" {
		key = p.Key()
	}
	if key == "" {
		b.mu.Unlock()
		return Peer{}, fmt.Errorf("executor %s (%s) shows no identity key (an older awcp-fs): give its URL with --peer instead", p.Name, id)
	}
	if _, err := control.ParseIdentityKey(key); err != nil {
		b.mu.Unlock()
		return Peer{}, err
	}
	p.TrustedKey, p.Impostor = key, ""
	b.dirty = true
	out := *p
	b.mu.Unlock()
	return out, b.save()
}

// Untrust takes back the trust in agent id's key (`awcp-ctl peers
// untrust`): it is never chosen again, and a connection to it is refused,
// until the user trusts a key again. It returns the peer as it was.
func (b *Browser) Untrust(id string) (Peer, error) {
	b.init()
	b.mu.Lock()
	id, err := b.idFor(id)
	if err != nil {
		b.mu.Unlock()
		return Peer{}, err
	}
	p, ok := b.peers[id]
	if !ok || p.TrustedKey == "" {
		b.mu.Unlock()
		return Peer{}, fmt.Errorf("executor %s is not trusted", id)
	}
	out := *p
	p.TrustedKey = ""
	b.dirty = true
	b.notifyLocked()
	b.mu.Unlock()
	return out, b.save()
}

// TrustAt pins the identity key of the executor at base, a URL the user
// gave (`awcp-ctl peers trust https://HOST:PORT`): its manifest is read
// over TLS and the key taken from the connection. Where key is given it
// must be the one the executor shows; else the one shown is pinned, and
// the caller shows its fingerprint for the user to compare. The peer is
// recorded in the book at base.
func (b *Browser) TrustAt(ctx context.Context, base, key string) (Peer, error) {
	b.init()
	if !strings.HasPrefix(base, "https://") {
		return Peer{}, control.Errorf(control.CodeUsage, "%s: a key is pinned for a TLS peer", base).
			WithHint("give the executor's https://HOST:PORT")
	}
	base = strings.TrimSuffix(base, "/")
	m, tlsKey, err := fetchManifest(ctx, b.HTTP, base)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			return Peer{}, control.Errorf(control.CodeSetupFailed, "cannot reach the executor at %s: %v", base, untrusted.Clip(oe.Error(), 300)).
				WithHint("check the URL, and that `awcp-fs serve` runs there (`awcp-ctl doctor --peer " + base + "` checks both ways); nothing was pinned")
		}
		return Peer{}, control.Errorf(control.CodeSetupFailed, "%s did not answer as an awcp executor: %v", base, untrusted.Clip(err.Error(), 300)).
			WithHint("is it the URL of an `awcp-fs serve`? nothing was pinned")
	}
	if tlsKey == "" {
		return Peer{}, fmt.Errorf("%s showed no identity key", base)
	}
	if key != "" {
		pub, err := control.ParseIdentityKey(key)
		if err != nil {
			return Peer{}, err
		}
		if control.IdentityKeyText(pub) != tlsKey {
			return Peer{}, control.Errorf(control.CodeUsage, "the executor at %s shows key %s, not the one given (%s): nothing was pinned", base, control.Fingerprint(tlsKey), control.Fingerprint(key)).
				WithHint("compare with what `awcp-fs id` prints on the executor")
		}
	}
	if m.AgentID == "" || !uuidForm.MatchString(m.AgentID) {
		return Peer{}, fmt.Errorf("the executor at %s names no agent id", base)
	}
	b.mu.Lock()
	p, ok := b.peers[m.AgentID]
	if !ok {
		if len(b.peers) >= MaxPeers && !b.evictUntrusted() {
			b.mu.Unlock()
			return Peer{}, fmt.Errorf("the book holds %d trusted peers already", MaxPeers)
		}
		p = &Peer{AgentID: m.AgentID, FirstSeen: time.Now()}
		b.peers[m.AgentID] = p
	}
	p.Name, p.URL, p.Manifest, p.TrustedKey, p.Impostor = printable(m.Name), base, m, tlsKey, ""
	if p.Name == "" {
		p.Name = m.AgentID
	}
	b.dirty = true
	out := *p
	b.mu.Unlock()
	return out, b.save()
}

// KeyAt is the agent id and the trusted key of the peer the book has at
// base (a URL), if the user trusts one there.
func (b *Browser) KeyAt(base string) (agentID, key string) {
	b.init()
	base = strings.TrimSuffix(base, "/")
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.peers {
		if p.TrustedKey != "" && p.URL == base {
			return p.AgentID, p.TrustedKey
		}
	}
	return "", ""
}
