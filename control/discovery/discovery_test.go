package discovery

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
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

// keyFor is a fixed identity key of id's, for tests.
func keyFor(id string) string {
	seed := sha256.Sum256([]byte(id))
	return control.IdentityPublic(ed25519.NewKeyFromSeed(seed[:]))
}

// executorPeer is a peer the user trusts, showing its trusted key.
func executorPeer(name, id string, online bool, free int, transports ...string) Peer {
	return Peer{AgentID: id, Name: name, Online: online, URL: "http://" + name + ":10200", LastSeen: time.Now(), TrustedKey: keyFor(id),
		Manifest: &control.Manifest{AgentID: id, AWCP: &control.ManifestAWCP{
			Transports: transports, FUSE: strings.Contains(strings.Join(transports, ","), "sshfs"),
			AccessModes: []string{"rw", "ro"}, MaxConcurrent: 5, FreeSlots: free, IdentityKey: keyFor(id)}}}
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
		// This agent's own executor, named by a person on this machine:
		// taken; by an agent that executor runs: circular.
		{"alpha", Want{Self: idA}, "alpha", "named alpha"},
		{"alpha", Want{Self: idA, Exclude: []string{idA}}, "", "already in this delegation's call chain " + idA},
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
		{"http://10.0.0.5:10200/manifest", "https://10.0.0.5:10200"},
		{"https://10.0.0.5:10200/manifest", "https://10.0.0.5:10200"},
		{"http://169.254.169.254/latest/meta-data", "https://10.0.0.5:10200"},
		{"file:///etc/passwd", "https://10.0.0.5:10200"},
		{"", "https://10.0.0.5:10200"},
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
	if p, ok := fromEntry(answer("10.0.0.5"), nets); !ok || p.URL != "https://10.0.0.5:10200" {
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
		id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
		p := executorPeer("p", id, true, 1, "archive")
		p.TrustedKey, p.URL = "", fmt.Sprintf("http://10.%d.%d.1:10200", i/256, i%256)
		b.merge(&p, now)
	}
	b.mu.Unlock()
	if n := len(b.Peers()); n != MaxPeers {
		t.Fatalf("a browser holds %d peers, want %d", n, MaxPeers)
	}
	_, lan, _ := net.ParseCIDR("10.0.0.0/24")
	e := &mdns.ServiceEntry{AddrV4: net.ParseIP("10.0.0.5").To4(), Port: 1,
		InfoFields: []string{"agent_id=" + idA, "name=" + strings.Repeat("n", 300), "version=1\x1b[2J\u202e"}}
	p, ok := fromEntry(e, []*net.IPNet{lan})
	if !ok || p.Name != idA || p.Version != "1 [2J" {
		t.Fatalf("an answer with an oversized name and a control character: %+v", p)
	}
}

// The LAN impostor of issue 40, against the resolver and the book.
func TestImpostorsAreNotChosen(t *testing.T) {
	real := executorPeer("build-box", idA, true, 1, "sshfs", "archive")
	// 1. Another agent advertises the known executor's name, and its id as
	// its name: it is not trusted, so neither resolves to it.
	squatter := executorPeer("build-box", idB, true, 999, "sshfs", "archive")
	squatter.TrustedKey = ""
	byID := executorPeer(idA, idC, true, 999, "sshfs", "archive")
	byID.TrustedKey = ""
	peers := []Peer{squatter, byID, real}
	for _, arg := range []string{"build-box", idA, idA[:8]} {
		if p, _, err := Resolve(peers, arg, Want{}); err != nil || p.AgentID != idA {
			t.Errorf("--peer %s resolved to %s (%v), want the trusted %s", arg, p.AgentID, err, idA)
		}
	}
	// 2. auto never takes one not trusted, however many slots it claims.
	if p, _, err := Resolve(peers, Auto, Want{Transport: "auto"}); err != nil || p.AgentID != idA {
		t.Errorf("auto chose %s (%v), want the trusted %s", p.AgentID, err, idA)
	}
	// An untrusted one named alone is refused, and the error says how to
	// trust it.
	if _, _, err := Resolve([]Peer{squatter}, idB, Want{}); err == nil || !strings.Contains(err.Error(), "awcp-ctl peers trust "+idB) {
		t.Errorf("an untrusted peer by id: %v", err)
	}
	// A trusted id answering with another key is refused too.
	changed := real
	changed.Manifest = &control.Manifest{AgentID: idA, AWCP: &control.ManifestAWCP{IdentityKey: keyFor(idD), Transports: []string{"archive"}, FreeSlots: 1}}
	if _, _, err := Resolve([]Peer{changed}, idA, Want{}); err == nil || !strings.Contains(err.Error(), "not the") {
		t.Errorf("a changed key: %v", err)
	}

	// In the book: an answer claiming the trusted id with another key
	// moves nothing; the trusted peer keeps its address.
	b := &Browser{Logger: slog.New(slog.DiscardHandler)}
	b.init()
	b.mu.Lock()
	stored := real
	b.peers[idA] = &stored
	fake := changed
	fake.URL = "http://10.0.0.66:10200"
	b.merge(&fake, time.Now())
	b.mu.Unlock()
	if got := b.Peers()[0]; got.URL != real.URL || got.Impostor == "" {
		t.Errorf("an impostor's answer moved the trusted peer to %s (impostor note %q)", got.URL, got.Impostor)
	}
}

// 4. One host answering with 256 forged agents records at most a few; a
// trusted peer is never pushed out, and an executor that comes later is
// listed.
func TestBookFloodIsBounded(t *testing.T) {
	b := &Browser{Logger: slog.New(slog.DiscardHandler)}
	b.init()
	now := time.Now()
	b.mu.Lock()
	trusted := executorPeer("build-box", idA, true, 1, "archive")
	b.peers[idA] = &trusted
	for i := range MaxPeers {
		p := executorPeer("forged", fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), true, 1, "archive")
		p.TrustedKey, p.URL = "", "http://10.0.0.66:10200"
		b.merge(&p, now)
	}
	late := executorPeer("late", idB, true, 1, "archive")
	late.TrustedKey, late.URL = "", "http://10.0.0.7:10200"
	b.merge(&late, now)
	b.mu.Unlock()
	var ids []string
	for _, p := range b.Peers() {
		ids = append(ids, p.AgentID)
	}
	if len(ids) > 2+maxAgentsPerHost || !slices.Contains(ids, idA) || !slices.Contains(ids, idB) {
		t.Errorf("after a flood of 256 forged agents the book holds %d: %v", len(ids), ids)
	}
	// A forged answer whose manifest could not be read is not recorded.
	b.mu.Lock()
	b.merge(&Peer{AgentID: idD, Name: "no-manifest", URL: "http://10.0.0.9:10200", ManifestError: "refused"}, now)
	_, recorded := b.peers[idD]
	b.mu.Unlock()
	if recorded {
		t.Error("an answer without a readable manifest was recorded")
	}
}

// 3. An answer naming a loopback address is not taken, whatever networks
// this host has.
func TestLoopbackAnswersAreIgnored(t *testing.T) {
	_, lo, _ := net.ParseCIDR("127.0.0.0/8")
	e := &mdns.ServiceEntry{AddrV4: net.ParseIP("127.0.0.1").To4(), Port: 10200, InfoFields: []string{"agent_id=" + idA}}
	if p, ok := fromEntry(e, []*net.IPNet{lo}); ok {
		t.Errorf("an answer at 127.0.0.1 was taken: %+v", p)
	}
}

// The identity proof: the executor's signature of a fresh challenge with
// the trusted key passes; another key, another nonce or another agent id
// does not.
func TestIdentityKeyKept(t *testing.T) {
	dir := t.TempDir()
	key, err := IdentityKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := IdentityKey(dir)
	if !key.Equal(again) {
		t.Fatal("the identity key changed between runs")
	}
}

// peers trust takes what --peer takes: an agent id, a unique prefix of
// one, or the name of one peer; a name two peers claim is refused with
// their ids.
func TestTrustTakesNamesAndPrefixes(t *testing.T) {
	b := &Browser{Logger: slog.New(slog.DiscardHandler), Book: filepath.Join(t.TempDir(), "book.json")}
	b.init()
	now := time.Now()
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIObwtLPffJZ9bWwA29BnIZVhfwK2Rgp19wVAfek6v0Bh"
	b.mu.Lock()
	for i, name := range []string{"build-box", "twin", "twin"} {
		p := executorPeer(name, fmt.Sprintf("%d1234567-0000-4000-8000-000000000000", i), true, 1, "archive")
		p.TrustedKey, p.URL = "", fmt.Sprintf("http://10.0.0.%d:10200", i+1)
		b.merge(&p, now)
	}
	b.mu.Unlock()
	for arg, want := range map[string]string{"build-box": "01234567-0000-4000-8000-000000000000", "11234567": "11234567-0000-4000-8000-000000000000"} {
		p, err := b.Trust(arg, key)
		if err != nil || p.AgentID != want || p.TrustedKey != key {
			t.Errorf("trust %q: %+v, %v", arg, p, err)
		}
	}
	if _, err := b.Trust("twin", key); err == nil || !strings.Contains(err.Error(), "several executors") {
		t.Errorf("trust of a name two peers claim: %v", err)
	}
}

// Attempts with auto: the n best executors that can take the task, each
// once, in auto's order; fewer than n is an error that says how many can.
func TestChooseN(t *testing.T) {
	a := executorPeer("alpha", idA, true, 2, "sshfs", "archive")
	b := executorPeer("beta", idB, true, 4, "archive")
	c := executorPeer("gamma", idC, true, 0, "sshfs", "archive")
	d := executorPeer("delta", idD, true, 1, "archive")
	d.TrustedKey = "" // not trusted: never chosen
	peers := []Peer{a, b, c, d}
	got, err := ChooseN(peers, Want{Transport: "auto"}, 2)
	if err != nil || len(got) != 2 || got[0].Name != "alpha" || got[1].Name != "beta" {
		t.Errorf("two attempts: %v, %v", got, err)
	}
	if _, err := ChooseN(peers, Want{Transport: "auto"}, 3); err == nil || !strings.Contains(err.Error(), "3 attempts asked, and 2 trusted executor(s) online can take one") {
		t.Errorf("three attempts of two: %v", err)
	}
}

// Two browsers on one book, as `peers --watch` and `peers untrust` are: a
// trust given or taken back by one is taken up by the other's next round,
// and the other's saves do not write the old trust back.
func TestTrustChangedByAnotherProcess(t *testing.T) {
	book := filepath.Join(t.TempDir(), "book.json")
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIObwtLPffJZ9bWwA29BnIZVhfwK2Rgp19wVAfek6v0Bh"
	id := "01234567-0000-4000-8000-000000000000"
	quiet := slog.New(slog.DiscardHandler)
	watcher := &Browser{Logger: quiet, Book: book, NoMDNS: true}
	if err := watcher.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	trusted := func() string {
		for _, p := range watcher.Peers() {
			if p.AgentID == id {
				return p.TrustedKey
			}
		}
		return ""
	}
	user := &Browser{Logger: quiet, Book: book, NoMDNS: true}
	if _, err := user.Trust(id, key); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Round(context.Background()); err != nil || trusted() != key {
		t.Fatalf("the watcher did not take up a trust given elsewhere: %q %v", trusted(), err)
	}
	user = &Browser{Logger: quiet, Book: book, NoMDNS: true}
	if _, err := user.Untrust(id[:8]); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Round(context.Background()); err != nil || trusted() != "" {
		t.Fatalf("the watcher still trusts a key taken back elsewhere: %q %v", trusted(), err)
	}
	if err := watcher.Save(); err != nil {
		t.Fatal(err)
	}
	if ps, _ := readBook(book); len(ps) != 1 || ps[0].TrustedKey != "" {
		t.Errorf("the watcher's save wrote the trust back: %+v", ps)
	}
	if _, err := (&Browser{Logger: quiet, Book: book}).Untrust(id); err == nil {
		t.Errorf("untrusting an executor not trusted: no error")
	}
}
