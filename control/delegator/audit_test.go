package delegator

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// An executor that floods the audit log with operations on the longest
// names it may use (4 KiB paths, as fast as the recorder takes them)
// holds a bounded amount of the delegator's memory: the records not yet
// written are bounded in bytes, the oldest dropped and counted, and the
// store keeps the delegation's newest MaxRecords. Reported: the live
// heap's peak growth while flooding, the operations recorded per second,
// and how many of them the store holds.
func BenchmarkAuditFlood(b *testing.B) {
	store, err := lease.Open(filepath.Join(b.TempDir(), "delegator.db"), lease.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	const id = "dlg_flood"
	if err := store.CreateDelegation(&lease.Delegation{Lease: lease.Lease{ID: id, AccessMode: "rw"}}); err != nil {
		b.Fatal(err)
	}
	a := &AuditLog{Store: store, MaxRecords: 20000}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.Run(ctx) }()
	rec := a.For(id)

	base := liveHeap()
	var peak uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
	}()
	long := strings.Repeat("n", 4000)
	const ops = 1_000_000
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		for i := range ops {
			rec.Record(sshd.Op{Kind: sshd.OpRename, Path: long, To: long, Err: "no such file", At: start.Add(time.Duration(i))})
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	close(stop)
	<-sampled
	sum := a.End(id)
	cancel()
	wg.Wait()
	kept, _, err := store.AuditAfter(id, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	if len(kept) > 20000 || sum == nil || sum.Operations != uint64(ops*b.N) || sum.Dropped+uint64(len(kept)) != sum.Operations {
		b.Fatalf("kept %d, summary %+v", len(kept), sum)
	}
	b.ReportMetric(float64(peak-min(base, peak))/(1<<20), "MiB-heap-peak-growth")
	b.ReportMetric(float64(ops*b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(len(kept)), "records-kept")
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
