package sshdtest

import (
	"net"
	"sync"
	"testing"
)

// ReplyGate is a TCP proxy in front of a server that can hold back the
// server's replies: a client's request that waits for its answer does not
// return while they are held, and what the client sends still reaches the
// server. Frozen, it holds both ways, every connection left open: a
// server stopped with SIGSTOP, or a network dropping every packet.
type ReplyGate struct {
	// Addr is where the proxy listens.
	Addr string

	mu       sync.Mutex
	open     chan struct{} // closed while replies pass
	requests chan struct{} // closed while requests pass

	connsMu sync.Mutex
	conns   []net.Conn // both ends of every connection proxied
}

// NewReplyGate proxies to target until the test ends; replies pass until
// Hold is called.
func NewReplyGate(t testing.TB, target string) *ReplyGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &ReplyGate{Addr: ln.Addr().String(), open: make(chan struct{}), requests: make(chan struct{})}
	close(g.open)
	close(g.requests)
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
			g.connsMu.Lock()
			g.conns = append(g.conns, c, s)
			g.connsMu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); defer s.Close(); g.copy(s, c, &g.requests) }()
			go func() { defer wg.Done(); defer c.Close(); g.copy(c, s, &g.open) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		g.Reset()
		wg.Wait()
	})
	return g
}

// copy copies src to dst, waiting while the gate at gate is shut.
func (g *ReplyGate) copy(dst, src net.Conn, gate *chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			g.pass(gate)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Reset resets every connection open through the gate, at both ends.
func (g *ReplyGate) Reset() {
	g.connsMu.Lock()
	conns := g.conns
	g.conns = nil
	g.connsMu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not an orderly close
		}
		c.Close()
	}
}

// Hold holds the replies back until the function it returns is called.
func (g *ReplyGate) Hold() (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.open = ch
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// Freeze holds replies and requests until the function it returns is
// called.
func (g *ReplyGate) Freeze() (thaw func()) {
	replies, requests := make(chan struct{}), make(chan struct{})
	g.mu.Lock()
	g.open, g.requests = replies, requests
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(replies); close(requests) }) }
}

// pass waits while the gate at gate is shut.
func (g *ReplyGate) pass(gate *chan struct{}) {
	g.mu.Lock()
	ch := *gate
	g.mu.Unlock()
	<-ch
}
