package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/awcp/awcp/control"
)

// DNS-SD over unicast DNS (RFC 6763): the records mDNS answers with —
// PTR _awcp._tcp.DOMAIN → instance, SRV and TXT of the instance, A of
// its target — served by any DNS server, so that executors past the LAN
// are found. Kubernetes serves no PTR or TXT: for a headless Service's
// port named awcp it serves SRV _awcp._tcp.SERVICE.NS.svc.ZONE, one per
// ready pod; where no PTR answers, that SRV is read instead, and the
// agent id comes from the manifest alone.
//
// What DNS says is a claim as an mDNS answer is: the identity is proved
// exactly as for mDNS (the manifest's key is the TLS certificate's, and
// only a key the user trusts is ever chosen). The addresses it names are
// bounded too: never loopback, link-local (a cloud's metadata service),
// multicast or unspecified.

// ViaMDNS is how a peer answering multicast DNS was found; a peer found
// under a DNS domain is "dns:DOMAIN".
const ViaMDNS = "mdns"

// ViaDNS is the Via of peers found under domain, and the --peer that
// chooses among them.
func ViaDNS(domain string) string { return "dns:" + CanonicalDomain(domain) }

// CanonicalDomain is domain as peers are listed under it: lower case,
// no trailing dot.
func CanonicalDomain(domain string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(domain)), ".")
}

// The bounds on what one domain's records can make a browser do.
const (
	maxInstancesPerDomain = MaxPeers
	dnsTimeout            = 2 * time.Second
	minCacheTTL           = time.Second // a TTL of 0 is asked again each round, not every instant
	maxCacheTTL           = time.Hour
)

// GoneUnreachable: listed in DNS, its manifest could not be read.
const GoneUnreachable = "unreachable"

// dnsCache keeps answers for as long as their TTL says: a browser that
// runs (`peers --watch`, the MCP server) asks again only once they expire.
type dnsCache struct {
	mu      sync.Mutex
	answers map[string]cachedAnswer
}

type cachedAnswer struct {
	rrs     []dns.RR
	expires time.Time
}

func (c *dnsCache) get(key string, now time.Time) ([]dns.RR, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.answers[key]
	if !ok || now.After(a.expires) {
		return nil, false
	}
	return a.rrs, true
}

func (c *dnsCache) put(key string, rrs []dns.RR, now time.Time) {
	ttl := maxCacheTTL
	for _, rr := range rrs {
		ttl = min(ttl, time.Duration(rr.Header().Ttl)*time.Second)
	}
	if len(rrs) == 0 {
		ttl = minCacheTTL // a name not there yet may be added soon
	}
	ttl = max(ttl, minCacheTTL)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answers == nil {
		c.answers = map[string]cachedAnswer{}
	}
	if len(c.answers) > 4*maxInstancesPerDomain {
		clear(c.answers) // a cache, bounded: it is filled again as needed
	}
	c.answers[key] = cachedAnswer{rrs: rrs, expires: now.Add(ttl)}
}

// dnsServer is where DNS queries go: b.DNSServer, or the first
// nameserver of /etc/resolv.conf.
func (b *Browser) dnsServer() (string, error) {
	if b.DNSServer != "" {
		if _, _, err := net.SplitHostPort(b.DNSServer); err != nil {
			return net.JoinHostPort(b.DNSServer, "53"), nil
		}
		return b.DNSServer, nil
	}
	conf, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil {
		return "", fmt.Errorf("no DNS server: %w (give one with --dns-server)", err)
	}
	if len(conf.Servers) == 0 {
		return "", errors.New("no DNS server in /etc/resolv.conf (give one with --dns-server)")
	}
	return net.JoinHostPort(conf.Servers[0], conf.Port), nil
}

// query asks server for name's records of type qtype, from the cache
// while they are fresh. A truncated UDP answer is asked again over TCP.
func (b *Browser) query(ctx context.Context, server, name string, qtype uint16) ([]dns.RR, error) {
	key := dns.TypeToString[qtype] + " " + strings.ToLower(name)
	now := time.Now()
	if rrs, ok := b.dns.get(key, now); ok {
		return rrs, nil
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(4096, false)
	c := &dns.Client{Timeout: dnsTimeout}
	in, _, err := c.ExchangeContext(ctx, m, server)
	if err == nil && in.Truncated {
		c.Net = "tcp"
		in, _, err = c.ExchangeContext(ctx, m, server)
	}
	if err != nil {
		return nil, fmt.Errorf("DNS %s %s at %s: %w", dns.TypeToString[qtype], name, server, err)
	}
	if in.Rcode != dns.RcodeSuccess && in.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("DNS %s %s at %s: %s", dns.TypeToString[qtype], name, server, dns.RcodeToString[in.Rcode])
	}
	var rrs []dns.RR
	for _, rr := range in.Answer {
		if rr.Header().Rrtype == qtype && strings.EqualFold(rr.Header().Name, dns.Fqdn(name)) {
			rrs = append(rrs, rr)
		}
	}
	b.dns.put(key, rrs, now)
	return rrs, nil
}

// browseDNS finds the executors under domain: each instance its PTR
// records name (or, where there are none, each SRV record of
// _awcp._tcp.DOMAIN), with its address and TXT. Their manifests are not
// read yet.
func (b *Browser) browseDNS(ctx context.Context, domain string) ([]*Peer, error) {
	server, err := b.dnsServer()
	if err != nil {
		return nil, err
	}
	via := ViaDNS(domain)
	service := ServiceAWCP + "." + CanonicalDomain(domain)
	ptrs, perr := b.query(ctx, server, service, dns.TypePTR)
	var peers []*Peer
	var errs []error
	if len(ptrs) == 0 {
		// No DNS-SD: the SRV records of the name itself, as a headless
		// Kubernetes Service publishes them. (A server that knows the
		// name but no PTR may refuse the PTR question, as dnsmasq does.)
		srvs, err := b.query(ctx, server, service, dns.TypeSRV)
		if err != nil {
			return nil, errors.Join(perr, err)
		}
		if len(srvs) == 0 && perr != nil {
			return nil, perr
		}
		for _, rr := range srvs[:min(len(srvs), maxInstancesPerDomain)] {
			p, err := b.fromSRV(ctx, server, rr.(*dns.SRV), nil, via)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			peers = append(peers, p)
		}
		return peers, errors.Join(errs...)
	}
	for _, rr := range ptrs[:min(len(ptrs), maxInstancesPerDomain)] {
		instance := rr.(*dns.PTR).Ptr
		srvs, err := b.query(ctx, server, instance, dns.TypeSRV)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(srvs) == 0 {
			continue // withdrawn between the two answers
		}
		txts, err := b.query(ctx, server, instance, dns.TypeTXT)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var fields []string
		for _, t := range txts {
			fields = append(fields, t.(*dns.TXT).Txt...)
		}
		p, err := b.fromSRV(ctx, server, srvs[0].(*dns.SRV), fields, via)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		peers = append(peers, p)
	}
	return peers, errors.Join(errs...)
}

// fromSRV is the peer an SRV record (and the TXT fields beside it, if
// any) describes, at its target's first usable IPv4 address.
func (b *Browser) fromSRV(ctx context.Context, server string, srv *dns.SRV, fields []string, via string) (*Peer, error) {
	txt := txtFields(fields)
	id := txt[txtAgentID] // none: the manifest says it
	if id != "" && control.CheckCallChain([]string{id}) != nil {
		return nil, fmt.Errorf("%s: TXT agent_id %q is no agent id", srv.Hdr.Name, printable(id))
	}
	if srv.Port == 0 {
		return nil, fmt.Errorf("%s: SRV with port 0", srv.Hdr.Name)
	}
	as, err := b.query(ctx, server, srv.Target, dns.TypeA)
	if err != nil {
		return nil, err
	}
	var addr netip.Addr
	for _, rr := range as {
		if a, ok := netip.AddrFromSlice(rr.(*dns.A).A.To4()); ok && dnsAddressUsable(a) {
			addr = a
			break
		}
	}
	if !addr.IsValid() {
		return nil, fmt.Errorf("%s: no usable IPv4 address for %s (loopback, link-local and multicast are not taken from DNS)", srv.Hdr.Name, srv.Target)
	}
	name := printable(txt[txtName])
	if name == "" {
		name = strings.TrimSuffix(srv.Target, ".")
	}
	hostPort := net.JoinHostPort(addr.String(), strconv.Itoa(int(srv.Port)))
	return &Peer{AgentID: id, Name: name, Version: printable(txt[txtVersion]), URL: baseFrom(txt[txtManifestURL], hostPort), Via: via}, nil
}

func txtFields(fields []string) map[string]string {
	txt := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		if len(v) <= maxTXTValue {
			txt[k] = v
		}
	}
	return txt
}

// dnsAddressUsable says whether an address DNS gave may be sent requests:
// not this host's loopback, not link-local (169.254.169.254 is a cloud's
// metadata service), not multicast or unspecified.
func dnsAddressUsable(a netip.Addr) bool {
	return !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() && !a.IsMulticast() && !a.IsUnspecified()
}
