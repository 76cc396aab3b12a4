package discovery

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// zone is a DNS server on loopback (miekg/dns's, over UDP and TCP)
// answering from records, counting the questions it is asked. Over UDP
// it sets the truncated bit on TXT answers when truncateTXT is set, as a
// server does for an answer past 512 bytes.
type zone struct {
	addr        string
	mu          sync.Mutex
	records     []dns.RR
	asked       map[string]int // "TYPE name" → count
	truncateTXT bool
}

func newZone(t *testing.T, records ...string) *zone {
	t.Helper()
	z := &zone{asked: map[string]int{}}
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			t.Fatal(err)
		}
		z.records = append(z.records, rr)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	z.addr = pc.LocalAddr().String()
	udp := &dns.Server{PacketConn: pc, Handler: z.handler(true)}
	tcp := &dns.Server{Listener: ln, Handler: z.handler(false)}
	var wg sync.WaitGroup
	for _, s := range []*dns.Server{udp, tcp} {
		wg.Add(1)
		go func() { defer wg.Done(); s.ActivateAndServe() }()
	}
	t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown(); wg.Wait() })
	return z
}

func (z *zone) handler(udp bool) dns.HandlerFunc {
	return func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		question := q.Question[0]
		z.mu.Lock()
		z.asked[dns.TypeToString[question.Qtype]+" "+strings.ToLower(question.Name)]++
		for _, rr := range z.records {
			if rr.Header().Rrtype == question.Qtype && strings.EqualFold(rr.Header().Name, question.Name) {
				m.Answer = append(m.Answer, rr)
			}
		}
		if udp && z.truncateTXT && question.Qtype == dns.TypeTXT {
			m.Answer, m.Truncated = nil, true
		}
		z.mu.Unlock()
		if len(m.Answer) == 0 && !m.Truncated {
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	}
}

func (z *zone) count(q string) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.asked[q]
}

// A DNS-SD instance is read as an mDNS answer is — agent id, name,
// version, and the TLS URL at the A record's address — and its records
// are asked again only once their TTL has passed.
func TestDNSSDBrowseHonoursTTL(t *testing.T) {
	id := "0b8f6f1e-2f3c-4c55-9a57-1f0c1d2e3f40"
	z := newZone(t,
		"_awcp._tcp.fleet.test. 1 IN PTR builder._awcp._tcp.fleet.test.",
		"builder._awcp._tcp.fleet.test. 1 IN SRV 0 0 10200 b1.fleet.test.",
		`builder._awcp._tcp.fleet.test. 1 IN TXT "agent_id=`+id+`" "name=builder" "version=9"`,
		"b1.fleet.test. 1 IN A 10.1.2.3",
	)
	b := &Browser{DNSServer: z.addr}
	b.init()
	ps, err := b.browseDNS(context.Background(), "Fleet.Test.")
	if err != nil || len(ps) != 1 {
		t.Fatalf("browse: %d peers, %v", len(ps), err)
	}
	p := ps[0]
	if p.AgentID != id || p.Name != "builder" || p.Version != "9" || p.URL != "https://10.1.2.3:10200" || p.Via != "dns:fleet.test" {
		t.Fatalf("peer read as %+v", *p)
	}
	if _, err := b.browseDNS(context.Background(), "fleet.test"); err != nil {
		t.Fatal(err)
	}
	if n := z.count("PTR _awcp._tcp.fleet.test."); n != 1 {
		t.Fatalf("PTR asked %d times within its TTL, want 1", n)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := b.browseDNS(context.Background(), "fleet.test"); err != nil {
		t.Fatal(err)
	}
	if n := z.count("PTR _awcp._tcp.fleet.test."); n != 2 {
		t.Fatalf("PTR asked %d times once its TTL had passed, want 2", n)
	}
}

// Addresses DNS names that would aim this host's requests at itself or at
// a cloud's metadata service are not taken; a truncated answer is asked
// again over TCP; a name with SRV records alone (a headless Kubernetes
// Service) gives peers whose id the manifest will say.
func TestDNSSDRecordsAreBounded(t *testing.T) {
	id := "0b8f6f1e-2f3c-4c55-9a57-1f0c1d2e3f40"
	z := newZone(t,
		"_awcp._tcp.fleet.test. 60 IN PTR lo._awcp._tcp.fleet.test.",
		"_awcp._tcp.fleet.test. 60 IN PTR meta._awcp._tcp.fleet.test.",
		"_awcp._tcp.fleet.test. 60 IN PTR good._awcp._tcp.fleet.test.",
		"_awcp._tcp.fleet.test. 60 IN PTR badid._awcp._tcp.fleet.test.",
		"lo._awcp._tcp.fleet.test. 60 IN SRV 0 0 10200 lo.fleet.test.",
		"meta._awcp._tcp.fleet.test. 60 IN SRV 0 0 80 meta.fleet.test.",
		"good._awcp._tcp.fleet.test. 60 IN SRV 0 0 10200 good.fleet.test.",
		"badid._awcp._tcp.fleet.test. 60 IN SRV 0 0 10200 good.fleet.test.",
		`good._awcp._tcp.fleet.test. 60 IN TXT "agent_id=`+id+`"`,
		`badid._awcp._tcp.fleet.test. 60 IN TXT "agent_id=../../etc"`,
		"lo.fleet.test. 60 IN A 127.0.0.1",
		"meta.fleet.test. 60 IN A 169.254.169.254",
		"good.fleet.test. 60 IN A 192.0.2.7",
		"_awcp._tcp.executors.ns.svc.cluster.test. 5 IN SRV 0 50 10200 e-0.executors.ns.svc.cluster.test.",
		"e-0.executors.ns.svc.cluster.test. 5 IN A 192.0.2.8",
	)
	z.mu.Lock()
	z.truncateTXT = true
	z.mu.Unlock()
	b := &Browser{DNSServer: z.addr}
	b.init()
	ps, err := b.browseDNS(context.Background(), "fleet.test")
	if len(ps) != 1 || ps[0].AgentID != id || ps[0].URL != "https://192.0.2.7:10200" {
		t.Fatalf("peers %v, want the one at 192.0.2.7 only", ps)
	}
	for _, want := range []string{"usable IPv4 address for lo.fleet.test", "usable IPv4 address for meta.fleet.test", "is no agent id"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the refusals do not say %q: %v", want, err)
		}
	}
	if ps, err := b.browseDNS(context.Background(), "executors.ns.svc.cluster.test"); err != nil || len(ps) != 1 ||
		ps[0].AgentID != "" || ps[0].URL != "https://192.0.2.8:10200" || ps[0].Name != "e-0.executors.ns.svc.cluster.test" {
		t.Fatalf("the SRV-only name: %v, %v", ps, err)
	}
}

// A delegation auto chose carries auto's next choices, best first, never
// the chosen one, one that is full or offline, or one under another
// domain; an executor named by the user has none.
func TestFallbacks(t *testing.T) {
	a := executorPeer("alpha", idA, true, 3, "archive")
	b := executorPeer("bravo", idB, true, 1, "archive")
	full := executorPeer("charlie", idC, true, 0, "archive")
	gone := executorPeer("delta", idD, false, 5, "archive")
	b.Via, a.Via = ViaDNS("fleet.test"), ViaDNS("fleet.test")
	peers := []Peer{a, b, full, gone}
	names := func(ps []Peer) (out []string) {
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(Fallbacks(peers, Auto, Want{}, idA)); strings.Join(got, ",") != "bravo" {
		t.Errorf("auto after alpha: %v", got)
	}
	if got := names(Fallbacks(peers, "dns:fleet.test", Want{}, idB)); strings.Join(got, ",") != "alpha" {
		t.Errorf("dns:fleet.test after bravo: %v", got)
	}
	if got := Fallbacks(peers, "alpha", Want{}, idA); got != nil {
		t.Errorf("a named executor has fallbacks: %v", names(got))
	}
	var many []Peer
	for i := range MaxFallbacks + 5 {
		id := fmt.Sprintf("eeeeeeee-0000-4000-8000-%012d", i)
		many = append(many, executorPeer(fmt.Sprintf("e%02d", i), id, true, 1, "archive"))
	}
	if got := Fallbacks(many, Auto, Want{}, many[0].AgentID); len(got) != MaxFallbacks {
		t.Errorf("%d fallbacks, want the bound %d", len(got), MaxFallbacks)
	}
}
