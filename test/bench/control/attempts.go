package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// attempts starts n attempts at one task together from one delegator
// (`awcp-ctl export --peer X` n times over, staged, through the daemon),
// each agent waiting on a gate, and prints the time from the command to
// all n running, and what the delegator's daemon holds per member (its
// resident memory with them running, over its idle figure).
func attempts(bin, dir string, n int) error {
	gate := filepath.Join(dir, "gate")
	agent := `while [ ! -e ` + gate + ` ]; do sleep 0.1; done; echo done > done.txt`
	d, err := start(bin, dir, agent, []string{"--max-concurrent", strconv.Itoa(n), "--sandbox-allow", dir + ":ro", "--plain-http"})
	if err != nil {
		return err
	}
	defer d.Stop()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return err
	}
	for i := range 100 {
		os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%03d.txt", i)), []byte("content\n"), 0o644)
	}
	peer := strings.Replace(d.Peer, "https://", "http://", 1)
	if _, err := d.Run("status"); err != nil { // the daemon answers
		return err
	}
	time.Sleep(300 * time.Millisecond)
	idle := procStat(d.Ctl.Process.Pid)
	args := []string{"export", ws, "--plain-http", "--prompt", "attempt", "--transport", "archive", "--background"}
	for range n {
		args = append(args, "--peer", peer)
	}
	t0 := time.Now()
	if _, err := d.Run(args...); err != nil {
		return err
	}
	var allRunning time.Duration
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		out, err := d.Run("status", "--json")
		if err != nil {
			return err
		}
		var ds []struct {
			State string `json:"state"`
		}
		json.Unmarshal(out, &ds)
		running := 0
		for _, x := range ds {
			if x.State == "running" {
				running++
			}
		}
		if running == n {
			allRunning = time.Since(t0)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("attempts: %d of %d running after 2 minutes", running, n)
		}
	}
	busy := procStat(d.Ctl.Process.Pid)
	os.WriteFile(gate, nil, 0o644)
	fmt.Printf("attempts: %d started together: all running %v after the command; the delegator's RSS %d KiB idle, %d KiB with them (%d KiB each)\n",
		n, allRunning.Round(time.Millisecond), idle.rss>>10, busy.rss>>10, (busy.rss-idle.rss)>>10/int64(n))
	return nil
}
