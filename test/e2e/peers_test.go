package e2e

import (
	"strings"
	"testing"
)

// TestPeerTrustedByURLIsOnline: an executor trusted by its URL (no mDNS,
// no DNS: nothing advertises it) is online in `awcp-ctl peers` while it
// answers there — as doctor and export find it — and offline once it
// stops; the list shows its URL.
func TestPeerTrustedByURLIsOnline(t *testing.T) {
	x := startTLSExecutor(t, "true")
	c := newCtl(t)
	c.tls = true
	if r := c.run("peers", "trust", "https://"+x.addr, "--key", x.key(t)); r.code != 0 {
		t.Fatalf("peers trust: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	row := func() string {
		r := c.run("peers", "--browse-window", "200ms")
		return firstLineWith(r.stdout, "https://"+x.addr)
	}
	if line := row(); !strings.Contains(line, " online ") || !strings.Contains(line, "trusted") {
		t.Errorf("a trusted executor answering at its URL: %q", line)
	}
	x.cmd.Process.Kill()
	x.cmd.Wait()
	if line := row(); !strings.Contains(line, "offline") {
		t.Errorf("a trusted executor that stopped: %q", line)
	}
	x.start(t, x.addr) // for the cleanup's stop
}
