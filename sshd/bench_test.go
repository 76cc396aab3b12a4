package sshd

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/awcp/awcp/internal/metrics"
)

// BenchmarkLstatRoundTrip is one SFTP request and its answer over a real
// SSH connection on loopback: the floor under every metadata operation of
// the mount; with metrics on, as the daemon with --metrics-listen records
// each request.
func BenchmarkLstatRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name string
		m    Metrics
	}{{"metrics=off", nil}, {"metrics=on", metrics.New()}} {
		b.Run(tc.name, func(b *testing.B) {
			f := newFixtureWith(b, tc.m)
			dir, cred := f.lend(b, "dlg_bench", false)
			os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
			sc := f.sftp(b, "dlg_bench", cred)
			for b.Loop() {
				if _, err := sc.Lstat("/f"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadFlood is the flood of TestReadFloodIsBounded at the size of
// the attack it answers: 20,000 pipelined READs of 1 MiB, none of whose
// answers is read, then the connection dropped. It reports the most the
// process's heap grew meanwhile (the target: 64 MiB at most) and what
// was left of that growth once the session had ended.
func BenchmarkReadFlood(b *testing.B) {
	f := newFixture(b)
	dir, cred := f.lend(b, "dlg_flood", false)
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, maxReadLen), 0o644); err != nil {
		b.Fatal(err)
	}
	var peak, left uint64
	for b.Loop() {
		before := heapInUse()
		s := newFloodSession(b, f, "dlg_flood", cred)
		h := s.open("/big")
		s.reads(h, 20_000)
		for range 10 {
			time.Sleep(50 * time.Millisecond)
			peak = max(peak, heapGrowth(before))
		}
		s.ch.Close()
		f.srv.Revoke("dlg_flood") // closes the connection; the next round is granted again
		f.srv.sessions.Wait()
		f.srv.Grant("dlg_flood", Export{Dir: dir}, time.Now().Add(time.Hour))
		left = max(left, heapGrowth(before))
	}
	b.ReportMetric(float64(peak)/(1<<20), "MiB-growth")
	b.ReportMetric(float64(left)/(1<<20), "MiB-after-close")
}
