package lendlive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator/lending"
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
func (t *Transport) keep(ctx context.Context, d control.Lent) error {
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
func (t *Transport) stopKeeping(id string) {
	t.mu.Lock()
	k := t.keepers[id]
	t.mu.Unlock()
	if k != nil {
		k.cancel()
		<-k.done
	}
}

// Wait waits for every keeper to end (their contexts done).
func (t *Transport) Wait() { t.running.Wait() }

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
func (t *Transport) tunnel(ctx context.Context, d control.Lent, srv TunnelServer) {
	log := t.Log().With("delegation", d.ID)
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
		conn, err := t.park(ctx, d)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return
			}
			wait := backoff
			switch {
			case errors.Is(err, lending.ErrTunnelNotYet):
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
		if failing != nil && !errors.Is(failing, lending.ErrTunnelNotYet) && !errors.As(failing, new(*parkLost)) {
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

// parkLost is a parked connection that ended before the executor took it.
type parkLost struct{ err error }

func (e *parkLost) Error() string { return "parked connection lost: " + e.err.Error() }
func (e *parkLost) Unwrap() error { return e.err }

// park opens one connection to the executor's tunnel endpoint and waits,
// answering its pings, until the executor's mount takes it.
func (t *Transport) park(ctx context.Context, d control.Lent) (net.Conn, error) {
	id := d.ID
	proof, err := control.SignTunnel(t.Issuer.HostKey(), id, time.Now())
	if err != nil {
		return nil, err
	}
	if t.Tunnels == nil {
		return nil, control.Errorf(control.CodeDepMissing, "this delegator cannot open reverse connections")
	}
	conn, err := t.Tunnels.OpenTunnel(ctx, d, proof)
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
