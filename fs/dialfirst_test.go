package fs

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/awcp/awcp/sshd"
)

// Many mounts of one executor start at once (50 delegations started
// together): more handshakes from one address than the delegator's server
// takes at a time (sshd's maxPreauthPerSource) are reset, and the mounts
// meeting a reset try again rather than fail their delegation.
func TestManyMountsStartAtOnce(t *testing.T) {
	auth, err := sshd.LoadAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.New(sshd.Options{Authority: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()

	const n = 80
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		id := fmt.Sprintf("dlg_many%02d", i)
		srv.Grant(id, sshd.Export{Dir: t.TempDir()}, time.Time{})
		cred, err := auth.Issue(id, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		signer, err := CertSigner(cred.PrivateKey, cred.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		opts := Options{Addr: ln.Addr().String(), User: id, Export: sshd.Locator(id), Signer: signer,
			HostKey: auth.HostKey().PublicKey(), Logger: slog.New(slog.DiscardHandler), ReconnectBound: 3 * time.Second}
		wg.Go(func() {
			c, err := newConn(opts.withDefaults())
			if err == nil {
				c.close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if failed == 1 {
				t.Errorf("a mount failed to start: %v", err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d mounts started together failed", failed, n)
	}
}
