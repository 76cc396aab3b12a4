//go:build linux

package delegator

import (
	"context"
	"os"
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

// The attacker of issue 40 against the stored log: 200 refused lookups of
// 1 MB paths grow the store by a few MiB, not 246 MB (each record keeps
// 4 KiB of a name and says how long it was); and 320 listings after a read
// of a secret, under a bound of 300 records, leave the read in the log.
func TestAuditLogBoundedAgainstTheExecutor(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "delegator.db")
	store, err := lease.Open(dbPath, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, id := range []string{"dlg_names", "dlg_evict"} {
		if err := store.CreateDelegation(&lease.Delegation{Lease: lease.Lease{ID: id, AccessMode: "ro"}}); err != nil {
			t.Fatal(err)
		}
	}
	a := &AuditLog{Store: store, MaxRecords: 300}
	huge := strings.Repeat("n", 1<<20)
	names := a.For("dlg_names")
	for range 200 {
		names.Record(sshd.Op{At: time.Now(), Kind: sshd.OpLookup, Path: huge, Err: "hidden", Refused: true})
	}
	evict := a.For("dlg_evict")
	evict.Record(sshd.Op{At: time.Now(), Kind: sshd.OpRead, Path: ".aws/credentials", Bytes: 40})
	for range 320 {
		evict.Record(sshd.Op{At: time.Now(), Kind: sshd.OpList, Path: "."})
		a.flush() // in many batches, as a slow flood is written
	}
	a.End("dlg_names")
	a.End("dlg_evict")
	if fi, err := os.Stat(dbPath); err != nil || fi.Size() > 16<<20 {
		t.Errorf("200 lookups of 1 MB paths grew the store to %d bytes (%v)", fi.Size(), err)
	}
	recs, _, _ := store.AuditAfter("dlg_names", 0, 1)
	if len(recs) != 1 || !strings.Contains(string(recs[0].Data), "(1048576 bytes)") {
		t.Errorf("a record of a 1 MB path does not say how long it was (%d records)", len(recs))
	}
	recs, _, _ = store.AuditAfter("dlg_evict", 0, 0)
	if len(recs) != 300 || !strings.Contains(string(recs[0].Data), ".aws/credentials") {
		t.Errorf("after 320 listings the log holds %d records, the read of the secret first: %v", len(recs), len(recs) > 0 && strings.Contains(string(recs[0].Data), ".aws"))
	}
}
