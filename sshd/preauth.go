package sshd

import (
	"net"
	"sync"
	"time"
)

// Connections that have not authenticated yet are bounded, as OpenSSH's
// MaxStartups and LoginGraceTime bound them: anyone who can reach the port
// can open them, and each holds a descriptor and a goroutine. A connection
// has handshakeTimeout to authenticate; past maxPreauthPerSource from one
// address, or maxPreauth in all, a new one is closed at once.
const (
	maxPreauth          = 128
	maxPreauthPerSource = 16
)

// handshakeTimeout is how long a connection has to authenticate. A
// variable for the tests.
var handshakeTimeout = 10 * time.Second

// preauth counts the connections of a server not authenticated yet.
type preauth struct {
	mu       sync.Mutex
	total    int
	bySource map[string]int
}

// admit wraps c, or returns nil if the bounds are reached.
func (p *preauth) admit(c net.Conn) net.Conn {
	src := sourceOf(c)
	p.mu.Lock()
	if p.bySource == nil {
		p.bySource = map[string]int{}
	}
	if p.total >= maxPreauth || p.bySource[src] >= maxPreauthPerSource {
		p.mu.Unlock()
		return nil
	}
	p.total++
	p.bySource[src]++
	p.mu.Unlock()
	w := &preauthConn{Conn: c, p: p, src: src}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	return w
}

func (p *preauth) release(src string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total--
	if p.bySource[src]--; p.bySource[src] <= 0 {
		delete(p.bySource, src)
	}
}

// sourceOf is the address a connection comes from, without its port.
func sourceOf(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// preauthConn is a connection counted until it authenticates or closes.
// Until it authenticates, the handshake's deadline holds: the idle
// deadlines gliderlabs sets at each read are not passed on.
type preauthConn struct {
	net.Conn
	p    *preauth
	src  string
	once sync.Once

	mu     sync.Mutex
	authed bool
}

// authenticated ends the count and the handshake's deadline.
func (c *preauthConn) authenticated() {
	c.mu.Lock()
	c.authed = true
	c.mu.Unlock()
	c.once.Do(func() { c.p.release(c.src) })
	c.Conn.SetDeadline(time.Time{})
}

func (c *preauthConn) passes() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.authed
}

func (c *preauthConn) SetDeadline(t time.Time) error {
	if !c.passes() {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

func (c *preauthConn) SetReadDeadline(t time.Time) error {
	if !c.passes() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *preauthConn) SetWriteDeadline(t time.Time) error {
	if !c.passes() {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *preauthConn) Close() error {
	c.once.Do(func() { c.p.release(c.src) })
	return c.Conn.Close()
}

// preauthKey is the context key of a connection's preauthConn.
type preauthKey struct{}
