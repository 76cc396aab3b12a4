// Command latency measures the control plane for make bench: N delegations
// with the live-mount transport, one after the other, between a real
// `awcp-ctl serve` and a real `awcp-fs serve` on loopback, and prints the
// p50 and p99 of INVITE → running (the executor mounted the workspace and
// started the agent) as the delegator's store recorded them.
//
//	go run ./test/bench/latency -bin ./bin -n 100
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("bin", "bin", "directory with awcp-ctl and awcp-fs")
	n := flag.Int("n", 100, "delegations")
	flag.Parse()
	if err := run(*bin, *n); err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		os.Exit(1)
	}
}

func run(bin string, n int) error {
	tmp, err := os.MkdirTemp("", "awcp-latency-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ws := filepath.Join(tmp, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return err
	}
	os.WriteFile(filepath.Join(ws, "README"), []byte("latency\n"), 0o644)

	exe := exec.Command(filepath.Join(bin, "awcp-fs"), "serve", "--state-dir", filepath.Join(tmp, "exec"),
		"--work-root", filepath.Join(tmp, "work"), "--listen", "127.0.0.1:0", "--agent-cmd", "true")
	out, err := exe.StdoutPipe()
	if err != nil {
		return err
	}
	if err := exe.Start(); err != nil {
		return err
	}
	defer stop(exe)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("awcp-fs did not start: %w", err)
	}
	_, peer, _ := strings.Cut(strings.TrimSpace(line), "listening on ")

	state := filepath.Join(tmp, "ctl")
	daemon := exec.Command(filepath.Join(bin, "awcp-ctl"), "serve", "--state-dir", state, "--ssh-listen", "127.0.0.1:0")
	if err := daemon.Start(); err != nil {
		return err
	}
	defer stop(daemon)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(state, "ctl.sock")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("awcp-ctl serve did not start")
		}
	}

	ctl := func(args ...string) ([]byte, error) {
		return exec.Command(filepath.Join(bin, "awcp-ctl"), append([]string{"--state-dir", state}, args...)...).Output()
	}
	var lat []time.Duration
	for i := range n {
		idb, err := ctl("export", ws, "--peer", peer, "--transport", "sshfs", "--background", "--prompt", fmt.Sprint("latency ", i))
		if err != nil {
			return fmt.Errorf("export %d: %w", i, err)
		}
		id := strings.TrimSpace(string(idb))
		if _, err := ctl("output", id, "--block", "--timeout", "30s"); err != nil {
			return fmt.Errorf("delegation %d (%s) did not complete: %w", i, id, err)
		}
		raw, err := ctl("status", id, "--json")
		if err != nil {
			return err
		}
		var d struct {
			Transitions []struct {
				To string    `json:"to"`
				At time.Time `json:"at"`
			} `json:"transitions"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		at := map[string]time.Time{}
		for _, tr := range d.Transitions {
			at[tr.To] = tr.At
		}
		if at["invited"].IsZero() || at["running"].IsZero() {
			return fmt.Errorf("delegation %s: no invited/running transitions", id)
		}
		lat = append(lat, at["running"].Sub(at["invited"]))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("control plane, INVITE → running (live mount), %d delegations: p50 %s, p99 %s, max %s\n",
		n, pct(0.50).Round(100*time.Microsecond), pct(0.99).Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond))
	return nil
}

func stop(c *exec.Cmd) {
	c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.Process.Kill()
		<-done
	}
}
