package lendlive

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/sshd"
)

// 16. A malicious executor answers every tunnel upgrade with 101 and at
// once tells the delegator its connection is taken, then never speaks
// SSH. The delegator's keeper holds at most 8 such
// connections and backs off; it does not park connection after
// connection (19,012 descriptors in 20 s before).
func TestReverseKeeperBoundedAgainstASilentExecutor(t *testing.T) {
	slow(t)
	opened, peak := againstSilentExecutor(t, 5*time.Second)
	if peak > maxTunnelServing+1 {
		t.Errorf("%d connections to a silent executor were held at once, want at most %d", peak, maxTunnelServing+1)
	}
	if opened > 4*maxTunnelServing {
		t.Errorf("%d connections were opened in 5 s to an executor that never speaks SSH", opened)
	}
	t.Logf("opened %d, at most %d at once", opened, peak)
}

// BenchmarkReverseSilentExecutor reports the connections a delegation's
// keeper opens in 5 s to an executor that takes each and never speaks
// SSH, and the most held at once (targets: 4× and 1× maxTunnelServing).
func BenchmarkReverseSilentExecutor(b *testing.B) {
	var opened, peak int64
	for b.Loop() {
		opened, peak = againstSilentExecutor(b, 5*time.Second)
	}
	b.ReportMetric(float64(opened), "conns-opened")
	b.ReportMetric(float64(peak), "conns-held")
}

// againstSilentExecutor runs a reverse keeper for d against an executor
// that answers every upgrade with 101 and TunnelGo and then says nothing.
func againstSilentExecutor(t testing.TB, d time.Duration) (opened, peak int64) {
	auth, err := sshd.LoadAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.New(sshd.Options{Authority: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var openedN, open, peakN atomic.Int64
	var mu sync.Mutex
	var held []func()
	exec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		openedN.Add(1)
		if n := open.Add(1); n > peakN.Load() {
			peakN.Store(n)
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + control.TunnelUpgrade + "\r\n\r\n")
		brw.WriteByte(control.TunnelGo)
		brw.Flush()
		mu.Lock()
		held = append(held, func() { conn.Close() })
		mu.Unlock()
		go func() { // says nothing; notices the delegator's close
			buf := make([]byte, 4096)
			for {
				if _, err := conn.Read(buf); err != nil {
					open.Add(-1)
					return
				}
			}
		}()
	}))
	defer exec.Close()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c()
		}
		mu.Unlock()
	}()
	tr := &Transport{Issuer: auth, Server: srv, Port: 1, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	lent := control.Lent{ID: "dlg_silent", Peer: exec.URL, Reverse: true, LocalDir: t.TempDir(), ExpiresAt: time.Now().Add(time.Hour)}
	srv.Grant(lent.ID, sshd.Export{Dir: lent.LocalDir}, lent.ExpiresAt)
	if err := tr.keep(ctx, lent); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	cancel()
	tr.stopKeeping(lent.ID)
	return openedN.Load(), peakN.Load()
}
