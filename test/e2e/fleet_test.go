package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dnsServer is dnsmasq, run in a namespace of the LAN, serving the DNS-SD
// records of a fleet on that namespace's loopback.
type dnsServer struct {
	addr string
	cmd  *exec.Cmd
	log  bytes.Buffer
}

// serveDNS starts dnsmasq in n's namespace with records (its options:
// --ptr-record, --srv-host, --txt-record, --host-record), and nothing else
// (no upstream, no /etc/hosts). TTLs are 2 s.
func serveDNS(t *testing.T, n *node, records []string) *dnsServer {
	t.Helper()
	bin, err := exec.LookPath("dnsmasq")
	if err != nil {
		t.Fatal("the DNS tests need dnsmasq (Debian's dnsmasq-base; .ci/run installs it)")
	}
	s := &dnsServer{addr: "127.0.0.1:5353"}
	args := append([]string{"netns", "exec", n.ns, bin, "--keep-in-foreground", "--log-facility=-", "--conf-file=/dev/null",
		"--no-resolv", "--no-hosts", "--no-poll", "--listen-address=127.0.0.1", "--bind-interfaces", "--port=5353",
		"--local-ttl=2", "--user=root", "--pid-file="}, records...)
	s.cmd = exec.Command("ip", args...)
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		if t.Failed() {
			t.Logf("dnsmasq:\n%s", s.log.String())
		}
	})
	return s
}

// dnsSD are the records that publish executor n under domain as
// instance, in dnsmasq's options; claimID, if set, is the agent id its
// TXT claims.
func dnsSD(domain, instance string, n *node, claimID string) []string {
	service := "_awcp._tcp." + domain
	host := instance + ".hosts." + domain
	return []string{
		"--ptr-record=" + service + "," + instance + "." + service,
		"--srv-host=" + instance + "." + service + "," + host + ",10200",
		fmt.Sprintf("--txt-record=%s.%s,agent_id=%s,name=%s,version=test", instance, service, claimID, instance),
		"--host-record=" + host + "," + n.ip,
	}
}

// identityKey is n's identity key, as `awcp-fs id` prints it.
func (n *node) identityKey(t *testing.T) string {
	t.Helper()
	out, err := n.command("awcp-fs", "id").Output()
	if err != nil {
		t.Fatalf("awcp-fs id in %s: %v", n.name, err)
	}
	key, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(key)
}

// TestDNSFleet: ten executors, each in a network namespace with one slot,
// published in a real DNS server (dnsmasq) by DNS-SD records. One browse
// finds all ten; after trust, ten delegations started at once with --peer
// dns:DOMAIN run one on each (an executor that declines for want of a
// slot passes the delegation on to the next; half of them say --peer
// auto with the domain browsed beside mDNS); one killed is shown offline
// and not chosen; impostors published beside them — one with a trusted
// agent's id and another key, one whose TXT claims an id its manifest
// does not name — are never invited. A Kubernetes-style name (SRV records
// alone, no PTR or TXT) is browsed too.
func TestDNSFleet(t *testing.T) {
	slow(t)
	parallel(t)
	l := newLAN(t)
	d := l.add("d", 2)
	const domain = "fleet.test"
	var fleet []*node
	var records []string
	agent := `sleep 3; echo "ran here" > ran.txt`
	for i := range 10 {
		e := l.add(fmt.Sprintf("e%d", i), 10+i)
		e.serve(t, agent, "--advertise=false", "--transports", "archive", "--max-concurrent", "1")
		fleet = append(fleet, e)
		records = append(records, dnsSD(domain, e.name, e, e.agentID(t))...)
	}
	// x1 holds e3's agent id with a key of its own; x2's TXT claims e4's
	// id while its manifest names its own.
	x1, x2 := l.add("x1", 31), l.add("x2", 32)
	if err := os.MkdirAll(x1.state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(x1.state, "agent-id"), []byte(fleet[3].agentID(t)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*node{x1, x2} {
		x.serve(t, `echo impostor > ran.txt`, "--advertise=false", "--transports", "archive", "--max-concurrent", "50")
	}
	records = append(records, dnsSD(domain, "x1", x1, fleet[3].agentID(t))...)
	records = append(records, dnsSD(domain, "x2", x2, fleet[4].agentID(t))...)
	// A headless Service's SRV records, as Kubernetes serves them.
	records = append(records,
		"--srv-host=_awcp._tcp.executors.ns.svc.k8s.test,e0.executors.ns.svc.k8s.test,10200",
		"--srv-host=_awcp._tcp.executors.ns.svc.k8s.test,e1.executors.ns.svc.k8s.test,10200",
		"--host-record=e0.executors.ns.svc.k8s.test,"+fleet[0].ip,
		"--host-record=e1.executors.ns.svc.k8s.test,"+fleet[1].ip)
	dns := serveDNS(t, d, records)
	browse := []string{"--dns-server", dns.addr}

	// One browse finds the ten; the impostors are not listed as agents of
	// their own, and none is trusted yet.
	var peers []struct {
		AgentID  string `json:"agentId"`
		Name     string `json:"name"`
		URL      string `json:"url"`
		Online   bool   `json:"online"`
		Gone     string `json:"gone"`
		Via      string `json:"via"`
		Impostor string `json:"impostor"`
	}
	var r result
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		r = d.ctl(t, append([]string{"peers", "--dns", domain, "--json"}, browse...)...)
		peers = nil
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &peers) == nil && len(peers) >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peers --dns %s: exit %d, %d peers\n%s%s", domain, r.code, len(peers), r.stdout, r.stderr)
		}
	}
	found := map[string]bool{}
	for _, p := range peers {
		if p.Online && p.Via == "dns:"+domain {
			found[p.AgentID] = true
		}
	}
	for _, e := range fleet {
		if !found[e.agentID(t)] {
			t.Errorf("the browse did not find %s (%s) online: %+v", e.name, e.agentID(t), peers)
		}
	}
	if found[x2.agentID(t)] {
		t.Errorf("x2, whose TXT claims another id than its manifest names, was listed")
	}

	// The owner trusts each executor by the key `awcp-fs id` shows on it.
	for _, e := range fleet {
		if r := d.ctl(t, "peers", "trust", e.agentID(t), "--key", e.identityKey(t)); r.code != 0 {
			t.Fatalf("peers trust %s: %s", e.name, r.stderr)
		}
	}

	// Ten at once: one on each executor, none over its one slot.
	ids := make([]string, 10)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half name the domain; half say auto, the domain browsed
			// beside mDNS (as a config file's dns = [...] does).
			peer := []string{"--peer", "dns:" + domain}
			if i%2 == 1 {
				peer = []string{"--peer", "auto", "--dns", domain}
			}
			r := d.ctl(t, append(append([]string{"export", t.TempDir(), "--prompt", "run", "--transport", "archive", "--background"}, peer...), browse...)...)
			if r.code != 0 {
				t.Errorf("export %d %v: exit %d\n%s", i, peer, r.code, r.stderr)
				return
			}
			ids[i] = strings.TrimSpace(r.stdout)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	type row struct {
		ID          string   `json:"id"`
		State       string   `json:"state"`
		PeerAgentID string   `json:"peerAgentId"`
		LocalDir    string   `json:"localDir"`
		Notes       []string `json:"notes"`
	}
	var rows []row
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		rows = nil
		json.Unmarshal([]byte(d.ctl(t, "status", "--json").stdout), &rows)
		ended := 0
		for _, x := range rows {
			if x.State == "completed" || x.State == "failed" || x.State == "cancelled" || x.State == "expired" {
				ended++
			}
		}
		if ended == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ten delegations did not end within 60 s: %+v", rows)
		}
	}
	on := map[string]int{}
	passedOn := 0
	for _, x := range rows {
		if x.State != "completed" {
			t.Errorf("delegation %s ended %s: %v", x.ID, x.State, x.Notes)
		}
		on[x.PeerAgentID]++
		if got, _ := os.ReadFile(filepath.Join(x.LocalDir, "ran.txt")); string(got) != "ran here\n" {
			t.Errorf("delegation %s's workspace has ran.txt %q", x.ID, got)
		}
		for _, n := range x.Notes {
			if strings.Contains(n, "has no free slot") {
				passedOn++
			}
		}
	}
	for _, e := range fleet {
		if on[e.agentID(t)] != 1 {
			t.Errorf("%s ran %d of the ten delegations, want 1: %v", e.name, on[e.agentID(t)], on)
		}
	}
	t.Logf("ten delegations started at once: %d invitations passed on for want of a slot", passedOn)
	for _, x := range []*node{x1, x2} {
		if strings.Contains(x.log.String(), "INVITE") {
			t.Errorf("impostor %s received an INVITE:\n%s", x.name, x.log.String())
		}
	}
	if r := d.ctl(t, append([]string{"peers", "--dns", domain}, browse...)...); !strings.Contains(r.stdout, "IMPOSTOR SEEN") {
		t.Errorf("peers does not show e3's impostor:\n%s%s", r.stdout, r.stderr)
	}

	// The docs' attempts across the fleet: dns:DOMAIN alone, no --dns
	// (this node has no multicast route, so mDNS cannot even bind: the
	// executors chosen from DNS must not be looked up there again).
	r = d.ctl(t, append([]string{"export", t.TempDir(), "--peer", "dns:" + domain, "--attempts", "2", "--prompt", "run", "--transport", "archive"}, browse...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "attempt 1: delegation") || !strings.Contains(r.stderr, "attempt 2: delegation") {
		t.Errorf("export --peer dns:%s --attempts 2: exit %d\n%s%s", domain, r.code, r.stdout, r.stderr)
	}

	// e0, auto's first choice among equals (by name), is killed: it is
	// shown offline and the next delegation goes elsewhere.
	fleet[0].stop(t, syscall.SIGKILL)
	r = d.ctl(t, append([]string{"peers", "--dns", domain}, browse...)...)
	line := ""
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "e0 ") {
			line = l
		}
	}
	if !strings.Contains(line, "listed in DNS, not answering") {
		t.Errorf("the killed e0 is not shown offline:\n%s%s", r.stdout, r.stderr)
	}
	ws := t.TempDir()
	r = d.ctl(t, append([]string{"export", ws, "--peer", "dns:" + domain, "--prompt", "run", "--transport", "archive"}, browse...)...)
	if r.code != 0 || strings.Contains(r.stderr, fleet[0].agentID(t)) || !strings.Contains(r.stderr, "--peer dns:"+domain+": e1 (") {
		t.Errorf("after e0 was killed, export --peer dns:%s: exit %d\n%s", domain, r.code, r.stderr)
	}

	// The Kubernetes name: SRV records alone; the agent ids come from the
	// manifests (e0 is down: e1 alone answers).
	r = d.ctl(t, append([]string{"peers", "--dns", "executors.ns.svc.k8s.test", "--json"}, browse...)...)
	peers = nil
	if err := json.Unmarshal([]byte(r.stdout), &peers); err != nil {
		t.Fatalf("peers --dns executors.ns.svc.k8s.test: %v\n%s%s", err, r.stdout, r.stderr)
	}
	k8s := 0
	for _, p := range peers {
		if p.Via == "dns:executors.ns.svc.k8s.test" && p.Online {
			k8s++
			if p.AgentID != fleet[1].agentID(t) {
				t.Errorf("the SRV-only name lists %s online, not e1", p.AgentID)
			}
		}
	}
	if k8s != 1 {
		t.Errorf("the SRV-only name lists %d executors online, want 1 (e1):\n%s", k8s, r.stdout)
	}
}
