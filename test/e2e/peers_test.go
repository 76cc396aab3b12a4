package e2e

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestPeerTrustedByURLIsOnline: an executor trusted by its URL (no mDNS,
// no DNS: nothing advertises it) is online in `awcp-ctl peers` while it
// answers there — as doctor and export find it — and offline once it
// stops; the list shows its URL.
func TestPeerTrustedByURLIsOnline(t *testing.T) {
	parallel(t)
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

// TestManifestSaysHTTPS: an executor speaking TLS only advertises its
// endpoints as https://, which work as written (it said http://, which
// it refuses), and one also taking plain HTTP says http:// to a plain
// request.
func TestManifestSaysHTTPS(t *testing.T) {
	parallel(t)
	x := startTLSExecutor(t, "true")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the test reads what is advertised, not who
	var m struct{ Endpoints map[string]string }
	resp, err := client.Get("https://" + x.addr + "/manifest")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if m.Endpoints["awcp"] != "https://"+x.addr+"/awcp" {
		t.Fatalf("the TLS executor's manifest advertises %v", m.Endpoints)
	}
	resp, err = client.Get(m.Endpoints["status"])
	if err != nil {
		t.Fatalf("the advertised status endpoint does not answer as written: %v", err)
	}
	resp.Body.Close()
}
