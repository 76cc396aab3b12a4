package sshdtest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// ReplyGate is a TCP proxy in front of a server that can hold back the
// server's replies: a client's request that waits for its answer does not
// return while they are held, and what the client sends still reaches the
// server.
type ReplyGate struct {
	// Addr is where the proxy listens.
	Addr string

	mu   sync.Mutex
	open chan struct{} // closed while replies pass
}

// NewReplyGate proxies to target until the test ends; replies pass until
// Hold is called.
func NewReplyGate(t testing.TB, target string) *ReplyGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &ReplyGate{Addr: ln.Addr().String(), open: make(chan struct{})}
	close(g.open)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
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
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() { defer wg.Done(); defer c.Close(); g.copyReplies(c, s) }()
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
	return g
}

// copyReplies copies what the server sends to the client, waiting while
// replies are held.
func (g *ReplyGate) copyReplies(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			g.pass()
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
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

// pass waits while replies are held.
func (g *ReplyGate) pass() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	<-ch
}
