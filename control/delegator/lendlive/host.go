package lendlive

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// sshHeapFloor is how much garbage the SSH server may make before the
// collector runs. x/crypto/ssh allocates a fresh buffer for every packet
// it receives, so what an executor writes through its mount is as much
// garbage here, and with the few MiB of live heap this daemon has,
// GOGC=100 would collect every few MiB of a write — and the scavenger give
// the memory back in between, to be faulted in again. A 256 MiB write
// took 0.60–0.63 s with this floor against 0.69–0.82 s without, and a
// third less of this daemon's CPU; its peak RSS over the write rose from
// ~34 to ~47 MiB. A floor of 32 MiB gained no more and cost 16 MiB more.
const sshHeapFloor = 16 << 20

// heapFloor is live heap that is never read or written: the collector's
// goal, twice the live heap at GOGC=100, is then never under twice
// sshHeapFloor. Allocated while the heap is small, its pages come fresh
// from the OS and stay untouched, so it costs address space, not memory.
var heapFloor []byte

// SSHOptions configures StartSSH.
type SSHOptions struct {
	// StateDir holds the CA and host key (made once, 0600, in ssh/).
	// Required.
	StateDir string
	// Store is the delegator's lease store, for WatchGrants. Required.
	Store *lease.Store
	// Listen is the server's address (host:port; port 0 for a free one).
	Listen string
	// AdvertiseHost and AdvertisePort are what executors dial, if not
	// this machine's address towards each of them and the listening port.
	AdvertiseHost string
	AdvertisePort int
	// Audit, if set, keeps each delegation's audit log
	// (delegator.AuditLog), run beside the server.
	Audit Auditor
	// NoAudit records nothing: no audit log, no summary.
	NoAudit bool
	// PerAddress opens, for each delegation, a listener on the address
	// facing its executor (the daemon's way: its Listen is then loopback),
	// closed when the last delegation there ends.
	PerAddress bool
	// Metrics receives the SFTP sessions' requests. Default: none.
	Metrics sshd.Metrics
	// Resumed, if set, is closed once the delegations lent before a
	// restart are granted again; until then their certificates wait
	// (sshd.Options.Resumed). A daemon's: an export starts afresh.
	Resumed <-chan struct{}
	// Logger default slog.Default().
	Logger *slog.Logger
}

// StartSSH runs the embedded SSH server until ctx ends, with the watch of
// grants whose lease another process ended and the audit log's writer,
// and returns the live mount's delegator transport on it. wait returns
// once all three have stopped.
func StartSSH(ctx context.Context, o SSHOptions) (_ *Transport, wait func(), err error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// A GOGC or GOMEMLIMIT of the user's is their tuning (the floor would
	// count against a memory limit): it stands alone.
	if heapFloor == nil && os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		heapFloor = make([]byte, sshHeapFloor)
	}
	auth, err := sshd.LoadAuthority(o.StateDir)
	if err != nil {
		return nil, nil, err
	}
	srv, err := sshd.New(sshd.Options{Authority: auth, Logger: o.Logger, Metrics: o.Metrics, Resumed: o.Resumed})
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("the SSH server cannot listen on %s: %w", o.Listen, err)
	}
	t := &Transport{Issuer: auth, Server: srv, Host: o.AdvertiseHost, Port: ln.Addr().(*net.TCPAddr).Port, Logger: o.Logger}
	if !o.NoAudit && o.Audit != nil {
		t.Audit = o.Audit
	}
	if o.AdvertisePort != 0 {
		t.Port = o.AdvertisePort
	}
	if o.PerAddress && o.AdvertiseHost == "" {
		t.faces = newFaces(ln.Addr().(*net.TCPAddr), srv.ServeAlso)
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		if o.Audit != nil {
			o.Audit.Run(ctx)
		}
	}()
	go func() {
		defer wg.Done()
		if err := srv.Serve(ctx, ln); err != nil {
			o.Logger.Warn("ssh server", "err", err)
		}
	}()
	// Leases that end in another process (a cancel from the command line)
	// are known here only from the store.
	go func() { defer wg.Done(); WatchGrants(ctx, o.Store, srv, 2*time.Second) }()
	o.Logger.Info("ssh server listening", "addr", ln.Addr())
	return t, func() {
		wg.Wait() // the server has closed every listener, the faces' too
		if t.faces != nil {
			t.faces.closeAll()
		}
		t.Wait()
	}, nil
}
