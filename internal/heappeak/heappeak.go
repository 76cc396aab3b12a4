// Package heappeak measures, for benchmarks, how far a process's heap grew
// while something ran: the peak of the heap in use, sampled every 2 ms,
// over what it was when the measure began.
package heappeak

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Start collects garbage, notes the heap in use, and samples it until the
// returned stop is called; stop gives the peak's growth, in MiB.
func Start() (stop func() float64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() float64 {
		close(done)
		<-sampled
		return float64(peak.Load()-min(peak.Load(), before.HeapInuse)) / (1 << 20)
	}
}
