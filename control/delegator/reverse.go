package delegator

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// The delegator's half of the reverse live mount (control/tunnel.go): for
// each delegation lent in reverse, a keeper keeps one connection parked at
// the executor's tunnel endpoint, and serves each the executor takes as an
// SSH connection to the embedded server, until the delegation's clean-up.

// TunnelServer serves a reverse connection as one the executor dialled;
// *sshd.Server.
type TunnelServer interface {
	ServeTunnel(id string, c net.Conn)
}

// keeper is one delegation's tunnel keeper.
type keeper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// keep starts d's keeper, unless it runs already. It ends at stopKeeping
// or when ctx (the delegation's following) does.
func (t *SSHFSDelegator) keep(ctx context.Context, d control.Lent) error {
	srv, ok := t.Server.(TunnelServer)
	if !ok {
		return control.Errorf(control.CodeDepMissing, "this SSH server cannot serve reverse connections")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, running := t.keepers[d.ID]; running {
		return nil
	}
	if t.keepers == nil {
		t.keepers = map[string]*keeper{}
	}
	ctx, cancel := context.WithCancel(ctx)
	k := &keeper{cancel: cancel, done: make(chan struct{})}
	t.keepers[d.ID] = k
	t.running.Add(1)
	go func() {
		defer t.running.Done()
		defer close(k.done)
		t.tunnel(ctx, d, srv)
		t.mu.Lock()
		if t.keepers[d.ID] == k {
			delete(t.keepers, d.ID)
		}
		t.mu.Unlock()
	}()
	return nil
}

// stopKeeping ends delegation id's keeper and its connections, and waits.
func (t *SSHFSDelegator) stopKeeping(id string) {
	t.mu.Lock()
	k := t.keepers[id]
	t.mu.Unlock()
	if k != nil {
		k.cancel()
		<-k.done
	}
}

// Wait waits for every keeper to end (their contexts done).
func (t *SSHFSDelegator) Wait() { t.running.Wait() }

// Back-off between attempts to park a connection: it starts short and
// doubles, up to a short bound while the executor has no mount waiting
// yet (START is on its way: the mount's first connection waits on it),
// and up to a longer one while the executor cannot be reached.
const (
	maxTunnelServing     = 8
	tunnelShortLived     = 2 * time.Second
	tunnelRetryMin       = 50 * time.Millisecond
	tunnelRetryNotYetMax = 200 * time.Millisecond
	tunnelRetryMax       = 2 * time.Second
)

// tunnel parks connections at the executor, one at a time, and serves
// each the executor takes, until ctx ends; then it closes them all.
func (t *SSHFSDelegator) tunnel(ctx context.Context, d control.Lent, srv TunnelServer) {
	log := t.logger().With("delegation", d.ID)
	pc := &PeerClient{BaseURL: d.Peer, Token: d.Token, AgentID: d.PeerAgentID, Key: d.PeerKey, PlainHTTP: d.PlainHTTP, Identity: t.Identity}
	var serving sync.WaitGroup // the connections taken: they close with ctx
	defer serving.Wait()
	backoff := tunnelRetryMin
	var failing error // the error of the attempts failing since the last success
	// At most maxTunnelServing taken connections are served at once, and
	// one that ends within tunnelShortLived makes the next park wait as a
	// failure does: an executor that takes each connection and never
	// speaks SSH would otherwise have this loop open them without end.
	slots := make(chan struct{}, maxTunnelServing)
	shortLived := make(chan struct{}, 1)
	var longLived atomic.Bool // a served connection lasted: back-off starts over
	for ctx.Err() == nil {
		if longLived.Swap(false) {
			backoff = tunnelRetryMin
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		select {
		case <-shortLived:
			log.Debug("a reverse connection ended at once; waiting before the next", "wait", backoff)
			select {
			case <-ctx.Done():
				<-slots
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, tunnelRetryMax)
		default:
		}
		conn, err := t.park(ctx, pc, d.ID)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return
			}
			wait := backoff
			switch {
			case errors.Is(err, errTunnelNotYet):
				wait = min(backoff, tunnelRetryNotYetMax)
			case errors.As(err, new(*parkLost)):
				// The executor closed it (its mount ended, or it
				// restarted), or the network did: the next attempt tells.
				log.Debug("parked reverse connection lost", "err", err)
			case failing == nil:
				log.Warn("cannot open a reverse connection to the executor; retrying", "err", err)
			}
			failing = err
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			backoff = min(backoff*2, tunnelRetryMax)
			continue
		}
		if failing != nil && !errors.Is(failing, errTunnelNotYet) && !errors.As(failing, new(*parkLost)) {
			backoff = tunnelRetryMin
			log.Info("reverse connection to the executor open again")
		}
		failing = nil
		// The executor took it: serve it, and park the next one now,
		// for the mount's next reconnection.
		serving.Add(1)
		go func() {
			defer serving.Done()
			defer func() { <-slots }()
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			began := time.Now()
			srv.ServeTunnel(d.ID, conn)
			if time.Since(began) < tunnelShortLived {
				select {
				case shortLived <- struct{}{}:
				default:
				}
			} else {
				longLived.Store(true)
			}
		}()
	}
}

// errTunnelNotYet is the executor's answer while no mount of the
// delegation waits for a connection.
var errTunnelNotYet = errors.New("the executor has no reverse mount waiting for this delegation yet")

// parkLost is a parked connection that ended before the executor took it.
type parkLost struct{ err error }

func (e *parkLost) Error() string { return "parked connection lost: " + e.err.Error() }
func (e *parkLost) Unwrap() error { return e.err }

// park opens one connection to the executor's tunnel endpoint and waits,
// answering its pings, until the executor's mount takes it.
func (t *SSHFSDelegator) park(ctx context.Context, pc *PeerClient, id string) (net.Conn, error) {
	proof, err := control.SignTunnel(t.Issuer.HostKey(), id, time.Now())
	if err != nil {
		return nil, err
	}
	conn, err := pc.OpenTunnel(ctx, id, proof)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	b := make([]byte, 1)
	for {
		conn.SetReadDeadline(time.Now().Add(3 * control.TunnelPingInterval))
		if _, err := io.ReadFull(conn, b); err != nil {
			conn.Close()
			return nil, &parkLost{err}
		}
		switch b[0] {
		case control.TunnelPing:
		case control.TunnelGo:
			conn.SetReadDeadline(time.Time{})
			return conn, nil
		default:
			conn.Close()
			return nil, fmt.Errorf("the executor sent %q on a parked connection", b[0])
		}
	}
}

// OpenTunnel opens a connection to the executor's tunnel endpoint for
// delegation id and upgrades it (control/tunnel.go). The connection
// returned is parked: the executor pings it until its mount takes it.
func (c *PeerClient) OpenTunnel(ctx context.Context, id, proof string) (net.Conn, error) {
	conn, err := c.upgrade(ctx, control.TunnelPath(id), control.TunnelUpgrade, map[string]string{control.TunnelProofHeader: proof})
	if pe := new(peerStatus); errors.As(err, &pe) && pe.status == http.StatusNotFound {
		return nil, errTunnelNotYet
	}
	return conn, err
}

// peerStatus is an upgrade the executor answered with another status.
type peerStatus struct {
	status int
	err    error
}

func (e *peerStatus) Error() string { return e.err.Error() }
func (e *peerStatus) Unwrap() error { return e.err }

// upgrade opens a connection to the executor's endpoint at path and
// switches it to protocol, with headers (and the bearer token), after
// the executor proved who it is where its key is trusted. A refusal is a
// *peerStatus wrapping the executor's error.
func (c *PeerClient) upgrade(ctx context.Context, path, protocol string, headers map[string]string) (net.Conn, error) {
	if err := c.secure(); err != nil {
		return nil, err
	}
	u, err := url.Parse(c.base() + path)
	if err != nil {
		return nil, control.Errorf(control.CodeDeclined, "invalid executor URL %q: %v", c.BaseURL, err)
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	// A connection past its upgrade may carry nothing for long (a parked
	// tunnel, a session between turns): TCP's own keepalives find one
	// that died silently, within about half a minute, so that it is closed.
	d := net.Dialer{Timeout: 10 * time.Second, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}}
	var conn net.Conn
	if u.Scheme == "https" {
		conn, err = (&tls.Dialer{NetDialer: &d, Config: c.tlsConfig()}).DialContext(ctx, "tcp", addr)
		if uerr := c.untrustedKey(err); uerr != nil {
			return nil, uerr
		}
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", protocol)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(conn, 4096)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		conn.Close()
		return nil, &peerStatus{status: resp.StatusCode, err: peerError(resp.StatusCode, body)}
	}
	conn.SetDeadline(time.Time{})
	// What came in the same read as the answer is the protocol's.
	return &readerConn{Conn: conn, r: br}, nil
}

// readerConn is a connection whose first bytes were read into r.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

// CloseWrite half-closes the connection, where it can be.
func (c *readerConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

func (c *readerConn) Read(p []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}

// TransportSSHFSReverse is the --transport value that asks for the live
// mount in reverse. On the wire the transport is sshfs and the direction
// is Requirements.Connect.
const TransportSSHFSReverse = "sshfs-reverse"

// TransportLive and TransportLiveReverse are what users may call the live
// mount, sshfs on the wire, and its reverse.
const (
	TransportLive        = "live"
	TransportLiveReverse = "live-reverse"
)

// reachResult is one reachability probe's outcome.
type reachResult struct {
	at      time.Time
	connect string // "" (the executor dials) or reverse
	note    string
}

// reachFor is how long a probe's outcome is reused for the same executor.
const reachFor = time.Minute

// reachBack decides, for --transport auto, which way the live mount's
// connection goes: the executor is asked to open one to this machine's
// SSH port (GET /awcp/probe); if it cannot, the connection is opened from
// here (reverse). An executor that has no probe (the reference's) or
// cannot be asked dials, as before.
func (d *Delegator) reachBack(ctx context.Context, del *lease.Delegation) (connect, note string) {
	sp, ok := d.opts.Transports[control.TransportSSHFS].(interface {
		SSHPortFor(peer, id string) (int, error)
	})
	if !ok {
		return "", ""
	}
	d.mu.Lock()
	r, cached := d.reach[del.Peer]
	d.mu.Unlock()
	if cached && time.Since(r.at) < reachFor {
		return r.connect, r.note
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	port, err := sp.SSHPortFor(del.Peer, del.ID)
	if err != nil {
		return "", ""
	}
	res, _, err := d.peer(del).Probe(pctx, port)
	r = reachResult{at: time.Now()}
	switch {
	case err != nil || (res.Reachable && res.SSH):
	default:
		why := res.Error
		if why == "" {
			why = "no SSH server greeted it"
		}
		r.connect = control.ConnectReverse
		r.note = fmt.Sprintf("transport auto: the executor cannot reach this machine's SSH port (%s): the live mount runs in reverse, over connections this machine opens to the executor", why)
	}
	d.mu.Lock()
	d.reach[del.Peer] = r
	d.mu.Unlock()
	return r.connect, r.note
}
