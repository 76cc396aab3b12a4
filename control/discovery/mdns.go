package discovery

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
)

// listenGoodbyes joins the mDNS group to hear peers withdraw.
func listenGoodbyes(iface *net.Interface) (*net.UDPConn, error) {
	return net.ListenMulticastUDP("udp4", iface, mdnsGroup)
}

// goodbyes marks offline the peers whose records come with a TTL of zero.
func (b *Browser) goodbyes(ctx context.Context, ln *net.UDPConn) {
	go func() { <-ctx.Done(); ln.Close() }()
	buf := make([]byte, 9000)
	for {
		n, _, err := ln.ReadFromUDP(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var msg dns.Msg
		if msg.Unpack(buf[:n]) != nil || !msg.Response {
			continue
		}
		for _, rr := range append(msg.Answer, msg.Extra...) {
			ptr, ok := rr.(*dns.PTR)
			if !ok || ptr.Hdr.Ttl != 0 || !strings.HasSuffix(ptr.Hdr.Name, ServiceAWCP+"."+domain) {
				continue
			}
			// The instance is {agent_id}.{name}.
			id, _, _ := strings.Cut(ptr.Ptr, ".")
			b.mu.Lock()
			if p, ok := b.peers[id]; ok && p.Online {
				p.Online, p.Gone = false, GoneWithdrawn
				b.dirty = true
				b.notifyLocked()
			}
			b.mu.Unlock()
		}
	}
}

// setMulticastInterface sends conn's multicast out of iface, if set.
func setMulticastInterface(conn *net.UDPConn, iface *net.Interface) error {
	if iface == nil {
		return nil
	}
	return ipv4.NewPacketConn(conn).SetMulticastInterface(iface)
}
