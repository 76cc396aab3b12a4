package discovery

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/mdns"

	"github.com/awcp/awcp/control"
)

// Every process on a state dir gets the same agent id, made once, even
// when they start together; a damaged file is an error that says what to
// do, never a new identity made silently.
func TestAgentIDIsStable(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); ids[i], errs[i] = AgentID(dir) }()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] || !uuidForm.MatchString(ids[i]) {
			t.Fatalf("agent ids %v, errors %v", ids, errs)
		}
	}
	if again, err := AgentID(dir); err != nil || again != ids[0] {
		t.Fatalf("second start: %q, %v; want %q", again, err, ids[0])
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("state dir holds %v, want only agent-id", ents)
	}
	os.WriteFile(filepath.Join(dir, agentIDFile), []byte("not an id\n"), 0o600)
	if _, err := AgentID(dir); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("damaged agent-id: %v", err)
	}
}

func executorPeer(name, id string, online bool, free int, transports ...string) Peer {
	return Peer{AgentID: id, Name: name, Online: online, URL: "http://" + name + ":10200", LastSeen: time.Now(),
		Manifest: &control.Manifest{AgentID: id, AWCP: &control.ManifestAWCP{
			Transports: transports, FUSE: strings.Contains(strings.Join(transports, ","), "sshfs"),
			AccessModes: []string{"rw", "ro"}, MaxConcurrent: 5, FreeSlots: free}}}
}

const (
	idA = "aaaaaaaa-0000-4000-8000-000000000001"
	idB = "bbbbbbbb-0000-4000-8000-000000000002"
	idC = "cccccccc-0000-4000-8000-000000000003"
	idD = "dddddddd-0000-4000-8000-000000000004"
)

func TestResolve(t *testing.T) {
	a := executorPeer("alpha", idA, true, 2, "sshfs", "archive")
	b := executorPeer("beta", idB, true, 4, "archive")
	c := executorPeer("gamma", idC, true, 0, "sshfs", "archive")
	gone := executorPeer("delta", idD, false, 5, "sshfs")
	gone.Gone = GoneWithdrawn
	peers := []Peer{a, b, c, gone}
	for _, tc := range []struct {
		arg  string
		want Want
		peer string // the name chosen, or "" for an error
		says string // in the error, or in why
	}{
		{"alpha", Want{}, "alpha", "named alpha"},
		{"ALPHA", Want{}, "alpha", ""},
		{idB, Want{}, "beta", ""},
		{"bbbbbbbb", Want{}, "beta", ""},
		{"bbbb", Want{}, "", "no executor called"}, // a prefix is eight characters at least
		{"delta", Want{}, "", "offline: withdrawn"},
		{"nobody", Want{}, "", "awcp-ctl peers"},
		{"alpha", Want{Self: idA}, "", "this agent itself"},
		{"alpha", Want{Exclude: []string{idD, idA}}, "", "already in this delegation's call chain " + idD + " → " + idA},
		// auto: the live mount first, then the most free slots; never a
		// full one, this agent or one in the chain.
		{Auto, Want{Transport: "auto"}, "alpha", "auto: live mount, 2 of 5 slots free"},
		{Auto, Want{Transport: "archive"}, "beta", "auto: archive, 4 of 5 slots free"},
		{Auto, Want{Transport: "auto", Self: idA}, "beta", "archive"},
		{Auto, Want{Transport: "sshfs", Exclude: []string{idA}}, "", "beta: does not offer sshfs; gamma: no free slot"},
	} {
		p, why, err := Resolve(peers, tc.arg, tc.want)
		switch {
		case tc.peer == "" && err == nil:
			t.Errorf("Resolve(%q, %+v) chose %s, want an error saying %q", tc.arg, tc.want, p.Name, tc.says)
		case tc.peer == "" && !strings.Contains(err.Error(), tc.says):
			t.Errorf("Resolve(%q, %+v): %v; want it to say %q", tc.arg, tc.want, err, tc.says)
		case tc.peer != "" && (err != nil || p.Name != tc.peer || !strings.Contains(why, tc.says)):
			t.Errorf("Resolve(%q, %+v) = %s (%q), %v; want %s (%q)", tc.arg, tc.want, p.Name, why, err, tc.peer, tc.says)
		}
	}
}

// A name is not proof of identity: two executors online under one name,
// or a name that now answers with another id than the book remembers,
// are refused until the user names one by id.
func TestResolveRefusesAClaimedName(t *testing.T) {
	real := executorPeer("builder", idA, true, 1, "archive")
	twin := executorPeer("builder", idB, true, 1, "archive")
	if _, _, err := Resolve([]Peer{real, twin}, "builder", Want{}); err == nil || !strings.Contains(err.Error(), "2 executors online call themselves") {
		t.Fatalf("two online under one name: %v", err)
	}
	real.Online = false
	if _, _, err := Resolve([]Peer{real, twin}, "builder", Want{}); err == nil || !strings.Contains(err.Error(), "was agent "+idA) {
		t.Fatalf("a name that changed hands: %v", err)
	}
	if p, _, err := Resolve([]Peer{real, twin}, idB, Want{}); err != nil || p.AgentID != idB {
		t.Fatalf("named by id: %v", err)
	}
}

// The base URL is the address the answer came from: a manifest URL that
// points elsewhere is not followed.
func TestBaseURLIsTheAnsweringAddress(t *testing.T) {
	for _, tc := range []struct{ manifest, want string }{
		{"http://10.0.0.5:10200/manifest", "http://10.0.0.5:10200"},
		{"https://10.0.0.5:10200/manifest", "https://10.0.0.5:10200"},
		{"http://169.254.169.254/latest/meta-data", "http://10.0.0.5:10200"},
		{"file:///etc/passwd", "http://10.0.0.5:10200"},
		{"", "http://10.0.0.5:10200"},
	} {
		if got := baseFrom(tc.manifest, "10.0.0.5:10200"); got != tc.want {
			t.Errorf("baseFrom(%q) = %q, want %q", tc.manifest, got, tc.want)
		}
	}
}

// An answer's address is its sender's claim: one that is on none of this
// host's networks (a cloud's metadata address, another subnet) is not
// taken, so an advertisement cannot aim manifest requests, or INVITEs
// with their token, off the link.
func TestAnswersOffTheLinkAreIgnored(t *testing.T) {
	_, lan, _ := net.ParseCIDR("10.0.0.0/24")
	nets := []*net.IPNet{lan}
	answer := func(ip string) *mdns.ServiceEntry {
		return &mdns.ServiceEntry{Name: "x._awcp._tcp.local.", AddrV4: net.ParseIP(ip).To4(), Port: 10200,
			InfoFields: []string{"agent_id=" + idA, "name=box", "manifest_url=http://" + ip + ":10200/manifest"}}
	}
	if p, ok := fromEntry(answer("10.0.0.5"), nets); !ok || p.URL != "http://10.0.0.5:10200" {
		t.Fatalf("an answer on the link: %+v %v", p, ok)
	}
	for _, ip := range []string{"169.254.169.254", "10.0.1.5", "192.168.1.1"} {
		if p, ok := fromEntry(answer(ip), nets); ok {
			t.Errorf("an answer at %s was taken: %+v", ip, p)
		}
	}
	bad := answer("10.0.0.5")
	bad.InfoFields = []string{"agent_id=not an id"}
	if _, ok := fromEntry(bad, nets); ok {
		t.Error("an answer with a malformed agent id was taken")
	}
}

// What answers can make a browser hold is bounded: 256 peers, TXT values
// of 256 bytes, names without control characters.
func TestBrowserIsBounded(t *testing.T) {
	b := &Browser{Logger: slog.New(slog.DiscardHandler)}
	b.init()
	now := time.Now()
	b.mu.Lock()
	for i := range 2 * MaxPeers {
		b.merge(&Peer{AgentID: fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), Name: "p"}, now)
	}
	b.mu.Unlock()
	if n := len(b.Peers()); n != MaxPeers {
		t.Fatalf("a browser holds %d peers, want %d", n, MaxPeers)
	}
	_, lan, _ := net.ParseCIDR("10.0.0.0/24")
	e := &mdns.ServiceEntry{AddrV4: net.ParseIP("10.0.0.5").To4(), Port: 1,
		InfoFields: []string{"agent_id=" + idA, "name=" + strings.Repeat("n", 300), "version=1\x1b[2J"}}
	p, ok := fromEntry(e, []*net.IPNet{lan})
	if !ok || p.Name != idA || p.Version != "1[2J" {
		t.Fatalf("an answer with an oversized name and a control character: %+v", p)
	}
}
