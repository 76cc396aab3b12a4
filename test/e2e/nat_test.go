package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/internal/mountinfo"
)

// addBehindNAT makes node name in a home network (192.168.77.2) behind a
// NAT router that is itself on the LAN at 10.78.0.i: the node can open
// connections to the LAN (masqueraded), and nothing on the LAN can open
// one to it — the router resets every new connection from outside, even
// from hosts given a route to the home network.
func (l *lan) addBehindNAT(name string, i int) *node {
	l.t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		l.t.Fatal("the NAT tests need nftables' nft (.ci/run installs it)")
	}
	router := l.add(name+"-nat", i)
	dir := l.t.TempDir()
	n := &node{name: name, ns: l.prefix + "-" + name, ip: "192.168.77.2",
		state: filepath.Join(dir, "state"), work: filepath.Join(dir, "work")}
	inside, outside := fmt.Sprintf("h%d", i), fmt.Sprintf("v%d", i)
	l.ip("netns", "add", n.ns)
	l.ip("link", "add", "r0", "netns", router.ns, "type", "veth", "peer", "name", inside, "netns", n.ns)
	l.ip("-n", router.ns, "addr", "add", "192.168.77.1/24", "dev", "r0")
	l.ip("-n", router.ns, "link", "set", "r0", "up")
	l.ip("-n", n.ns, "link", "set", "lo", "up")
	l.ip("-n", n.ns, "addr", "add", n.ip+"/24", "dev", inside)
	l.ip("-n", n.ns, "link", "set", inside, "up")
	l.ip("-n", n.ns, "route", "add", "default", "via", "192.168.77.1")
	if out, err := exec.Command("ip", "netns", "exec", router.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		l.t.Fatalf("ip_forward: %v\n%s", err, out)
	}
	rules := fmt.Sprintf(`table ip nat {
	chain masq {
		type nat hook postrouting priority 100;
		oifname "%[1]s" masquerade
	}
}
table inet filter {
	chain gate {
		type filter hook forward priority 0;
		ct state established,related accept
		iifname "%[1]s" reject with tcp reset
	}
}
`, outside)
	nft := exec.Command("ip", "netns", "exec", router.ns, "nft", "-f", "-")
	nft.Stdin = strings.NewReader(rules)
	if out, err := nft.CombinedOutput(); err != nil {
		l.t.Fatalf("nft: %v\n%s", err, out)
	}
	l.nodes[name] = n
	return n
}

// route gives n a route to the home network behind router's NAT, so that
// only the NAT's firewall stands between them.
func (l *lan) route(n, router *node) {
	l.ip("-n", n.ns, "route", "add", "192.168.77.0/24", "via", router.ip)
}

// TestLANReverseLiveMount: a delegator behind NAT lends a directory to an
// executor on the LAN, which cannot open a connection to it. The live
// mount in the executor's direction fails; --transport auto finds that
// out (the reachability probe), says so, and runs the live mount in
// reverse. The mount survives its connections being cut, and is torn down
// at the task's end and at the lease's expiry like a forward one, leaving
// no mount, work dir or connection behind.
func TestLANReverseLiveMount(t *testing.T) {
	slow(t)
	parallel(t)
	l := newLAN(t)
	x := l.add("x", 2)
	fails := filepath.Join(t.TempDir(), "fails")
	x.serve(t, `n=0; while :; do [ -e stop ] && break; n=$((n+1)); echo $n > count.txt || echo EIO >> `+fails+`; sleep 0.05; done; echo finished > result.txt`,
		"--reconnect-bound", "3s")
	d := l.addBehindNAT("d", 9)
	l.route(x, l.nodes["d-nat"])
	peer := "http://" + x.ip + ":10200"
	sshListen := d.ip + ":2222"

	// The executor's direction: it cannot reach the delegator's SSH port.
	ws := t.TempDir()
	r := d.ctl(t, "export", ws, "--peer", peer, "--transport", "sshfs", "--prompt", "p", "--ssh-listen", sshListen)
	if r.code == 0 || !strings.Contains(r.stderr, "SETUP_FAILED") {
		t.Fatalf("a forward live mount through the NAT: exit %d\n%s", r.code, r.stderr)
	}

	// auto: reverse, and it says why.
	exp := d.command("awcp-ctl", "export", ws, "--peer", peer, "--prompt", "count until stopped", "--ssh-listen", sshListen)
	var stderr bytes.Buffer
	exp.Stderr = &stderr
	if err := exp.Start(); err != nil {
		t.Fatal(err)
	}
	defer exp.Process.Kill()
	counting(t, ws, 15*time.Second, &stderr)
	if !strings.Contains(stderr.String(), "transport auto: the executor cannot reach this machine's SSH port") {
		t.Fatalf("auto did not say why it went reverse:\n%s", stderr.String())
	}
	// Cut every connection at the executor's port (the mount's and the
	// event stream's): the delegator opens new ones, the agent goes on.
	if out, err := exec.Command("ip", "netns", "exec", x.ns, "ss", "-K", "sport", "=", ":10200").CombinedOutput(); err != nil {
		t.Fatalf("ss -K: %v\n%s", err, out)
	}
	counting(t, ws, 15*time.Second, &stderr)

	// An outage longer than the bound: the router drops everything, the
	// connections are cut. A write stalls, then fails (EIO) within the
	// bound (3 s); once the way is open again the mount comes back.
	router := l.nodes["d-nat"]
	nft := func(rule string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", router.ns, "nft"}, strings.Fields(rule)...)...).CombinedOutput(); err != nil {
			t.Fatalf("nft %s: %v\n%s", rule, err, out)
		}
	}
	nft("insert rule inet filter gate drop")
	cut := time.Now()
	exec.Command("ip", "netns", "exec", x.ns, "ss", "-K", "sport", "=", ":10200").Run()
	for {
		if b, _ := os.ReadFile(fails); len(b) > 0 {
			break
		}
		if time.Since(cut) > 8*time.Second {
			t.Fatalf("no write failed within %s of the outage\n%s", time.Since(cut), x.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if el := time.Since(cut); el < time.Second {
		t.Fatalf("a write failed %s into the outage: it did not wait for the delegator", el)
	}
	nft("flush chain inet filter gate")
	nft("add rule inet filter gate ct state established,related accept")
	nft("add rule inet filter gate iifname v9 reject with tcp reset")
	counting(t, ws, 15*time.Second, &stderr)
	os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
	if err := exp.Wait(); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr.String())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "result.txt")); string(b) != "finished\n" {
		t.Fatalf("result.txt = %q\n%s", b, stderr.String())
	}
	x.nothingLeft(t, d)

	// sshfs-reverse by name, and a lease that expires mid-task.
	os.Remove(filepath.Join(ws, "stop"))
	r = d.ctl(t, "export", ws, "--peer", peer, "--transport", "sshfs-reverse", "--prompt", "count", "--ttl", "4s", "--ssh-listen", sshListen)
	if r.code == 0 || !strings.Contains(r.stderr, "EXPIRED") {
		t.Fatalf("an expiring reverse mount: exit %d\n%s", r.code, r.stderr)
	}
	x.nothingLeft(t, d)
}

// counting waits until the agent's counter in ws has moved on by three.
func counting(t *testing.T, ws string, within time.Duration, log *bytes.Buffer) {
	t.Helper()
	count := func() int {
		b, _ := os.ReadFile(filepath.Join(ws, "count.txt"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	before := count()
	for deadline := time.Now().Add(within); count() < before+3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent's counter stood at %d for %s\n%s", before, within, log)
		}
	}
}

// nothingLeft checks, within 5 s, that x has no mount and no work dir
// left, and no connection from peer.
func (x *node) nothingLeft(t *testing.T, peer *node) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		mounts := mountinfo.Under(x.work)
		dirs, _ := os.ReadDir(x.work)
		out, err := exec.Command("ip", "netns", "exec", x.ns, "ss", "-Htn", "state", "established", "sport", "=", ":10200").Output()
		if err != nil {
			t.Fatal(err)
		}
		if len(mounts) == 0 && len(dirs) == 0 && len(out) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left on the executor: mounts %v, work dirs %v, connections\n%s\nexecutor log:\n%s", mounts, dirs, out, x.log)
		}
	}
}

// TestLANReverseLiveMountSurvivesACut: the link between a delegator behind
// NAT and its executor goes down for 5 s, and every connection between
// them is reset at both ends. Once the link is back, the delegator opens
// the reverse connections again and the agent's mount works, as a
// forward mount would after the same cut.
func TestLANReverseLiveMountSurvivesACut(t *testing.T) {
	slow(t)
	parallel(t)
	l := newLAN(t)
	x := l.add("x", 2)
	x.serve(t, `n=0; while :; do [ -e stop ] && break; n=$((n+1)); echo $n > count.txt 2>/dev/null; sleep 0.05; done; echo finished > result.txt`)
	d := l.addBehindNAT("d", 9)
	l.route(x, l.nodes["d-nat"])
	ws := t.TempDir()
	exp := d.command("awcp-ctl", "export", ws, "--peer", "http://"+x.ip+":10200", "--transport", "sshfs-reverse",
		"--prompt", "count until stopped", "--ssh-listen", d.ip+":2222")
	var stderr bytes.Buffer
	exp.Stderr = &stderr
	if err := exp.Start(); err != nil {
		t.Fatal(err)
	}
	defer exp.Process.Kill()
	counting(t, ws, 15*time.Second, &stderr)

	router := l.nodes["d-nat"]
	nft := func(rule string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", router.ns, "nft"}, strings.Fields(rule)...)...).CombinedOutput(); err != nil {
			t.Fatalf("nft %s: %v\n%s", rule, err, out)
		}
	}
	for round, how := range []string{
		"the router drops everything for 5 s, every connection reset at both ends",
		"the executor's link is down for 5 s, every connection reset at both ends",
		"the delegator's router is off the LAN for 5 s, the delegator's connections reset",
		"the delegator's router is off the LAN for 5 s, no connection reset",
	} {
		// Counted before the cut, not after the restore: the mount,
		// redialling all along, may be back before this counts.
		reconnects := strings.Count(x.log.String(), "fs: reconnected to the delegator")
		switch round {
		case 0:
			nft("insert rule inet filter gate drop")
		case 1:
			l.ip("-n", l.hub, "link", "set", "p2", "down")
		case 2, 3:
			l.ip("-n", l.hub, "link", "set", "p9", "down")
		}
		if round < 2 {
			exec.Command("ip", "netns", "exec", x.ns, "ss", "-K", "sport", "=", ":10200").Run()
		}
		if round < 3 {
			exec.Command("ip", "netns", "exec", d.ns, "ss", "-K", "dport", "=", ":10200").Run()
		}
		time.Sleep(5 * time.Second)
		switch round {
		case 0:
			nft("flush chain inet filter gate")
			nft("add rule inet filter gate ct state established,related accept")
			nft("add rule inet filter gate iifname v9 reject with tcp reset")
		case 1:
			l.ip("-n", l.hub, "link", "set", "p2", "up")
		case 2, 3:
			l.ip("-n", l.hub, "link", "set", "p9", "up")
		}
		counting(t, ws, 30*time.Second, &stderr)
		if round < 3 {
			// The mount's connection was reset: the agent's writes went
			// through a new one.
			for deadline := time.Now().Add(10 * time.Second); strings.Count(x.log.String(), "fs: reconnected to the delegator") <= reconnects; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the mount did not reconnect\n%s", how, x.log)
				}
			}
		}
		t.Logf("%s: the mount is back", how)
	}
	os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
	if err := exp.Wait(); err != nil {
		t.Fatalf("export: %v\n%s\nexecutor log:\n%s", err, stderr.String(), x.log)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "result.txt")); string(b) != "finished\n" {
		t.Fatalf("result.txt = %q\n%s", b, stderr.String())
	}
	x.nothingLeft(t, d)
}

// TestLANGitTransportBehindNAT: a delegator behind NAT lends a directory
// over the git transport to an executor on the LAN, which cannot open a
// connection to it: the delegator finds that out, opens the connections
// itself, and the clone and the push go over them.
func TestLANGitTransportBehindNAT(t *testing.T) {
	parallel(t)
	l := newLAN(t)
	x := l.add("x", 2)
	x.serve(t, `echo "from behind" > nat.txt; git add nat.txt; git commit -qm nat; echo loose > loose.txt`, "--transports", "git")
	d := l.addBehindNAT("d", 9)
	l.route(x, l.nodes["d-nat"])
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"readme.txt": "hello\n"})
	r := d.ctl(t, "export", ws, "--peer", "http://"+x.ip+":10200", "--transport", "git", "--prompt", "p", "--ssh-listen", d.ip+":2222")
	if r.code != 0 {
		t.Fatalf("export --transport git behind NAT: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "cannot reach this machine's SSH port") {
		t.Errorf("the delegator did not say it went reverse:\n%s", r.stderr)
	}
	for f, want := range map[string]string{"nat.txt": "from behind\n", "loose.txt": "loose\n"} {
		if b, _ := os.ReadFile(filepath.Join(ws, f)); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	if left, _ := os.ReadDir(x.work); len(left) > 0 {
		t.Errorf("the executor kept %v", left)
	}
}
