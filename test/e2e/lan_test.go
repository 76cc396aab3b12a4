package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/discovery"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// lan is a LAN of network namespaces: each node has one address on a
// bridge that lives in a namespace of its own, so that multicast goes
// only between the nodes, never to the machine's network.
type lan struct {
	t      *testing.T
	prefix string // of every namespace name, unique to this test
	hub    string
	nodes  map[string]*node
}

type node struct {
	name  string // the executor's --name
	ns    string
	ip    string
	state string // shared by its awcp-fs and every awcp-ctl run in it: one agent
	work  string
	fs    *exec.Cmd
	log   *bytes.Buffer
}

// newLAN builds the namespaces, or fails where that cannot be done (not
// root, no iproute2): the tests need real multicast between hosts.
func newLAN(t *testing.T) *lan {
	t.Helper()
	// Never skipped: CI runs as root, and .ci/run installs iproute2.
	if os.Geteuid() != 0 {
		t.Fatal("LAN tests build network namespaces: run them as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("LAN tests need iproute2's ip (.ci/run installs it)")
	}
	// The prefix is this test's: LANs of tests running side by side
	// are namespaces of their own, each with its own hub.
	l := &lan{t: t, prefix: fmt.Sprintf("awcp%d-%d", os.Getpid()%100000, lanSeq.Add(1)), nodes: map[string]*node{}}
	l.hub = l.prefix + "-hub"
	t.Cleanup(l.remove)
	l.ip("netns", "add", l.hub)
	l.ip("-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.hub, "link", "set", "br0", "up")
	return l
}

func (l *lan) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// remove stops every process and deletes the namespaces (and with them
// their links).
func (l *lan) remove() {
	for _, n := range l.nodes {
		n.stop(l.t, syscall.SIGKILL)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, l.prefix+"-") {
			exec.Command("ip", "netns", "del", name).Run()
		}
	}
}

// lanSeq numbers this process's LANs.
var lanSeq atomic.Int32

// add makes node name, with address 10.78.0.i.
func (l *lan) add(name string, i int) *node {
	l.t.Helper()
	dir := l.t.TempDir()
	n := &node{name: name, ns: l.prefix + "-" + name, ip: fmt.Sprintf("10.78.0.%d", i),
		state: filepath.Join(dir, "state"), work: filepath.Join(dir, "work")}
	veth, peer := fmt.Sprintf("v%d", i), fmt.Sprintf("p%d", i)
	l.ip("netns", "add", n.ns)
	l.ip("link", "add", veth, "netns", n.ns, "type", "veth", "peer", "name", peer, "netns", l.hub)
	l.ip("-n", l.hub, "link", "set", peer, "master", "br0")
	l.ip("-n", l.hub, "link", "set", peer, "up")
	l.ip("-n", n.ns, "link", "set", "lo", "up")
	l.ip("-n", n.ns, "link", "set", veth, "up")
	l.ip("-n", n.ns, "addr", "add", n.ip+"/24", "dev", veth)
	l.ip("-n", n.ns, "route", "add", "224.0.0.0/4", "dev", veth)
	l.nodes[name] = n
	// Before the namespaces go (cleanups run last first): a background
	// export in n starts a daemon of its own there.
	l.t.Cleanup(func() { endDaemons(n.state) })
	return n
}

// command is bin run in n's namespace with n's state dir.
func (n *node) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.ns, filepath.Join(binDir, bin)}, args...)...)
	// Plain HTTP accepted and spoken where a test names a peer by URL;
	// peers chosen by discovery are reached over TLS whatever this says.
	cmd.Env = append(os.Environ(), "AWCP_STATE_DIR="+n.state, "AWCP_BIN_DIR="+binDir, "AWCP_PLAIN_HTTP=1")
	return cmd
}

// trust has n trust the identity keys of peers, as their owner would after
// checking them (`awcp-ctl peers trust`); n itself is skipped.
func (n *node) trust(t *testing.T, peers ...*node) {
	t.Helper()
	for _, p := range peers {
		if p == n {
			continue
		}
		id := p.agentID(t)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			r := n.ctl(t, "peers", "trust", id, "--browse-window", "1s")
			if r.code == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s cannot trust %s: %s", n.name, p.name, r.stderr)
			}
		}
	}
}

// serve starts n's executor, advertised, running agent.
func (n *node) serve(t *testing.T, agent string, extra ...string) {
	t.Helper()
	n.log = new(bytes.Buffer)
	// The agents here delegate on as their host's agent — awcp-ctl from
	// the test's binaries, with the host's state dir — and leave traces in
	// the test's temporary dirs: their sandbox grants those.
	extra = append(extra, "--sandbox-allow", binDir, "--sandbox-allow", filepath.Dir(t.TempDir())+":rw",
		"--agent-env", "AWCP_STATE_DIR", "--agent-env", "AWCP_BIN_DIR", "--agent-env", "AWCP_PLAIN_HTTP")
	n.fs = n.command("awcp-fs", append([]string{"serve", "--work-root", n.work, "--listen", n.ip + ":10200",
		"--agent-cmd", agent, "--name", n.name, "--advertise", "--log-level", "info"}, extra...)...)
	n.fs.Stderr = n.log
	out, err := n.fs.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.fs.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("awcp-fs in %s did not start: %v\n%s", n.ns, err, n.log)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("awcp-fs %s log:\n%s", n.name, n.log)
		}
	})
}

func (n *node) stop(t *testing.T, sig syscall.Signal) {
	if n.fs == nil || n.fs.Process == nil {
		return
	}
	n.fs.Process.Signal(sig)
	n.fs.Wait()
	n.fs = nil
}

// agentID is n's, as its state dir keeps it.
func (n *node) agentID(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.state, "agent-id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// ctl runs awcp-ctl in n and returns its outcome.
func (n *node) ctl(t *testing.T, args ...string) result {
	t.Helper()
	cmd := n.command("awcp-ctl", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.stderr, "panic:") {
		t.Fatalf("awcp-ctl crashed:\n%s", r.stderr)
	}
	return r
}

// peerEvent is a line of `awcp-ctl peers --watch --json`.
type peerEvent struct {
	Event string    `json:"event"`
	At    time.Time `json:"at"`
	Peer  struct {
		AgentID  string `json:"agentId"`
		Name     string `json:"name"`
		URL      string `json:"url"`
		Online   bool   `json:"online"`
		Gone     string `json:"gone"`
		Manifest *struct {
			AgentID string `json:"agent_id"`
			AWCP    struct {
				Transports []string `json:"transports"`
				FreeSlots  int      `json:"free_slots"`
			} `json:"awcp"`
		} `json:"manifest"`
	} `json:"peer"`
}

// watcher follows `awcp-ctl peers --watch --json` in a node.
type watcher struct {
	events chan peerEvent
	cmd    *exec.Cmd
}

func (n *node) watch(t *testing.T) *watcher {
	t.Helper()
	w := &watcher{events: make(chan peerEvent, 100)}
	w.cmd = n.command("awcp-ctl", "peers", "--watch", "--json", "--browse-interval", "1s", "--browse-window", "500ms")
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	w.cmd.Stderr = &errb
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev peerEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				w.events <- ev
			}
		}
		close(w.events)
	}()
	t.Cleanup(func() {
		w.cmd.Process.Signal(syscall.SIGTERM)
		w.cmd.Wait()
		if t.Failed() {
			t.Logf("peers --watch stderr:\n%s", errb.String())
		}
	})
	return w
}

// await returns the first event for which ok holds, failing after within.
func (w *watcher) await(t *testing.T, within time.Duration, what string, ok func(peerEvent) bool) peerEvent {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, open := <-w.events:
			if !open {
				t.Fatalf("peers --watch ended before %s", what)
			}
			if ok(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s within %s", what, within)
		}
	}
}

// TestLANDiscovery: executors advertised in their namespaces are found from
// another within 5 s, with their manifests; one stopped gracefully is
// offline (withdrawn) at once, one killed is offline once silent, well
// within the records' TTL; and neither is dropped from the list.
func TestLANDiscovery(t *testing.T) {
	slow(t)
	alone(t, "bounds multicast discovery at 5 s of wall clock")
	l := newLAN(t)
	d := l.add("d", 1)
	b, c := l.add("b", 2), l.add("c", 3)
	w := d.watch(t)
	start := time.Now()
	b.serve(t, "true")
	c.serve(t, "true", "--transports", "archive")
	online := map[string]peerEvent{}
	for len(online) < 2 {
		ev := w.await(t, 5*time.Second-time.Since(start), "discovery of both executors", func(ev peerEvent) bool {
			return ev.Event == "online" && ev.Peer.Manifest != nil
		})
		online[ev.Peer.Name] = ev
	}
	t.Logf("both found in %s", time.Since(start).Round(time.Millisecond))
	if ev := online["b"]; ev.Peer.AgentID != b.agentID(t) || ev.Peer.URL != "https://"+b.ip+":10200" || ev.Peer.Manifest.AgentID != b.agentID(t) {
		t.Fatalf("b found as %+v", ev.Peer)
	}
	if got := online["c"].Peer.Manifest.AWCP.Transports; len(got) != 1 || got[0] != "archive" {
		t.Fatalf("c's manifest offers %v, want [archive]", got)
	}

	b.stop(t, syscall.SIGTERM)
	stopped := time.Now()
	ev := w.await(t, 3*time.Second, "b offline after a graceful stop", func(ev peerEvent) bool { return ev.Peer.Name == "b" && !ev.Peer.Online })
	if ev.Peer.Gone != "withdrawn" {
		t.Fatalf("b gone %q after SIGTERM, want withdrawn", ev.Peer.Gone)
	}
	t.Logf("b withdrawn after %s", time.Since(stopped).Round(time.Millisecond))

	c.stop(t, syscall.SIGKILL)
	killed := time.Now()
	ev = w.await(t, 30*time.Second, "c offline after kill -9", func(ev peerEvent) bool { return ev.Peer.Name == "c" && !ev.Peer.Online })
	if ev.Peer.Gone != "silent" {
		t.Fatalf("c gone %q after kill -9, want silent", ev.Peer.Gone)
	}
	t.Logf("c offline after %s (TTL 120s)", time.Since(killed).Round(time.Millisecond))

	// A one-shot list still shows both, offline, from the book.
	r := d.ctl(t, "peers", "--json", "--browse-window", "500ms")
	var peers []struct {
		Name   string `json:"name"`
		Online bool   `json:"online"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &peers); err != nil || len(peers) != 2 || peers[0].Online || peers[1].Online {
		t.Fatalf("peers --json after both stopped: %v\n%s%s", err, r.stdout, r.stderr)
	}
	r = d.ctl(t, "peers")
	if !strings.Contains(r.stdout, "offline: withdrawn") || !strings.Contains(r.stdout, "offline: not answering") {
		t.Fatalf("peers shows:\n%s", r.stdout)
	}

	// A new watch starts from what answers now, not from the book: b,
	// back, is online in its first line about it.
	b.serve(t, "true")
	ev = d.watch(t).await(t, 10*time.Second, "b's first line in a new watch", func(ev peerEvent) bool { return ev.Peer.Name == "b" })
	if !ev.Peer.Online {
		t.Fatalf("a new watch first showed b, which answers, as %+v", ev.Peer)
	}
}

// nestingAgent is an agent that delegates on. Its prompt is "leaf", or
// "delegate:NEXT[,NEXT…]": it lends a fresh directory to NEXT (a name or
// a URL) with the rest as the prompt. Each level writes the chain it got
// and what its nested awcp-ctl said to trace.txt, after the deeper
// level's trace, so the top workspace gets the whole story back.
const nestingAgent = `
echo "chain=$AWCP_CALL_CHAIN" > trace.txt
case "$AWCP_PROMPT" in
delegate:*)
	rest=${AWCP_PROMPT#delegate:}
	next=${rest%%,*}
	if [ "$next" = "$rest" ]; then more=leaf; else more="delegate:${rest#*,}"; fi
	nest=$(mktemp -d)
	"$AWCP_BIN_DIR/awcp-ctl" export "$nest" --peer "$next" --transport archive --prompt "$more" --browse-window 1s > nested.out 2>&1
	echo "nested exit=$?" >> trace.txt
	cat nested.out >> trace.txt
	rm -f nested.out
	[ -f "$nest/trace.txt" ] && cat "$nest/trace.txt" >> trace.txt
	rm -rf "$nest"
	;;
esac
exit 0
`

// TestLANCallChain delegates through real nested delegations between
// three hosts: A→B→C works, and every circle is refused — by the executor
// (the INVITE's call chain holds it) and, when discovery knows who a name
// is, by the delegator before it asks. A person at A may use A's own
// executor; A's agent may not.
func TestLANCallChain(t *testing.T) {
	slow(t)
	parallel(t)
	l := newLAN(t)
	a, b, c := l.add("a", 1), l.add("b", 2), l.add("c", 3)
	script := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(script, []byte(nestingAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node{a, b, c} {
		n.serve(t, "sh "+script, "--transports", "archive")
	}
	for _, n := range []*node{a, b, c} {
		n.trust(t, a, b, c)
	}
	A, B, C := a.agentID(t), b.agentID(t), c.agentID(t)
	urlA := "http://" + a.ip + ":10200"

	// delegate runs, in A, a delegation to peer with prompt, and returns
	// the trace the chain of agents wrote back.
	delegate := func(t *testing.T, peer, prompt string) string {
		t.Helper()
		ws := t.TempDir()
		r := a.ctl(t, "export", ws, "--peer", peer, "--transport", "archive", "--prompt", prompt, "--browse-window", "1s")
		if r.code != 0 {
			t.Fatalf("export --peer %s %q: exit %d\n%s%s", peer, prompt, r.code, r.stdout, r.stderr)
		}
		trace, err := os.ReadFile(filepath.Join(ws, "trace.txt"))
		if err != nil {
			t.Fatalf("no trace came back: %v\n%s", err, r.stderr)
		}
		return string(trace)
	}
	mustHave := func(t *testing.T, trace string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(trace, w) {
				t.Fatalf("trace lacks %q:\n%s", w, trace)
			}
		}
	}

	t.Run("A→B→C works", func(t *testing.T) {
		trace := delegate(t, "b", "delegate:c")
		mustHave(t, trace, "chain="+A+","+B+"\n", "nested exit=0", "chain="+A+","+B+","+C+"\n")
	})
	t.Run("A→B→A is refused by A's executor", func(t *testing.T) {
		// By URL, so that B's delegator cannot know who answers there.
		trace := delegate(t, "b", "delegate:"+urlA)
		mustHave(t, trace, "chain="+A+","+B+"\n", "nested exit=1", "error DECLINED: circular call: agent "+A,
			"call chain: "+A+" → "+B)
	})
	t.Run("A→B→C→A is refused", func(t *testing.T) {
		trace := delegate(t, "b", "delegate:c,a")
		mustHave(t, trace, "nested exit=0", "chain="+A+","+B+","+C+"\n", "nested exit=1",
			"executor a ("+A+") is already in this delegation's call chain "+A+" → "+B+" → "+C)
		// And by URL, from C: A's executor refuses it.
		trace = delegate(t, "b", "delegate:c,"+urlA)
		mustHave(t, trace, "error DECLINED: circular call: agent "+A, "call chain: "+A+" → "+B+" → "+C)
	})
	t.Run("A delegates to its own executor, whose agent may not delegate back", func(t *testing.T) {
		// Both programs of one agent on one machine: a person's first try.
		trace := delegate(t, urlA, "leaf")
		mustHave(t, trace, "chain="+A+"\n")
		trace = delegate(t, urlA, "delegate:"+urlA)
		mustHave(t, trace, "chain="+A+"\n", "nested exit=1", "error DECLINED: circular call: agent "+A, "call chain: "+A+" → "+A)
		trace = delegate(t, urlA, "delegate:a")
		mustHave(t, trace, "nested exit=1", "executor a ("+A+") is already in this delegation's call chain "+A)
	})
}

// TestLANPeerAuto: --peer auto chooses, among the executors found, one
// that can mount, and the delegation runs over a live mount between hosts.
func TestLANPeerAuto(t *testing.T) {
	slow(t)
	parallel(t)
	l := newLAN(t)
	d, b, c := l.add("d", 1), l.add("b", 2), l.add("c", 3)
	b.serve(t, `echo from-auto > note.txt`)
	c.serve(t, `echo from-auto > note.txt`, "--transports", "archive")
	d.trust(t, b, c)
	ws := t.TempDir()
	r := d.ctl(t, "export", ws, "--peer", "auto", "--prompt", "leave a note", "--ssh-listen", d.ip+":0", "--browse-window", "1500ms")
	if r.code != 0 {
		t.Fatalf("export --peer auto: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "--peer auto: b ("+b.agentID(t)+") at https://"+b.ip+":10200, auto: live mount") {
		t.Fatalf("auto did not say it chose b for the live mount:\n%s", r.stderr)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "note.txt")); err != nil || string(got) != "from-auto\n" {
		t.Fatalf("note.txt = %q, %v", got, err)
	}
	var ds []struct {
		Transport   string `json:"transport"`
		PeerAgentID string `json:"peerAgentId"`
		State       string `json:"state"`
	}
	if err := json.Unmarshal([]byte(d.ctl(t, "status", "--json").stdout), &ds); err != nil || len(ds) != 1 ||
		ds[0].Transport != "sshfs" || ds[0].PeerAgentID != b.agentID(t) || ds[0].State != "completed" {
		t.Fatalf("status after auto: %+v %v", ds, err)
	}
}

// TestLANMCP: `awcp-ctl mcp --discover` lists the executors on the network
// with its peers tool and delegates to one by name; started inside a
// delegation whose chain holds that executor, it refuses.
func TestLANMCP(t *testing.T) {
	slow(t)
	parallel(t)
	l := newLAN(t)
	d, b := l.add("d", 1), l.add("b", 2)
	b.serve(t, `echo by-mcp > note.txt`, "--transports", "archive")
	d.trust(t, b)

	session := func(t *testing.T, env ...string) *mcp.ClientSession {
		cmd := d.command("awcp-ctl", "mcp", "--discover", "--browse-interval", "1s", "--browse-window", "500ms", "--transport", "archive")
		cmd.Env = append(cmd.Env, env...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			cancel()
			t.Fatalf("mcp: %v\n%s", err, errb.String())
		}
		t.Cleanup(func() {
			cs.Close()
			cancel()
			if t.Failed() {
				t.Logf("awcp-ctl mcp stderr:\n%s", errb.String())
			}
		})
		return cs
	}
	call := func(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		return text.String(), res.IsError
	}

	cs := session(t)
	var listed string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		listed, _ = call(t, cs, "peers", nil)
		if strings.Contains(listed, "b  https://"+b.ip+":10200  online  discovered  agent "+b.agentID(t)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peers never listed b online:\n%s", listed)
		}
	}
	ws := t.TempDir()
	out, failed := call(t, cs, "delegate", map[string]any{"description": "note", "prompt": "leave a note", "workspace_dir": ws, "peer_url": "b"})
	if failed || !strings.Contains(out, "completed") {
		t.Fatalf("delegate to b by name: %s", out)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "note.txt")); err != nil || string(got) != "by-mcp\n" {
		t.Fatalf("note.txt = %q, %v", got, err)
	}

	looped := session(t, "AWCP_CALL_CHAIN="+b.agentID(t))
	out, failed = call(t, looped, "delegate", map[string]any{"description": "loop", "prompt": "p", "workspace_dir": t.TempDir()})
	if !failed || !strings.Contains(out, "already in this delegation's call chain") {
		t.Fatalf("auto from inside b's chain: failed=%v %s", failed, out)
	}
}

// advertiseEnv makes this test binary, re-run inside a namespace, an
// mDNS responder that says whatever the test tells it to: the attacker on
// the link.
const advertiseEnv = "AWCP_E2E_ADVERTISE"

// advertiseAsAttacker advertises the JSON list of advertisements in spec
// until its stdin closes.
func advertiseAsAttacker(spec string) int {
	var ads []discovery.Advertisement
	if err := json.Unmarshal([]byte(spec), &ads); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, ad := range ads {
		adv, err := discovery.Advertise(ad, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer adv.Close()
	}
	// The first advertisement's manifest, served at its port: an agent is
	// recorded only once its manifest names it.
	if len(ads) > 0 {
		first := ads[0]
		// Over TLS, as every executor serves its manifest, with a key of
		// the attacker's own.
		_, key, _ := ed25519.GenerateKey(rand.Reader)
		cert, err := control.IdentityCertificate(key)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ln, err := tls.Listen("tcp", ":"+strconv.Itoa(first.Port), &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer ln.Close()
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			json.NewEncoder(w).Encode(map[string]any{"agent_id": first.AgentID, "name": first.Name, "awcp": map[string]any{"transports": []string{"archive"}}})
		}))
	}
	fmt.Println("advertising")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestLANAdvertisementCannotAimTheBrowser: an attacker on the link
// advertises an executor at the cloud metadata address. The delegator
// never lists it, never fetches from it, and cannot be sent there by name;
// the same attacker's advertisement of its own address is heard, so the
// attack did reach the delegator.
func TestLANAdvertisementCannotAimTheBrowser(t *testing.T) {
	slow(t)
	parallel(t)
	l := newLAN(t)
	d, x := l.add("d", 1), l.add("x", 9)
	const decoy, aimed = "dec0dec0-0000-4000-8000-000000000001", "a1a1a1a1-0000-4000-8000-000000000002"
	spec, _ := json.Marshal([]discovery.Advertisement{
		{AgentID: decoy, Name: "decoy", Version: "1", Port: 10200, IPs: []net.IP{net.ParseIP(x.ip)}},
		{AgentID: aimed, Name: "aimed", Version: "1", Port: 80, IPs: []net.IP{net.ParseIP("169.254.169.254")}},
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	attacker := exec.Command("ip", "netns", "exec", x.ns, self)
	attacker.Env = append(os.Environ(), advertiseEnv+"="+string(spec))
	stdin, _ := attacker.StdinPipe()
	out, _ := attacker.StdoutPipe()
	var errb bytes.Buffer
	attacker.Stderr = &errb
	if err := attacker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); attacker.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "advertising\n" {
		t.Fatalf("the attacker did not start: %q %v\n%s", line, err, errb.String())
	}

	w := d.watch(t)
	w.await(t, 5*time.Second, "the attacker's decoy", func(ev peerEvent) bool { return ev.Peer.AgentID == decoy })
	// Two more rounds, in which the aimed advertisement was answered too.
	time.Sleep(2500 * time.Millisecond)
	r := d.ctl(t, "peers", "--json", "--browse-window", "1s")
	if !strings.Contains(r.stdout, decoy) || strings.Contains(r.stdout, aimed) || strings.Contains(r.stdout, "169.254") {
		t.Fatalf("peers after the attack:\n%s", r.stdout)
	}
	r = d.ctl(t, "export", t.TempDir(), "--peer", "aimed", "--prompt", "p", "--browse-window", "1s")
	if r.code == 0 || !strings.Contains(r.stderr, `no executor called "aimed"`) {
		t.Fatalf("export --peer aimed: exit %d\n%s", r.code, r.stderr)
	}
	for seen := true; seen; {
		select {
		case ev, ok := <-w.events:
			if seen = ok; ok && ev.Peer.AgentID == aimed {
				t.Fatalf("the watcher listed the aimed advertisement: %+v", ev.Peer)
			}
		default:
			seen = false
		}
	}
}

// TestLANImpostorGetsNothing: the delegator trusts executor b. An impostor
// on the link runs a real awcp-fs that calls itself b and claims far more
// free slots. `--peer b` and `--peer auto` both go to the real b, and the
// impostor never receives an INVITE (so never a token or a credential);
// named by its own id, it is refused until the user trusts its key.
func TestLANImpostorGetsNothing(t *testing.T) {
	slow(t)
	parallel(t)
	l := newLAN(t)
	d, b, x := l.add("d", 1), l.add("b", 2), l.add("x", 9)
	b.serve(t, `echo from-b > note.txt`, "--transports", "archive", "--token-file", tokenFileFor(t))
	x.name = "b" // the squatter takes b's name
	x.serve(t, `echo from-impostor > note.txt`, "--transports", "archive", "--max-concurrent", "999")
	d.trust(t, b)
	for _, peer := range []string{"b", "auto"} {
		ws := t.TempDir()
		r := d.ctl(t, "export", ws, "--peer", peer, "--prompt", "note", "--transport", "archive", "--token-file", tokenFileFor(t), "--browse-window", "1500ms")
		if r.code != 0 {
			t.Fatalf("export --peer %s: exit %d\n%s", peer, r.code, r.stderr)
		}
		if got, _ := os.ReadFile(filepath.Join(ws, "note.txt")); string(got) != "from-b\n" {
			t.Fatalf("--peer %s reached %q", peer, got)
		}
	}
	r := d.ctl(t, "export", t.TempDir(), "--peer", x.agentID(t), "--prompt", "p", "--transport", "archive", "--browse-window", "1s")
	if r.code == 0 || !strings.Contains(r.stderr, "not trusted yet") || !strings.Contains(r.stderr, "peers trust "+x.agentID(t)) {
		t.Fatalf("export to the untrusted impostor by id: exit %d\n%s", r.code, r.stderr)
	}
	if strings.Contains(x.log.String(), "INVITE") {
		t.Fatalf("the impostor received an INVITE:\n%s", x.log.String())
	}
}

// tokenFileFor is a token file (mode 600) in the test's temp dir.
func tokenFileFor(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("lan-secret-77\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
