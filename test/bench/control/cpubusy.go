package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cpuSampler reads the machine's CPU time (/proc/stat) every few
// milliseconds, so that how busy the CPUs were over a window found after
// the fact can be told: INVITE → running among many started together is
// bounded below by the work of all of them over the cores there are.
type cpuSampler struct {
	stop chan struct{}
	done sync.WaitGroup

	mu      sync.Mutex
	samples []cpuSample
}

type cpuSample struct {
	at         time.Time
	busy, idle uint64 // clock ticks, all CPUs
}

func sampleCPU(every time.Duration) *cpuSampler {
	s := &cpuSampler{stop: make(chan struct{})}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if c, ok := readCPU(); ok {
				s.mu.Lock()
				s.samples = append(s.samples, c)
				s.mu.Unlock()
			}
			select {
			case <-t.C:
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

func (s *cpuSampler) end() {
	close(s.stop)
	s.done.Wait()
}

// busy is the fraction of CPU time spent busy between from and to, as
// the samples nearest outside them say; ok is false without two.
func (s *cpuSampler) busy(from, to time.Time) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a, b *cpuSample
	for i := range s.samples {
		c := &s.samples[i]
		if !c.at.After(from) {
			a = c
		}
		if b == nil && !c.at.Before(to) {
			b = c
		}
	}
	if a == nil || b == nil || b.busy+b.idle == a.busy+a.idle {
		return 0, false
	}
	return float64(b.busy-a.busy) / float64(b.busy+b.idle-a.busy-a.idle), true
}

func readCPU() (cpuSample, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuSample{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuSample{}, false
	}
	fields := strings.Fields(sc.Text()) // cpu user nice system idle iowait irq softirq steal …
	if len(fields) < 9 || fields[0] != "cpu" {
		return cpuSample{}, false
	}
	c := cpuSample{at: time.Now()}
	for i, v := range fields[1:9] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i == 3 || i == 4 { // idle, iowait
			c.idle += n
		} else {
			c.busy += n
		}
	}
	return c, true
}
