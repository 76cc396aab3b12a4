package sshdtest

import (
	"net"
	"sync"
	"testing"
)

// proxy forwards every TCP connection made to its address to target, until
// the test ends: up pumps what the client sends to the server, down the
// server's replies. It keeps both ends of each connection, for reset and
// for the end of the test.
type proxy struct {
	addr string

	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t testing.TB, target string, up, down func(dst, src net.Conn)) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); up(s, c) }()
			go func() { defer wg.Done(); down(c, s) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.reset()
		wg.Wait()
	})
	return p
}

// reset resets every connection open through the proxy, at both ends.
func (p *proxy) reset() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not an orderly close
		}
		c.Close()
	}
}
