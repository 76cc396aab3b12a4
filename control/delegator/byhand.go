package delegator

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// A directory lent by hand has no executor daemon on the other side: the
// delegation is made and started here, and its START is handed to the
// user, who mounts it with `awcp-fs mount --start START.json`. The lease,
// the certificate, the SSH server's confinement, the policy and the audit
// are a live mount's; nothing is asked of or told to a peer.

// byHandScheme marks the Peer of a delegation lent by hand:
// by-hand://HOST, HOST being where the mount will be made from (it
// chooses this machine's address in START).
const byHandScheme = "by-hand"

// ByHand reports whether del was lent by hand.
func ByHand(del *lease.Delegation) bool { return strings.HasPrefix(del.Peer, byHandScheme+"://") }

// LendByHand lends req.Dir for a mount by hand from host (an address or
// name of the machine that will mount it; empty: this one), and returns
// the delegation and the START to give that machine. The delegation runs
// until its lease ends or it is cancelled; this process must serve the
// live mount (its SSH server) for as long.
func (d *Delegator) LendByHand(ctx context.Context, req ExportRequest, host string) (*lease.Delegation, *control.Start, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	peer := (&url.URL{Scheme: byHandScheme, Host: host}).String()
	if u, err := url.Parse(peer); err != nil || u.Hostname() != host {
		return nil, nil, control.Errorf(control.CodeWorkspaceInvalid, "%q is not a host name or address", host)
	}
	req.Peer, req.Transport = peer, control.TransportSSHFS
	if req.Prompt == "" {
		req.Prompt = "mounted by hand"
	}
	del, err := d.Create(req)
	if err != nil {
		return nil, nil, err
	}
	tr := d.transport(del)
	if tr == nil {
		d.end(del.ID, lease.Cancel, control.Errorf(control.CodeDepMissing, "no live mount in this process"))
		return nil, nil, control.Errorf(control.CodeDepMissing, "the live mount is not available in this process").
			WithHint("its SSH server could not start: see above")
	}
	// The handshake's transitions, with nobody to shake hands with.
	for _, step := range []struct {
		ev   lease.Event
		note string
	}{{lease.SendInvite, "lent by hand: no INVITE"}, {lease.ReceiveAccept, "lent by hand: no ACCEPT"}} {
		if del, err = d.store.FireDelegation(del.ID, step.ev, step.note, nil); err != nil {
			return nil, nil, err
		}
	}
	d.sched.Kick()
	info, err := tr.Prepare(ctx, lent(del))
	if err != nil {
		d.end(del.ID, lease.SendError, control.AsProtocolError(err, control.CodeSetupFailed))
		return nil, nil, err
	}
	st := &control.Start{
		BaseMessage: control.Header(control.TypeStart, del.ID),
		Lease:       control.StartLease{ExpiresAt: control.Timestamp(del.ExpiresAt), AccessMode: del.AccessMode},
		WorkDir:     *info,
	}
	for _, ev := range []lease.Event{lease.SendStart, lease.SetupComplete} {
		if del, err = d.store.FireDelegation(del.ID, ev, "lent by hand", nil); err != nil {
			return nil, nil, fmt.Errorf("lend by hand: %w", err)
		}
	}
	return del, st, nil
}
