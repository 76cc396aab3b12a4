package delegator

import (
	"context"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// How a delegation ends: the transition, the executor told, this process's
// following stopped, the transport's clean-up (the grant revoked, a
// discarded result's area removed) and the audit's summary recorded.

// notifyPeer sends an ERROR to the executor, best effort and bounded.
func (d *Delegator) notifyPeer(del *lease.Delegation, m *control.Error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if del.PeerProtocol == lease.PeerA2A {
		if d.opts.A2A == nil || del.PeerTaskID == "" {
			return // nothing was sent, or nothing to name
		}
		if err := d.opts.A2A.Cancel(ctx, del); err != nil {
			d.log.Debug("cancel the A2A task", "delegation", del.ID, "err", err)
		}
		return
	}
	if err := d.peer(del).SendError(ctx, m); err != nil {
		d.log.Debug("tell executor", "delegation", del.ID, "err", err)
	}
}

// cleanup runs the ending's clean-up of del once at a time: two endings
// can meet (a cancel here, and the executor's answering error on the
// event stream), and the second waits for the first rather than race it.
// The first takes the audit and records the changes it found; a caller
// that reads the delegation after its cleanup returns sees them, whichever
// of the two did the work.
func (d *Delegator) cleanup(ctx context.Context, del *lease.Delegation) {
	d.mu.Lock()
	if running, ok := d.cleaning[del.ID]; ok {
		d.mu.Unlock()
		<-running
		return
	}
	running := make(chan struct{})
	d.cleaning[del.ID] = running
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.cleaning, del.ID)
		d.mu.Unlock()
		close(running)
	}()
	d.cleanupOnce(ctx, del)
}

func (d *Delegator) cleanupOnce(ctx context.Context, del *lease.Delegation) {
	if del.PeerProtocol == lease.PeerA2A && d.opts.A2A != nil {
		d.opts.A2A.Forget(del.ID)
	}
	t := d.transport(del)
	if t == nil {
		return
	}
	if err := t.Cleanup(context.WithoutCancel(ctx), lent(del)); err != nil {
		d.log.Warn("transport clean-up", "delegation", del.ID, "err", err)
	}
	d.dropDiscarded(del)
	d.settleEmptyStaged(del.ID)
	if a, ok := t.(auditor); ok {
		if sum := a.EndAudit(del.ID); sum != nil {
			changes, notes, err := liveChanges(d.store, del.ID)
			if err != nil {
				d.log.Warn("read the audit log back", "delegation", del.ID, "err", err)
			}
			if _, err := d.store.UpdateDelegation(del.ID, func(del *lease.Delegation) error {
				del.Audit, del.Changes = sum, changes
				del.Notes = append(del.Notes, notes...)
				return nil
			}); err != nil {
				d.log.Warn("record the audit summary", "delegation", del.ID, "err", err)
			}
		}
	}
}

// auditor is a transport that records what the executor does: the live
// mount (lendlive.Transport).
type auditor interface {
	EndAudit(id string) *lease.AuditSummary
}

// Expire ends a delegation whose lease ran out: the transition first, then
// the executor is told and this process stops following it.
func (d *Delegator) Expire(ctx context.Context, id string) error {
	d.opts.Metrics.LeaseExpired()
	return d.end(id, lease.Expire, control.Errorf(control.CodeExpired, "the lease expired").WithHint("delegate again with a longer --ttl"))
}

// Cancel ends a delegation on the user's request.
func (d *Delegator) Cancel(ctx context.Context, id string) (*lease.Delegation, error) {
	if err := d.end(id, lease.Cancel, control.Errorf(control.CodeCancelled, "cancelled by the delegator")); err != nil {
		return nil, err
	}
	return d.store.Delegation(id)
}

func (d *Delegator) end(id string, ev lease.Event, pe *control.ProtocolError) error {
	del, err := d.store.FireDelegation(id, ev, pe.Code+": "+pe.Message, func(del *lease.Delegation) error {
		del.Failure = failureOf(pe)
		return nil
	})
	if err != nil {
		return err
	}
	d.log.Info("delegation ended", "delegation", id, "state", del.State)
	if len(del.Transitions) > 1 && !ByHand(del) { // it was invited: the executor may hold it
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if ev == lease.Cancel {
			err = d.peer(del).Cancel(ctx, id)
		} else {
			err = d.peer(del).SendError(ctx, pe.ToMessage(id))
		}
		cancel()
		if err != nil {
			d.log.Debug("tell executor", "delegation", id, "err", err)
		}
	}
	d.mu.Lock()
	if stop, ok := d.following[id]; ok {
		stop()
	}
	d.mu.Unlock()
	d.cleanup(context.Background(), del)
	return nil
}

// failureOf is how a delegation that ended with pe failed.
func failureOf(pe *control.ProtocolError) *lease.Failure {
	return &lease.Failure{Code: pe.Code, Message: pe.Message, Hint: pe.Hint, Reason: pe.Reason, CallChain: pe.CallChain}
}
