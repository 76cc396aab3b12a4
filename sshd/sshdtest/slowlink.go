package sshdtest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// SlowLink forwards TCP connections to addr, holding every chunk for half
// of rtt in each direction, in order: a network link's round trip, in the
// test's own process. What the mount sends behind without waiting races
// what follows it only across such a link; on loopback the race is lost
// in microseconds. It returns the address to dial.
func SlowLink(t testing.TB, addr string, rtt time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				down.Close()
				continue
			}
			track(down)
			track(up)
			wg.Add(2)
			go func() { defer wg.Done(); delayCopy(up, down, rtt/2) }()
			go func() { defer wg.Done(); delayCopy(down, up, rtt/2) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// delayCopy copies src to dst, each chunk written d after it was read.
func delayCopy(dst, src net.Conn, d time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.b); err != nil {
				src.Close()
				for range ch {
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	for {
		b := make([]byte, 64<<10)
		n, err := src.Read(b)
		if n > 0 {
			ch <- chunk{b[:n], time.Now().Add(d)}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-done
}
