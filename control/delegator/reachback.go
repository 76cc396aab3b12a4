package delegator

import (
	"context"
	"fmt"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

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
