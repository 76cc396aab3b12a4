package main

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/awcp/awcp/internal/httpserve"
)

// trickle is the slow-body attack of issue 24 on a real `awcp-fs serve`:
// clients (more than the executor's connection cap) each send the headers
// of a POST and then its body a byte every 200 ms, and never finish. It
// prints when the executor cut them off (target: each within 60 s of being
// served; those past the cap wait their turn) and how much its RSS grew.
func trickle(bin, dir string, clients int) error {
	d, err := start(bin, dir, "true", []string{"--plain-http"}) // the body trickles in HTTP itself, not in a TLS handshake
	if err != nil {
		return err
	}
	defer d.Stop()
	u, err := url.Parse(d.Peer)
	if err != nil {
		return err
	}
	addr := u.Host // plain HTTP beside TLS on the same port
	pid := d.Exe.Process.Pid
	before := procStat(pid).rss
	start := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		cuts []time.Duration
	)
	const giveUp = 150 * time.Second
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprint(c, "POST /awcp HTTP/1.1\r\nHost: bench\r\nContent-Length: 1000000\r\n\r\n{")
			buf := make([]byte, 512)
			for time.Since(start) < giveUp {
				c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				n, err := c.Read(buf)
				if n > 0 || (err != nil && !isTimeout(err)) {
					break // answered (408) or closed: cut off
				}
				if _, err := c.Write([]byte(" ")); err != nil {
					break
				}
			}
			mu.Lock()
			cuts = append(cuts, time.Since(start))
			mu.Unlock()
		}()
	}
	var peak int64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(500 * time.Millisecond):
			peak = max(peak, procStat(pid).rss)
		}
	}
	if len(cuts) < clients {
		return fmt.Errorf("trickle: %d of %d clients could not connect to %s", clients-len(cuts), clients, addr)
	}
	slices.Sort(cuts)
	served := min(clients, httpserve.MaxConns) // the rest wait for a free connection
	verdict := "ok (within 60 s)"
	switch {
	case cuts[len(cuts)-1] >= giveUp:
		verdict = "MISSED: some were never cut"
	case cuts[served-1] > 60*time.Second:
		verdict = "MISSED: target 60 s"
	}
	fmt.Printf("trickle, %d clients sending a body a byte at a time to awcp-fs serve: the first %d cut by %.1f s, the last by %.1f s, %s; RSS %d MiB before, %d MiB at peak\n",
		clients, served, cuts[served-1].Seconds(), cuts[len(cuts)-1].Seconds(), verdict, before>>20, peak>>20)
	return nil
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
