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

	proxy    *proxy
	mu       sync.Mutex
	open     chan struct{} // closed while replies pass
	requests chan struct{} // closed while requests pass
}

// NewReplyGate proxies to target until the test ends; replies pass until
// Hold is called.
func NewReplyGate(t testing.TB, target string) *ReplyGate {
	t.Helper()
	g := &ReplyGate{open: make(chan struct{}), requests: make(chan struct{})}
	close(g.open)
	close(g.requests)
	g.proxy = newProxy(t, target,
		func(dst, src net.Conn) { defer dst.Close(); g.copy(dst, src, &g.requests) },
		func(dst, src net.Conn) { defer dst.Close(); g.copy(dst, src, &g.open) })
	g.Addr = g.proxy.addr
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
func (g *ReplyGate) Reset() { g.proxy.reset() }

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
