// Command control measures the control plane and the archive path for make
// bench, between a real `awcp-ctl serve` and a real `awcp-fs serve` on
// loopback:
//
//   - latency: N live-mount delegations one after the other; the p50 and p99
//     of INVITE → running (the executor mounted the workspace and started the
//     agent) as the delegator's store recorded them.
//
//   - archive: one archive delegation of a workspace of -archive-mb MB in
//     -archive-files files of random (incompressible) bytes, sent, changed by
//     the agent and brought back; its time, and the CPU time and peak RSS of
//     both daemons, started afresh for it so that the peak is this round
//     trip's.
//
//   - flood: a certificate holder pipelines -flood-reads READs of 1 MiB at
//     a real `awcp-ctl serve` and reads no answer; the daemon's RSS before,
//     at its peak, and after the connection is dropped (flood.go).
//
//   - trickle: -trickle-clients clients send a body to a real `awcp-fs
//     serve` a byte at a time; when they were cut off (trickle.go).
//
//   - many: -many live-mount delegations at once, each agent walking and
//     writing its tree; what each costs both daemons in memory, goroutines
//     and descriptors, what is left once they ended, and INVITE → running
//     among them (many.go).
//
//   - attempts: -attempts attempts at one task started together from one
//     delegator: the time to all running, and the delegator's memory per
//     member (attempts.go).
//
//     go run ./test/bench/control -bin ./bin -n 100 -archive-mb 50 -archive-files 5000
package main

import (
	"bytes"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/awcp/awcp/test/bench/benchd"
)

func main() {
	bin := flag.String("bin", "bin", "directory with awcp-ctl and awcp-fs")
	n := flag.Int("n", 100, "live-mount delegations for the latency (0: skip)")
	mb := flag.Int("archive-mb", 50, "archive workspace size, MB (0: skip)")
	files := flag.Int("archive-files", 5000, "archive workspace files")
	reads := flag.Int("flood-reads", 20000, "pipelined READs of 1 MiB of the flood, never read (0: skip)")
	tricklers := flag.Int("trickle-clients", 300, "clients sending a body a byte at a time (0: skip)")
	together := flag.Int("many", 50, "live-mount delegations at once, each agent walking and writing its tree (0: skip)")
	nAttempts := flag.Int("attempts", 10, "attempts at one task started together from one delegator (0: skip)")
	flag.Parse()
	tmp, err := os.MkdirTemp("", "awcp-bench-control-")
	if err == nil {
		defer os.RemoveAll(tmp)
		if *n > 0 {
			err = latency(*bin, filepath.Join(tmp, "latency"), *n)
		}
		if err == nil && *mb > 0 {
			err = archiveRoundTrip(*bin, filepath.Join(tmp, "archive"), *mb, *files)
		}
		if err == nil && *reads > 0 {
			err = flood(*bin, filepath.Join(tmp, "flood"), *reads)
		}
		if err == nil && *tricklers > 0 {
			err = trickle(*bin, filepath.Join(tmp, "trickle"), *tricklers)
		}
		if err == nil && *together > 0 {
			err = many(*bin, filepath.Join(tmp, "many"), *together)
		}
		if err == nil && *nAttempts > 0 {
			err = attempts(*bin, filepath.Join(tmp, "attempts"), *nAttempts)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// daemons is benchd's pair, with this bench's runs of them.
type daemons struct{ *benchd.Daemons }

// start runs the daemons (benchd.Start), the executor's extra flags first,
// then the delegator's.
func start(bin, dir, agentCmd string, extra ...[]string) (*daemons, error) {
	extra = append(extra, nil, nil)
	d, err := benchd.Start(bin, dir, agentCmd, extra[0], extra[1])
	if err != nil {
		return nil, err
	}
	return &daemons{d}, nil
}

// delegate exports ws in the background and waits for the end; it returns
// the delegation's transition times.
func (d *daemons) delegate(ws, transport, prompt string) (map[string]time.Time, error) {
	idb, err := d.Run(append(append([]string{"export", ws}, d.PeerArgs()...), "--transport", transport, "--background", "--prompt", prompt)...)
	if err != nil {
		return nil, err
	}
	id := strings.TrimSpace(string(idb))
	if _, err := d.Run("output", id, "--block", "--timeout", "5m"); err != nil {
		return nil, fmt.Errorf("delegation %s did not complete: %w", id, err)
	}
	return d.transitions(id)
}

func latency(bin, dir string, n int) error {
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ws, "README"), []byte("latency\n"), 0o644); err != nil {
		return err
	}
	d, err := start(bin, dir, "true")
	if err != nil {
		return err
	}
	defer d.Stop()
	var lat []time.Duration
	for i := range n {
		at, err := d.delegate(ws, "sshfs", fmt.Sprint("latency ", i))
		if err != nil {
			return err
		}
		if at["invited"].IsZero() || at["running"].IsZero() {
			return errors.New("no invited/running transitions")
		}
		lat = append(lat, at["running"].Sub(at["invited"]))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("control plane, INVITE → running (live mount), %d delegations: p50 %s, p99 %s, max %s\n",
		n, pct(0.50).Round(100*time.Microsecond), pct(0.99).Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond))
	return nil
}

func archiveRoundTrip(bin, dir string, mb, files int) error {
	ws := filepath.Join(dir, "ws")
	size := int64(mb) << 20
	if err := fillWorkspace(ws, size, files); err != nil {
		return err
	}
	// The agent changes one file and adds one: the result carries the
	// whole workspace back, and the delegator applies the difference.
	d, err := start(bin, dir, `echo changed > f0/0 && echo new > added`)
	if err != nil {
		return err
	}
	defer d.Stop()
	ctl0, exe0 := procStat(d.Ctl.Process.Pid), procStat(d.Exe.Process.Pid)
	t0 := time.Now()
	at, err := d.delegate(ws, "archive", "archive round trip")
	if err != nil {
		return err
	}
	took := time.Since(t0)
	ctl1, exe1 := procStat(d.Ctl.Process.Pid), procStat(d.Exe.Process.Pid)
	if b, err := os.ReadFile(filepath.Join(ws, "added")); err != nil || string(b) != "new\n" {
		return fmt.Errorf("the result was not applied: added = %q, %v", b, err)
	}
	limit := 3 * size
	verdict := "ok (<= 3x the workspace)"
	if peak := max(ctl1.hwm, exe1.hwm); peak > limit {
		verdict = fmt.Sprintf("MISSED: %.1fx the workspace, target 3x", float64(peak)/float64(size))
	}
	fmt.Printf("archive round trip, %d MB in %d files: %.2f s (INVITE → running %.2f s, running → completed %.2f s)\n",
		mb, files, took.Seconds(), at["running"].Sub(at["invited"]).Seconds(), at["completed"].Sub(at["running"]).Seconds())
	fmt.Printf("  delegator: cpu %.2f s, peak RSS %d MiB (%d MiB idle); executor: cpu %.2f s, peak RSS %d MiB (%d MiB idle); %s\n",
		ctl1.cpu-ctl0.cpu, ctl1.hwm>>20, ctl0.rss>>20, exe1.cpu-exe0.cpu, exe1.hwm>>20, exe0.rss>>20, verdict)
	return nil
}

// fillWorkspace writes size bytes of random data in files files, a hundred
// to a directory.
func fillWorkspace(ws string, size int64, files int) error {
	each := size / int64(files)
	buf := make([]byte, each)
	for i := range files {
		sub := filepath.Join(ws, fmt.Sprintf("f%d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return err
			}
		}
		rand.Read(buf)
		if err := os.WriteFile(filepath.Join(sub, strconv.Itoa(i%100)), buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}

type usage struct {
	cpu      float64 // user + system seconds
	rss, hwm int64   // bytes
}

// procStat reads a process's CPU time and current and peak RSS.
func procStat(pid int) usage {
	var u usage
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i > 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 13 {
				ut, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				u.cpu = (ut + st) / 100 // USER_HZ is 100 on Linux
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			switch k {
			case "VmHWM":
				u.hwm = kb << 10
			case "VmRSS":
				u.rss = kb << 10
			}
		}
	}
	return u
}
