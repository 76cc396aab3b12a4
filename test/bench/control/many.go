package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// many runs n live-mount delegations at once between one awcp-ctl serve
// and one awcp-fs serve, each agent walking its tree and writing to it
// until released, twice, and prints what each costs the two daemons —
// resident memory, heap in use, goroutines, open descriptors — while they
// all run (over an idle baseline), what is left once they ended, after
// each round (a second round that leaves more than the first would be a
// leak), and the p50/p99 of INVITE → running among them, step by step,
// with how busy the machine's CPUs were meanwhile.
func many(bin, dir string, n int) error {
	gateFile := filepath.Join(dir, "gate-name") // names the round's gate
	agent := `gate=$(cat ` + gateFile + `); while [ ! -e "$gate" ]; do find . -type f | wc -l > count.txt; date >> walked.log; sleep 0.2; done`
	metrics := [2]string{freeAddr(), freeAddr()} // delegator's, executor's
	d, err := start(bin, dir, agent, []string{"--metrics-listen", metrics[1], "--max-concurrent", strconv.Itoa(n),
		"--sandbox-allow", dir + ":ro"}, []string{"--metrics-listen", metrics[0]})
	if err != nil {
		return err
	}
	defer d.Stop()
	var ws []string
	for i := range n {
		w := filepath.Join(dir, fmt.Sprintf("ws%02d", i))
		for j := range 10 {
			sub := filepath.Join(w, fmt.Sprintf("d%d", j))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return err
			}
			for k := range 10 {
				os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d.txt", k)), []byte("content\n"), 0o644)
			}
		}
		ws = append(ws, w)
	}
	time.Sleep(500 * time.Millisecond)
	base := scrapeBoth(metrics)
	var lat []time.Duration
	var busy [2]sample
	var after [][2]sample
	var phases [3][]time.Duration // invited → accepted → started → running
	var windows []string
	cpu := sampleCPU(20 * time.Millisecond)
	defer cpu.end()
	for round := range 2 {
		gate := filepath.Join(dir, fmt.Sprint("gate", round))
		if err := os.WriteFile(gateFile, []byte(gate), 0o644); err != nil {
			return err
		}
		for _, w := range ws {
			os.Remove(filepath.Join(w, "walked.log"))
		}
		ats, b, err := manyRound(d, ws, gate, metrics)
		if err != nil {
			return err
		}
		busy = b
		var first, last time.Time
		for _, at := range ats {
			lat = append(lat, at["running"].Sub(at["invited"]))
			for i, step := range []string{"invited", "accepted", "started"} {
				next := []string{"accepted", "started", "running"}[i]
				phases[i] = append(phases[i], at[next].Sub(at[step]))
			}
			if first.IsZero() || at["invited"].Before(first) {
				first = at["invited"]
			}
			if at["running"].After(last) {
				last = at["running"]
			}
		}
		if f, ok := cpu.busy(first, last); ok {
			windows = append(windows, fmt.Sprintf("%s at %.0f%% of the CPUs", last.Sub(first).Round(time.Millisecond), 100*f))
		} else {
			windows = append(windows, fmt.Sprintf("%s (CPU not sampled: %s to %s)", last.Sub(first).Round(time.Millisecond), first, last))
		}
		time.Sleep(6 * time.Second) // connections closed, mounts gone, their memory given back
		after = append(after, scrapeBoth(metrics))
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		ds = slices.Sorted(slices.Values(ds))
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(time.Millisecond)
	}
	fmt.Printf("%d live delegations at once, each agent walking and writing its tree through its mount, two rounds:\n", n)
	fmt.Printf("  INVITE → running, started together: p50 %s, p99 %s\n", pct(lat, 0.5), pct(lat, 0.99))
	for i, step := range []string{"INVITE → ACCEPT", "ACCEPT → START", "START → running (mounted)"} {
		fmt.Printf("    %s: p50 %s, p99 %s\n", step, pct(phases[i], 0.5), pct(phases[i], 0.99))
	}
	fmt.Printf("    from the first INVITE to the last running, each round: %s\n", strings.Join(windows, "; "))
	for i, who := range []string{"delegator (awcp-ctl serve)", "executor (awcp-fs serve)"} {
		b, m := base[i], busy[i]
		fmt.Printf("  %s: per delegation %.2f MiB RSS (%.2f MiB heap in use), %.0f goroutines, %.1f descriptors; idle %d MiB RSS, %d goroutines, %d fds\n",
			who, float64(m.rss-b.rss)/float64(n)/(1<<20), float64(m.heap-b.heap)/float64(n)/(1<<20),
			float64(m.goroutines-b.goroutines)/float64(n), float64(m.fds-b.fds)/float64(n), b.rss>>20, b.goroutines, b.fds)
		for r, a := range after {
			fmt.Printf("    after round %d ended: %d MiB RSS, %d goroutines, %d fds\n", r+1, a[i].rss>>20, a[i].goroutines, a[i].fds)
		}
	}
	return nil
}

// manyRound starts a delegation of each of ws at once, waits until every
// agent has walked its tree, samples both daemons, opens gate and waits
// for every delegation to complete. It returns their transition times.
func manyRound(d *daemons, ws []string, gate string, metrics [2]string) ([]map[string]time.Time, [2]sample, error) {
	n := len(ws)
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := d.Run(append(append([]string{"export", ws[i]}, d.PeerArgs()...), "--transport", "sshfs", "--background", "--ttl", "30m",
				"--prompt", fmt.Sprint("walk ", i))...)
			ids[i], errs[i] = strings.TrimSpace(string(out)), err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, [2]sample{}, err
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		walked, _ := filepath.Glob(filepath.Join(filepath.Dir(ws[0]), "ws*", "walked.log"))
		if len(walked) == n {
			break
		}
		if time.Now().After(deadline) {
			st, _ := d.Run("status")
			return nil, [2]sample{}, fmt.Errorf("only %d of %d agents walked their trees:\n%s", len(walked), n, st)
		}
	}
	time.Sleep(2 * time.Second) // a few more walks each
	busy := scrapeBoth(metrics)
	os.WriteFile(gate, nil, 0o644)
	var ats []map[string]time.Time
	for _, id := range ids {
		if _, err := d.Run("output", id, "--block", "--timeout", "2m"); err != nil {
			out, _ := d.Run("status", id, "--json")
			return nil, busy, fmt.Errorf("delegation %s did not complete: %w\n%s", id, err, out)
		}
		at, err := d.transitions(id)
		if err != nil {
			return nil, busy, err
		}
		ats = append(ats, at)
	}
	return ats, busy, nil
}

func scrapeBoth(addrs [2]string) [2]sample { return [2]sample{scrape(addrs[0]), scrape(addrs[1])} }

// sample is what a daemon's /metrics says of its process.
type sample struct{ rss, heap, goroutines, fds int64 }

func scrape(addr string) sample {
	var s sample
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch name {
		case "process_resident_memory_bytes":
			s.rss = int64(f)
		case "go_memstats_heap_inuse_bytes":
			s.heap = int64(f)
		case "go_goroutines":
			s.goroutines = int64(f)
		case "process_open_fds":
			s.fds = int64(f)
		}
	}
	return s
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer ln.Close()
	return ln.Addr().String()
}

// transitions are delegation id's transition times, by state reached.
func (d *daemons) transitions(id string) (map[string]time.Time, error) {
	raw, err := d.Run("status", id, "--json")
	if err != nil {
		return nil, err
	}
	var st struct {
		State       string `json:"state"`
		Transitions []struct {
			To string    `json:"to"`
			At time.Time `json:"at"`
		} `json:"transitions"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, err
	}
	if st.State != "completed" {
		return nil, fmt.Errorf("delegation %s ended %s", id, st.State)
	}
	at := map[string]time.Time{}
	for _, tr := range st.Transitions {
		at[tr.To] = tr.At
	}
	return at, nil
}
