package stage

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/awcp/awcp/archive"
)

// BenchmarkAreaHeld is what an area at its bound holds in memory: the
// journal's MaxTouched paths touched (each with the owner's entry, as a
// file changed in place has) and as many deleted, with paths of a deep
// tree's length.
func BenchmarkAreaHeld(b *testing.B) {
	var held uint64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		a, err := Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		for i := range MaxTouched {
			p := fmt.Sprintf("src/module%03d/package%03d/file%06d.go", i%1000, i%997, i)
			a.Touch(p, &archive.Entry{Kind: archive.KindFile, Perm: 0o644, Size: 4096, Hash: fmt.Sprintf("%064x", i)})
			a.Delete(p + ".orig")
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held = after.HeapAlloc - before.HeapAlloc
		runtime.KeepAlive(a)
		a.Close()
	}
	b.ReportMetric(float64(held)/(1<<20), "MiB-held")
	b.ReportMetric(float64(held)/float64(MaxTouched), "B/path")
}
