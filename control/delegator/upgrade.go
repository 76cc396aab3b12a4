package delegator

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator/lending"
)

// Connections the delegator opens to the executor and upgrades to another
// protocol: a reverse live mount's parked tunnels (control/tunnel.go), an
// ACP session's channel.

// Tunnels opens a reverse live mount's connections to the executor for
// the live transport (lendlive.Tunnels): as this delegator's client of
// that executor, pinned to its key, with Identity as its certificate.
type Tunnels struct {
	Identity ed25519.PrivateKey
}

// OpenTunnel opens a parked connection to d's executor, its proof signed
// by the SSH server's host key.
func (t Tunnels) OpenTunnel(ctx context.Context, d control.Lent, proof string) (net.Conn, error) {
	pc := &PeerClient{BaseURL: d.Peer, Token: d.Token, AgentID: d.PeerAgentID, Key: d.PeerKey, PlainHTTP: d.PlainHTTP, Identity: t.Identity}
	return pc.OpenTunnel(ctx, d.ID, proof)
}

// OpenTunnel opens a connection to the executor's tunnel endpoint for
// delegation id and upgrades it (control/tunnel.go). The connection
// returned is parked: the executor pings it until its mount takes it.
func (c *PeerClient) OpenTunnel(ctx context.Context, id, proof string) (net.Conn, error) {
	conn, err := c.upgrade(ctx, control.TunnelPath(id), control.TunnelUpgrade, map[string]string{control.TunnelProofHeader: proof})
	if pe := new(peerStatus); errors.As(err, &pe) && pe.status == http.StatusNotFound {
		return nil, lending.ErrTunnelNotYet
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
		return nil, control.Errorf(control.CodeUsage, "invalid executor URL %q: %v", c.BaseURL, err)
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
