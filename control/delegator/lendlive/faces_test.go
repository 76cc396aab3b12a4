package lendlive

import (
	"bufio"
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// localIPv4 is an address of this machine's that is not loopback.
func localIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	t.Fatal("this machine has no IPv4 address but loopback")
	return ""
}

// The daemon's SSH server listens on loopback; a delegation to an
// executor elsewhere opens the port on the address facing it, for as long
// as it runs, and no other: nothing listens on that address before or
// after, and never on every address.
func TestServeOpensSSHOnlyFacingEachExecutor(t *testing.T) {
	state := t.TempDir()
	store, err := lease.Open(filepath.Join(state, "delegator.db"), lease.Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, stop := context.WithCancel(context.Background())
	tr, wait, err := StartSSH(ctx, SSHOptions{StateDir: state, Store: store, Listen: "127.0.0.1:0", PerAddress: true, NoAudit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); wait() }()
	ip := localIPv4(t)
	greets := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.HasPrefix(line, "SSH-2.0-")
	}
	main := net.JoinHostPort(ip, strconv.Itoa(tr.Port))
	if greets(main) {
		t.Fatalf("the SSH server answers on %s before any delegation", main)
	}
	d := control.Lent{ID: control.NewDelegationID(), LocalDir: t.TempDir(), AccessMode: control.AccessRW,
		ExpiresAt: time.Now().Add(time.Hour), Peer: "https://" + net.JoinHostPort(ip, "10200")}
	info, err := tr.Prepare(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	at := net.JoinHostPort(info.Endpoint.Host, strconv.Itoa(info.Endpoint.Port))
	if info.Endpoint.Host != ip || !greets(at) {
		t.Fatalf("the delegation's executor is sent %s, which does not greet (facing address %s)", at, ip)
	}
	if l := tr.faces.listening(); len(l) != 1 || l[0] != at {
		t.Errorf("listening on %v, want %s only", l, at)
	}
	// A second delegation to the same executor shares the listener; it
	// stays until both have ended.
	d2 := d
	d2.ID = control.NewDelegationID()
	if _, err := tr.Prepare(ctx, d2); err != nil {
		t.Fatal(err)
	}
	tr.Cleanup(ctx, d)
	if !greets(at) {
		t.Fatal("the listener closed while a delegation still used it")
	}
	tr.Cleanup(ctx, d2)
	if greets(at) {
		t.Fatalf("%s still answers after the delegations there ended", at)
	}
	if !greets(net.JoinHostPort("127.0.0.1", strconv.Itoa(tr.Port))) {
		t.Fatal("the loopback listener went too")
	}
}
