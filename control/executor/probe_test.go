package executor_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awcp/awcp/control/executor/executortest"
)

// serveConns runs each connection to ln through handle until the test
// ends, counting them.
func serveConns(t *testing.T, ln net.Listener, handle func(net.Conn)) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); handle(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return &n
}

func listen(t *testing.T, addr string) (net.Listener, int) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().(*net.TCPAddr).Port
}

func greetSSH(c net.Conn) { c.Write([]byte("SSH-2.0-test\r\n")) }

// The probe dials the address the request came from and nothing else:
// headers naming another address do not move it, so a caller cannot aim
// the executor at a third machine.
func TestProbeDialsOnlyTheCaller(t *testing.T) {
	f := executortest.New(t, "true", nil)
	ctx := context.Background()

	ln, port := listen(t, "127.0.0.1:0")
	serveConns(t, ln, greetSSH)
	res, _, err := peer(f, "").Probe(ctx, port)
	if err != nil || !res.Reachable || !res.SSH {
		t.Fatalf("probe of the caller's SSH port: %+v %v", res, err)
	}

	// Another address of this machine, named in every header a proxy
	// might set: never dialled.
	other, otherPort := listen(t, "127.0.0.2:0")
	dialled := serveConns(t, other, greetSSH)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL()+"/awcp/probe?port="+strconv.Itoa(otherPort), nil)
	req.Header.Set("X-Forwarded-For", "127.0.0.2")
	req.Header.Set("X-Real-IP", "127.0.0.2")
	req.Header.Set("Forwarded", "for=127.0.0.2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if dialled.Load() != 0 {
		t.Fatalf("the probe dialled 127.0.0.2 (%d connections)", dialled.Load())
	}

	for _, bad := range []string{"0", "65536", "-1", "x", ""} {
		resp, err := http.Get(f.URL() + "/awcp/probe?port=" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("port %q: %d", bad, resp.StatusCode)
		}
	}
}

// What a caller can make the probe hold is bounded: a port that answers
// nothing holds a probe 3 s, four at most run at once and the rest are
// refused at once, and a port that sends without end is read 256 bytes.
func TestProbeIsBounded(t *testing.T) {
	slow(t)
	f := executortest.New(t, "true", nil)
	ctx := context.Background()

	silent, silentPort := listen(t, "127.0.0.1:0")
	release := make(chan struct{})
	serveConns(t, silent, func(net.Conn) { <-release })
	defer close(release)
	const callers = 8
	codes := make(chan int, callers)
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(f.URL() + "/awcp/probe?port=" + strconv.Itoa(silentPort))
			if err != nil {
				codes <- -1
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusOK] > 4 || count[http.StatusOK]+count[http.StatusTooManyRequests] != callers {
		t.Fatalf("answers: %v, want at most 4 probes run and the rest refused", count)
	}
	if took > 5*time.Second {
		t.Fatalf("a silent port held the probes %v", took)
	}

	endless, endlessPort := listen(t, "127.0.0.1:0")
	serveConns(t, endless, func(c net.Conn) {
		chunk := make([]byte, 4096)
		for i := range chunk {
			chunk[i] = 'A'
		}
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	start = time.Now()
	res, _, err := peer(f, "").Probe(ctx, endlessPort)
	if err != nil || !res.Reachable || res.SSH || time.Since(start) > 2*time.Second {
		t.Fatalf("probe of a port that never ends a line: %+v %v after %v", res, err, time.Since(start))
	}
}
