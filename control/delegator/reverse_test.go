//go:build linux

package delegator_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// closedPort is a TCP port of 127.0.0.1 nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// TestReverseLiveMount: the executor cannot reach the delegator's SSH port
// (the delegator advertises one nothing listens on), so --transport auto
// runs the live mount in reverse, and says why. The mount goes on after
// its connections are cut (by the kernel: ss -K), and at cancel every
// connection ends and nothing is left on either side.
func TestReverseLiveMount(t *testing.T) {
	f := newLiveFixture(t, `n=0; while :; do n=$((n+1)); echo $n > count.txt; cat a.txt > seen.txt; sleep 0.05; done`)
	f.rec.Port = closedPort(t)
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "count"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := f.dlg.Run(context.Background(), d.ID); done <- end }()
	f.waitRunning(t, d.ID)
	cur, _ := f.store.Delegation(d.ID)
	if cur.Transport != control.TransportSSHFS || cur.Connect != control.ConnectReverse {
		t.Fatalf("transport %s, connect %q; notes %q", cur.Transport, cur.Connect, cur.Notes)
	}
	if !strings.Contains(strings.Join(cur.Notes, "\n"), "transport auto: the executor cannot reach this machine's SSH port (cannot connect") {
		t.Fatalf("auto did not say why it went reverse: %q", cur.Notes)
	}
	counted := func(within time.Duration) int {
		t.Helper()
		before := readCount(t, f.dir)
		for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
			if n := readCount(t, f.dir); n > before+2 {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("the agent's counter stood at %d for %s", before, within)
			}
		}
	}
	counted(5 * time.Second)

	// Cut every connection to the executor's port: the tunnel (and the
	// event stream). The delegator opens a new one; the mount goes on.
	u, _ := url.Parse(f.exec.URL())
	if out, err := exec.Command("ss", "-K", "dport", "=", ":"+u.Port()).CombinedOutput(); err != nil {
		t.Fatalf("ss -K: %v\n%s", err, out)
	}
	counted(10 * time.Second)

	if _, err := f.dlg.Cancel(context.Background(), d.ID); err != nil {
		t.Fatal(err)
	}
	if end := <-done; end.State != lease.Cancelled {
		t.Fatalf("ended %s", end.State)
	}
	for i := 0; len(f.mountsLeft()) > 0; i++ {
		if i > 100 {
			t.Fatalf("mounts left: %v", f.mountsLeft())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, ok := f.mount.TunnelSlot(d.ID); ok {
		t.Fatal("the executor still takes reverse connections for an ended delegation")
	}
	delegator.CloseIdleConnections() // the delegator's, for its requests
	if n := established(t, u.Port()); n != 0 {
		t.Fatalf("%d connections to the executor's port are left", n)
	}
}

func readCount(t *testing.T, dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "count.txt"))
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// established counts this machine's TCP connections to port, waiting up to
// 2 s for them to go.
func established(t *testing.T, port string) int {
	t.Helper()
	n := 0
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("ss", "-Htn", "state", "established", "dport", "=", ":"+port).Output()
		if err != nil {
			t.Fatal(err)
		}
		n = strings.Count(string(out), "\n")
		if n == 0 || time.Now().After(deadline) {
			return n
		}
	}
}

// TestTunnelEndpointRefusesWithoutProof: while a reverse mount waits for
// connections, the tunnel endpoint upgrades only a request signed by the
// delegator's host key, for this delegation, made now; anything else is
// refused before the connection is taken, and the mount goes on.
func TestTunnelEndpointRefusesWithoutProof(t *testing.T) {
	f := newLiveFixture(t, `while :; do cat a.txt > seen.txt; sleep 0.05; done`)
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "loop", Transport: delegator.TransportSSHFSReverse})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := f.dlg.Run(context.Background(), d.ID); done <- end }()
	f.waitRunning(t, d.ID)

	unknown := control.NewDelegationID()
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	stranger, _ := gossh.NewSignerFromKey(other)
	host := f.auth.HostKey()
	sign := func(s gossh.Signer, id string, at time.Time) string {
		p, err := control.SignTunnel(s, id, at)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, id, proof string
		upgrade         bool
		want            int
	}{
		{"no proof", d.ID, "", true, http.StatusUnauthorized},
		{"another key", d.ID, sign(stranger, d.ID, time.Now()), true, http.StatusUnauthorized},
		{"another delegation's proof", d.ID, sign(host, unknown, time.Now()), true, http.StatusUnauthorized},
		{"an old proof", d.ID, sign(host, d.ID, time.Now().Add(-10*time.Minute)), true, http.StatusUnauthorized},
		{"garbage", d.ID, "17.%%%", true, http.StatusUnauthorized},
		{"no upgrade", d.ID, sign(host, d.ID, time.Now()), false, http.StatusUpgradeRequired},
		{"no reverse mount", unknown, sign(host, unknown, time.Now()), true, http.StatusNotFound},
	} {
		req, _ := http.NewRequest(http.MethodGet, f.exec.URL()+control.TunnelPath(c.id), nil)
		if c.upgrade {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", control.TunnelUpgrade)
		}
		req.Header.Set(control.TunnelProofHeader, c.proof)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: HTTP %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	// The mount still works: the agent's copy follows an edit.
	agentFollows(t, f, "after the attempts\n", 5*time.Second)
	if _, err := f.dlg.Cancel(context.Background(), d.ID); err != nil {
		t.Fatal(err)
	}
	if end := <-done; end.State != lease.Cancelled {
		t.Fatalf("ended %s", end.State)
	}
}

// TestSilentEventStreamIsLost: an executor that answers the keep-alive
// header and then sends nothing (a network outage that ate the reset)
// is taken as unreachable after three intervals, not waited for as long
// as TCP keeps the connection; one that does not answer the header (the
// reference's) is read for as long as it sends.
func TestSilentEventStreamIsLost(t *testing.T) {
	slow(t)
	var answers atomic.Bool
	answers.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(control.KeepAliveHeader) != "3" {
			t.Errorf("asked for keep-alives every %q s", r.Header.Get(control.KeepAliveHeader))
		}
		if answers.Load() {
			w.Header().Set(control.KeepAliveHeader, "1")
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(4 * time.Second):
		}
	}))
	defer srv.Close()
	pc := &delegator.PeerClient{BaseURL: srv.URL, PlainHTTP: true}
	id := control.NewDelegationID()
	start := time.Now()
	err := pc.Events(context.Background(), id, 0, func(uint64, *control.Event) error { return nil })
	if el := time.Since(start); err == nil || !strings.Contains(err.Error(), "silent for 3s") || el > 5*time.Second {
		t.Fatalf("a silent stream: %v after %s", err, el)
	}
	answers.Store(false)
	start = time.Now()
	pc.Events(context.Background(), id, 0, func(uint64, *control.Event) error { return nil })
	if el := time.Since(start); el < 3900*time.Millisecond {
		t.Fatalf("a stream without the keep-alive answer was given up after %s", el)
	}
}

// rawTunnel opens a tunnel to the executor by hand, with a valid proof,
// writing extra right behind the request; it returns the connection and
// the status line of the answer ("" if the executor closed it first).
// agentFollows writes text to a.txt on the delegator's side and waits,
// up to within, for the agent — which copies a.txt to seen.txt through
// its mount — to have copied it: the mount still works.
func agentFollows(t *testing.T, f *liveFixture, text string, within time.Duration) {
	t.Helper()
	os.WriteFile(filepath.Join(f.dir, "a.txt"), []byte(text), 0o644)
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(f.dir, "seen.txt")); string(b) == text {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never saw %q through its mount", text)
		}
	}
}

func rawTunnel(t *testing.T, f *liveFixture, id string, extra string) (net.Conn, string) {
	t.Helper()
	u, _ := url.Parse(f.exec.URL())
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	proof, err := control.SignTunnel(f.auth.HostKey(), id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s: %s\r\n\r\n%s",
		control.TunnelPath(id), u.Host, control.TunnelUpgrade, control.TunnelProofHeader, proof, extra)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return c, strings.TrimSpace(line)
}

// TestParkedTunnelsAreBounded: whoever holds a valid proof (a replay, say)
// parks at most one connection per delegation at the executor — a newer
// one replaces the older, which is closed — and one that speaks before the
// executor says go is dropped without an answer. The delegator parks again
// and the mount goes on.
func TestParkedTunnelsAreBounded(t *testing.T) {
	f := newLiveFixture(t, `while :; do cat a.txt > seen.txt; sleep 0.05; done`)
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "loop", Transport: delegator.TransportSSHFSReverse})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := f.dlg.Run(context.Background(), d.ID); done <- end }()
	f.waitRunning(t, d.ID)

	if _, line := rawTunnel(t, f, d.ID, "SSH-2.0-early\r\n"); line != "" {
		t.Errorf("a request with bytes behind it was answered %q, want the connection closed", line)
	}
	first, line := rawTunnel(t, f, d.ID, "")
	if line != "HTTP/1.1 101 Switching Protocols" {
		t.Fatalf("a valid upgrade: %q", line)
	}
	if _, line := rawTunnel(t, f, d.ID, ""); line != "HTTP/1.1 101 Switching Protocols" {
		t.Fatalf("a second valid upgrade: %q", line)
	}
	// The first is replaced: closed, after no more than its pings.
	first.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, first); err != nil {
		t.Errorf("the replaced parked connection was not closed: %v", err)
	}

	agentFollows(t, f, "after the parking\n", 10*time.Second)
	if _, err := f.dlg.Cancel(context.Background(), d.ID); err != nil {
		t.Fatal(err)
	}
	<-done
}
