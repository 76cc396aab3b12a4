// Package discovery finds AWCP executors on the local network with mDNS
// (DNS-SD over multicast, RFC 6762/6763), as seed 003 §3 describes: an
// executor advertises itself under _awcp._tcp and the seed's
// _acp-agent._tcp, with its agent id, version and manifest URL in TXT; a
// delegator browses, fetches each agent's manifest, and keeps what it
// found in a book in its state dir, so that a peer that went away is shown
// offline rather than forgotten. It also keeps the agent's own id.
//
// What mDNS says is a claim anyone on the link can make: a name or an id
// found here is not proof of who answers. The book remembers which id a
// name had, and Resolve refuses a name that changed hands or is claimed
// twice (see SECURITY.md).
package discovery

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/hashicorp/mdns"
	"github.com/miekg/dns"
)

// The service types an executor is advertised under.
const (
	ServiceAWCP = "_awcp._tcp"
	ServiceACP  = "_acp-agent._tcp" // seed 003's
	domain      = "local."
)

// The TXT keys of an advertisement.
const (
	txtAgentID     = "agent_id"
	txtName        = "name"
	txtVersion     = "version"
	txtCardURL     = "card_url"
	txtManifestURL = "manifest_url"
)

var mdnsGroup = &net.UDPAddr{IP: net.IPv4(224, 0, 0, 251), Port: 5353}

// Advertisement is what an executor says of itself.
type Advertisement struct {
	AgentID, Name, Version string
	// Port is the executor's HTTP port; IPs the addresses it is reached
	// at (ListenerIPs).
	Port int
	IPs  []net.IP
	// Iface, if set, is the interface to advertise on; else the system's
	// multicast default.
	Iface *net.Interface
}

// Advertiser answers mDNS queries for one executor until Close.
type Advertiser struct {
	server  *mdns.Server
	records zones
	iface   *net.Interface
	once    sync.Once
}

// zones answers for several services at once.
type zones []*mdns.MDNSService

func (z zones) Records(q dns.Question) []dns.RR {
	var out []dns.RR
	for _, s := range z {
		out = append(out, s.Records(q)...)
	}
	return out
}

// Advertise starts answering for ad.
func Advertise(ad Advertisement, logger *slog.Logger) (*Advertiser, error) {
	if len(ad.IPs) == 0 {
		return nil, errors.New("advertise: no address to advertise")
	}
	base := "https://" + net.JoinHostPort(ad.IPs[0].String(), fmt.Sprint(ad.Port))
	txt := []string{
		txtAgentID + "=" + ad.AgentID,
		txtName + "=" + ad.Name,
		txtVersion + "=" + ad.Version,
		txtCardURL + "=" + base + "/.well-known/agent-card.json",
		txtManifestURL + "=" + base + "/manifest",
	}
	// The seed's instance name, {agent_id}.{name}, with the name made one
	// DNS label; the host name is the instance's own, so that no record
	// depends on how this machine's name resolves.
	instance := ad.AgentID + "." + label(ad.Name)
	host := label(ad.Name) + "-" + ad.AgentID[:min(8, len(ad.AgentID))] + "." + domain
	var z zones
	for _, service := range []string{ServiceAWCP, ServiceACP} {
		s, err := mdns.NewMDNSService(instance, service, domain, host, ad.Port, ad.IPs, txt)
		if err != nil {
			return nil, fmt.Errorf("advertise: %w", err)
		}
		z = append(z, s)
	}
	server, err := mdns.NewServer(&mdns.Config{Zone: z, Iface: ad.Iface, Logger: mdnsLogger(logger)})
	if err != nil {
		return nil, fmt.Errorf("advertise: %w", err)
	}
	return &Advertiser{server: server, records: z, iface: ad.Iface}, nil
}

// Close withdraws the advertisement: it multicasts the records with a TTL
// of zero (RFC 6762 §10.1, "goodbye"), so that browsers show the executor
// offline at once, and stops answering.
func (a *Advertiser) Close() error {
	var err error
	a.once.Do(func() {
		err = errors.Join(a.goodbye(), a.server.Shutdown())
	})
	return err
}

func (a *Advertiser) goodbye() error {
	msg := new(dns.Msg)
	msg.Response, msg.Authoritative = true, true
	for _, s := range a.records {
		for _, rr := range s.Records(dns.Question{Name: fmt.Sprintf("%s.%s", s.Service, domain), Qtype: dns.TypePTR, Qclass: dns.ClassINET}) {
			rr.Header().Ttl = 0
			msg.Answer = append(msg.Answer, rr)
		}
	}
	buf, err := msg.Pack()
	if err != nil {
		return fmt.Errorf("goodbye: %w", err)
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		return fmt.Errorf("goodbye: %w", err)
	}
	defer conn.Close()
	if err := setMulticastInterface(conn, a.iface); err != nil {
		return fmt.Errorf("goodbye: %w", err)
	}
	// Sent twice, as responders do, since multicast may drop one.
	for range 2 {
		if _, err := conn.WriteToUDP(buf, mdnsGroup); err != nil {
			return fmt.Errorf("goodbye: %w", err)
		}
	}
	return nil
}

// label makes s one DNS label: letters, digits and '-', at most 40.
func label(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	if b.Len() == 0 {
		return "awcp"
	}
	return b.String()
}

// mdnsLogger hands the mDNS library's log lines to logger at debug: a
// malformed packet from the network is not this daemon's error.
func mdnsLogger(logger *slog.Logger) *log.Logger {
	if logger == nil {
		return log.New(io.Discard, "", 0)
	}
	return slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
}

// ListenerIPs are the addresses an executor listening on addr is reached
// at: addr's own, or, for a wildcard, every address of every interface
// that is up and not loopback. Public reports whether any of them is
// neither private, link-local nor loopback: an advertisement there tells
// more than a LAN about the executor.
func ListenerIPs(addr *net.TCPAddr) (ips []net.IP, public bool, err error) {
	if !addr.IP.IsUnspecified() {
		ips = []net.IP{addr.IP}
	} else {
		ifaces, err := net.Interfaces()
		if err != nil {
			return nil, false, err
		}
		for _, ifc := range ifaces {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
					ips = append(ips, n.IP)
				}
			}
		}
	}
	for _, ip := range ips {
		if !ip.IsPrivate() && !ip.IsLinkLocalUnicast() && !ip.IsLoopback() {
			public = true
		}
	}
	return ips, public, nil
}
