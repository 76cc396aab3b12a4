package executor_test

import (
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
)

// TestTunnelRequestHeldOncePerDelegation: a tunnel request for a
// delegation accepted here whose START has not come is held — its proof
// cannot be checked before the host key comes with START — but one per
// delegation only, and for a bounded time: a second at once is answered
// 404, and the held one 404 once the wait is over. Nothing is held for a
// delegation never invited.
func TestTunnelRequestHeldOncePerDelegation(t *testing.T) {
	executor.SetTunnelSlotWait(t, 700*time.Millisecond)
	x := executortest.New(t, "true", func(o *executor.Options) {
		o.Transports = []control.ExecutorTransport{&executor.SSHFSExecutor{Logger: slog.New(slog.DiscardHandler)}}
	})
	id := control.NewDelegationID()
	inv := invite(id)
	inv.Requirements = &control.Requirements{Transport: control.TransportSSHFS, Connect: control.ConnectReverse}
	var acc control.Accept
	if err := x.Post(t.Context(), inv, &acc); err != nil || acc.ExecutorConstraints == nil || acc.ExecutorConstraints.Connect != control.ConnectReverse {
		t.Fatalf("INVITE asking for the reverse mount: %v %+v", err, acc.ExecutorConstraints)
	}
	ask := func(id string) (int, time.Duration) {
		req, _ := http.NewRequest(http.MethodGet, x.URL()+control.TunnelPath(id), nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", control.TunnelUpgrade)
		req.Header.Set(control.TunnelProofHeader, "0.AAAA")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, 0
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	var wg sync.WaitGroup
	var heldCode int
	var heldFor time.Duration
	wg.Add(1)
	go func() { defer wg.Done(); heldCode, heldFor = ask(id) }()
	time.Sleep(200 * time.Millisecond) // the first is held by now
	if code, took := ask(id); code != http.StatusNotFound || took > 300*time.Millisecond {
		t.Errorf("a second request while one is held: HTTP %d after %s, want 404 at once", code, took)
	}
	wg.Wait()
	if heldCode != http.StatusNotFound || heldFor < 600*time.Millisecond || heldFor > 3*time.Second {
		t.Errorf("the held request: HTTP %d after %s, want 404 after the 700 ms wait", heldCode, heldFor)
	}
	if code, took := ask(control.NewDelegationID()); code != http.StatusNotFound || took > 300*time.Millisecond {
		t.Errorf("a delegation never invited: HTTP %d after %s, want 404 at once", code, took)
	}
}
