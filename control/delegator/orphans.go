package delegator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// A delegation is followed by the process that made it — `awcp-ctl
// export`, an MCP server, or the daemon — and its record names that
// process. One whose process is gone is an orphan: nothing follows its
// events, applies its result or serves its mount, yet its lease runs and
// its directory stays lent. The daemon's own wait for it to restart
// (their mounts come back where they were); a command's are taken over by
// a running daemon where it can serve them (Adoptable), and otherwise
// ended by the next command that opens the store (Tidy).

// own records this process as del's follower.
func (d *Delegator) own(del *lease.Delegation) {
	del.OwnerPID, del.OwnerPIDNS, del.OwnerDaemon, del.OrphanSince = os.Getpid(), pidNamespace(), d.opts.Daemon, time.Time{}
	del.OwnerMCP = d.opts.MCP
}

// SessionTakeOverGrace is how long an editor's session whose gateway is
// gone waits for a new gateway to take it over (session/load) before it
// is ended as an orphan; the executor's agent waits as long for a new
// channel (its StartTimeout).
const SessionTakeOverGrace = 2 * time.Minute

// awaitsTakeOver reports whether orphan del is still within
// SessionTakeOverGrace, noting when it was first found orphaned: an
// editor's session, for a new gateway to take it over, or a delegation of
// an MCP server that a daemon could follow, for the restarted server's
// delegate_recover.
func (d *Delegator) awaitsTakeOver(del *lease.Delegation) bool {
	editors := del.Session != "" && !del.SessionDriven
	recoverable := del.OwnerMCP && Adoptable(del)
	if !editors && !recoverable {
		return false
	}
	now := d.store.Now()
	if del.OrphanSince.IsZero() {
		d.store.UpdateDelegation(del.ID, func(cur *lease.Delegation) error {
			if cur.OwnerPID != del.OwnerPID || !cur.OrphanSince.IsZero() {
				return errUnchanged
			}
			cur.OrphanSince = now
			return nil
		})
		return true
	}
	return now.Sub(del.OrphanSince) < SessionTakeOverGrace
}

// Tidy is what every command does on opening the store, from one read of
// it: it expires the overdue delegations no live process follows, ends
// the orphans of commands when endOrphans (no daemon runs to take them
// over), and removes the records of delegations that ended before
// pruneBefore (zero: none).
func (d *Delegator) Tidy(ctx context.Context, endOrphans bool, pruneBefore time.Time) {
	ds, err := d.store.Delegations()
	if err != nil {
		return
	}
	now, prune := d.store.Now(), false
	for _, del := range ds {
		alive := ownerAlive(del)
		switch {
		case del.State.Terminal():
			prune = prune || del.EndedAt.Before(pruneBefore)
		case !del.ExpiresAt.IsZero() && !now.Before(del.ExpiresAt) && lease.CanFire(del.State, lease.Expire) && !alive:
			if err := d.Expire(ctx, del.ID); err != nil {
				d.log.Debug("expire overdue", "delegation", del.ID, "err", err)
			}
		case endOrphans && !alive && !del.OwnerDaemon && !d.awaitsTakeOver(del):
			if err := d.EndOrphan(ctx, del); err != nil {
				d.log.Warn("end orphan", "delegation", del.ID, "err", err)
			}
		}
	}
	d.expireStaged(ds)
	if prune {
		if _, err := d.store.PruneDelegations(pruneBefore); err != nil {
			d.log.Warn("prune ended delegations", "err", err)
		}
	}
}

// Orphans lists live delegations whose owning process is gone.
func (d *Delegator) Orphans() ([]*lease.Delegation, error) {
	ds, err := d.store.Delegations()
	if err != nil {
		return nil, err
	}
	var out []*lease.Delegation
	for _, del := range ds {
		if !del.State.Terminal() && !ownerAlive(del) && !d.awaitsTakeOver(del) {
			out = append(out, del)
		}
	}
	return out, nil
}

// Adoptable reports whether a daemon can follow orphan del: anything but
// a live mount or a git transport the executor dials, once START named the
// dead process's SSH server (the daemon's listens elsewhere; the mount, or
// the push at the end, cannot follow), and but a session, whose channel
// ended with the process that held it.
func Adoptable(del *lease.Delegation) bool {
	if del.OwnerDaemon {
		return true
	}
	started := del.State != lease.Created && del.State != lease.Invited && del.State != lease.Accepted
	overSSH := del.Transport == control.TransportSSHFS || del.Transport == control.TransportGit
	return del.Session == "" && (!overSSH || del.Connect == control.ConnectReverse || !started)
}

// EndOrphan ends orphan del, saying which process left it: the executor
// is told (its agent stops), the access closed, the directory free again.
func (d *Delegator) EndOrphan(ctx context.Context, del *lease.Delegation) error {
	d.log.Info("ending a delegation whose process is gone", "delegation", del.ID, "pid", del.OwnerPID)
	pe := control.Errorf(control.CodeCancelled, "the process that followed it (pid %d) ended before it did", del.OwnerPID).
		WithHint("nothing followed its events any more, so it was ended and its access closed; " +
			"`awcp-ctl export --background` hands a delegation to the daemon, which outlives the command")
	if err := d.end(del.ID, lease.Cancel, pe); err != nil && !errors.As(err, new(*lease.TransitionError)) {
		return fmt.Errorf("end orphan %s: %w", del.ID, err)
	}
	return nil
}

// OwnerGone reports whether the process that followed del is gone: del
// is an orphan, unless it ended.
func OwnerGone(del *lease.Delegation) bool { return !ownerAlive(del) }

// ownerAlive reports whether del's owning process runs. An owner in
// another PID namespace than this process's (an agent's awcp-ctl in its
// sandbox, a command in a container, sharing the state dir) cannot be
// seen from here, and counts as alive: its delegations are not this
// process's to end.
func ownerAlive(del *lease.Delegation) bool {
	pid := del.OwnerPID
	if pid <= 0 {
		return false
	}
	if del.OwnerPIDNS != 0 && del.OwnerPIDNS != pidNamespace() {
		return true
	}
	if pid == os.Getpid() {
		return true
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// pidNamespace is this process's PID namespace (its inode), 0 if unknown.
func pidNamespace() uint64 {
	var st syscall.Stat_t
	if syscall.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}
