package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// The executor's half of the reverse live mount (control/tunnel.go): the
// tunnel endpoint takes connections the delegator opens, and a mount in
// reverse takes them, one per (re)connection, from its slot.

// TunnelHost is a transport that takes reverse connections;
// *SSHFSExecutor.
type TunnelHost interface {
	// TunnelSlot is where delegation id's connections go; false if it has
	// no reverse mount (not one, not yet, or no more).
	TunnelSlot(id string) (*TunnelSlot, bool)
	// SlotReady is closed once delegation id has a slot.
	SlotReady(id string) <-chan struct{}
}

// handleTunnel is GET /awcp/tasks/{id}/tunnel with Upgrade: awcp-ssh.
// Nothing is read from the connection before the proof has passed; after
// it, the connection is the mount's.
func (e *Executor) handleTunnel(w http.ResponseWriter, r *http.Request) {
	id, ok := e.pathID(w, r)
	if !ok {
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), control.TunnelUpgrade) {
		w.Header().Set("Upgrade", control.TunnelUpgrade)
		writeError(w, http.StatusUpgradeRequired, control.NewError(id, control.CodeDeclined, "the tunnel endpoint needs Upgrade: "+control.TunnelUpgrade, ""))
		return
	}
	slot := e.tunnelSlot(r.Context(), id)
	if slot == nil {
		writeError(w, http.StatusNotFound, control.NewError(id, control.CodeDeclined, "no reverse live mount waits for this delegation (not yet, or no more)", "open the tunnel once START is sent"))
		return
	}
	if err := control.VerifyTunnel(slot.host, id, r.Header.Get(control.TunnelProofHeader), time.Now()); err != nil {
		e.log.Warn("tunnel refused", "delegation", id, "remote", r.RemoteAddr, "err", err)
		e.refuseAuth(w, id, err.Error())
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, http.StatusInternalServerError, control.NewError(id, control.CodeDeclined, "the connection cannot be upgraded", "use HTTP/1.1"))
		return
	}
	// The server's deadlines were for the request; the tunnel has its
	// own liveness (pings while parked, SSH keepalives after).
	conn.SetDeadline(time.Time{})
	if brw.Reader.Buffered() > 0 {
		// The delegator speaks only after TunnelGo: bytes before it are
		// not ours to pass on.
		conn.Close()
		return
	}
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + control.TunnelUpgrade + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		return
	}
	slot.park(conn)
}

// tunnelSlotWait is how long a tunnel request for a delegation whose
// START is on its way is held for its mount to start waiting. A variable
// for the tests.
var tunnelSlotWait = 5 * time.Second

// tunnelSlot finds delegation id's reverse mount slot. The delegator
// opens its first connection while START is out, and the mount waits for
// it only once START's setup begins: a request for an accepted delegation
// whose START has not started its mount yet is held (one per delegation,
// up to tunnelSlotWait) rather than answered 404 and asked again.
func (e *Executor) tunnelSlot(ctx context.Context, id string) *TunnelSlot {
	var host TunnelHost
	for _, t := range e.opts.Transports {
		if h, ok := t.(TunnelHost); ok {
			host = h
			break
		}
	}
	if host == nil {
		return nil
	}
	if slot, ok := host.TunnelSlot(id); ok {
		return slot
	}
	if a, err := e.store.Assignment(id); err != nil || (a.State != lease.Accepted && a.State != lease.Started) {
		return nil
	}
	e.mu.Lock()
	if e.tunnelWaits[id] {
		e.mu.Unlock()
		return nil
	}
	e.tunnelWaits[id] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.tunnelWaits, id)
		e.mu.Unlock()
	}()
	t := time.NewTimer(tunnelSlotWait)
	defer t.Stop()
	select {
	case <-host.SlotReady(id):
	case <-t.C:
	case <-ctx.Done():
	}
	slot, _ := host.TunnelSlot(id)
	return slot
}

// TunnelSlot holds the connection the delegator parked for one reverse
// mount, pinged while it waits, until the mount takes it.
type TunnelSlot struct {
	host gossh.PublicKey // the delegator's, pinned by START: the proof's key

	mu      sync.Mutex
	parked  *parked       // at most one: a newer connection replaces it
	arrived chan struct{} // closed (and replaced) when one is parked
	closed  bool
}

// parked is a connection and its pinger.
type parked struct {
	net.Conn
	stop chan struct{}
	done chan struct{}
}

// errSlotClosed is the error of a take once the mount is torn down.
var errSlotClosed = errors.New("the reverse mount is torn down")

func newTunnelSlot(host gossh.PublicKey) *TunnelSlot {
	return &TunnelSlot{host: host, arrived: make(chan struct{})}
}

// park holds c for the mount, pinging it, and drops the one it replaces.
func (s *TunnelSlot) park(c net.Conn) {
	p := &parked{Conn: c, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	old := s.parked
	s.parked = p
	close(s.arrived)
	s.arrived = make(chan struct{})
	s.mu.Unlock()
	if old != nil {
		old.end()
		old.Close()
	}
	go p.ping(s, control.TunnelPingInterval)
}

// ping writes TunnelPing every interval until stopped; a failed write
// drops the connection from the slot.
func (p *parked) ping(s *TunnelSlot, every time.Duration) {
	defer close(p.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.SetWriteDeadline(time.Now().Add(every))
		if _, err := p.Write([]byte{control.TunnelPing}); err != nil {
			s.mu.Lock()
			if s.parked == p {
				s.parked = nil
			}
			s.mu.Unlock()
			p.Close()
			return
		}
	}
}

// end stops the pinger and waits for it: after it, nothing else writes.
func (p *parked) end() {
	close(p.stop)
	<-p.done
}

// take waits, until ctx ends, for a parked connection and tells the
// delegator it is taken: what follows on it is SSH.
func (s *TunnelSlot) take(ctx context.Context) (net.Conn, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errSlotClosed
		}
		p, arrived := s.parked, s.arrived
		s.parked = nil
		s.mu.Unlock()
		if p != nil {
			p.end()
			p.SetWriteDeadline(time.Now().Add(time.Second))
			_, err := p.Write([]byte{control.TunnelGo})
			p.SetWriteDeadline(time.Time{})
			if err == nil {
				return p.Conn, nil
			}
			p.Close()
			continue
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return nil, fmt.Errorf("no connection from the delegator came: %w", ctx.Err())
		}
	}
}

// close drops the parked connection and refuses any later one.
func (s *TunnelSlot) close() {
	s.mu.Lock()
	s.closed = true
	p := s.parked
	s.parked = nil
	s.mu.Unlock()
	if p != nil {
		p.end()
		p.Close()
	}
}
