package delegator

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// The channel (lease.Channel) is what this delegator knows of the
// executor's side of a delegation it follows: running, idle, waiting for
// a permission, finished with the result not yet applied, unreachable
// since when, or missing there. Each change is written to the record
// (Channel, ChannelLog) and given to the Progress callback as an
// EventChannel; none of them ends the lease.

// DefaultIdleAfter is how long a running executor may send no event
// before its channel shows idle.
const DefaultIdleAfter = time.Minute

// errUnchanged aborts a store update that would change nothing.
var errUnchanged = errors.New("unchanged")

// setChannel records delegation id's channel, unless it is so already
// (the last state set is kept in memory, so the store is written only on
// a change) or the lease has ended.
func (d *Delegator) setChannel(id, state, detail string, since time.Time) {
	d.mu.Lock()
	cur := d.channels[id]
	if cur.State == state && cur.Detail == detail {
		d.mu.Unlock()
		return
	}
	d.channels[id] = lease.Channel{State: state, Detail: detail, Since: since}
	d.mu.Unlock()
	_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		if del.State.Terminal() || !del.SetChannel(state, detail, since) {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, errUnchanged) {
			d.log.Warn("record the executor's channel", "delegation", id, "err", err)
		}
		return
	}
	d.log.Info("executor channel", "delegation", id, "state", state, "detail", detail)
	if d.opts.Progress != nil {
		d.opts.Progress(id, &control.Event{DelegationID: id, Type: control.EventChannel, Status: state, Message: detail,
			Timestamp: control.Timestamp(since)})
	}
}

// channelState is the last channel state set for id in this process.
func (d *Delegator) channelState(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.channels[id].State
}

// forgetChannel drops id's channel from memory: it is no longer followed.
func (d *Delegator) forgetChannel(id string) {
	d.mu.Lock()
	delete(d.channels, id)
	d.mu.Unlock()
}

// live is the channel of a reachable executor running the task: waiting
// while a permission request is pending, else running.
func live(del *lease.Delegation) (state, detail string) {
	for _, p := range del.Permissions {
		if p.Outcome == control.PermissionPending {
			return lease.ChannelWaiting, "for a permission decision: " + p.Title
		}
	}
	return lease.ChannelRunning, ""
}

// backToLive sets id's channel to live, if the executor's task runs.
func (d *Delegator) backToLive(id string) {
	del, err := d.store.Delegation(id)
	if err != nil || del.State != lease.Running {
		return
	}
	state, detail := live(del)
	d.setChannel(id, state, detail, d.store.Now())
}

// recordGap records that events from..to could not be replayed.
func (d *Delegator) recordGap(id string, from, to uint64) {
	now := d.store.Now()
	_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		if del.State.Terminal() {
			return errUnchanged
		}
		del.RecordGap(from, to, now)
		return nil
	})
	if err != nil {
		return
	}
	d.log.Warn("events lost between reconnections", "delegation", id, "from", from, "to", to)
	if d.opts.Progress != nil {
		d.opts.Progress(id, &control.Event{DelegationID: id, Type: control.EventChannel, Status: d.channelState(id),
			Message: fmt.Sprintf("resumed after event %d; %s", from-1, lost(from, to)), Timestamp: control.Timestamp(now)})
	}
}

func lost(from, to uint64) string {
	if from == to {
		return fmt.Sprintf("event %d was lost", from)
	}
	return fmt.Sprintf("events %d–%d were lost", from, to)
}

// shortError is err without the request it came from: the URL is the
// delegation's, known already.
func shortError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// ChannelText is how a channel reads to a person: "unreachable since
// 13:01:02 (connect: connection refused)".
func ChannelText(c *lease.Channel) string {
	s := c.State
	if !c.Since.IsZero() {
		s += " since " + c.Since.Local().Format(time.TimeOnly)
	}
	if c.Detail != "" {
		s += " (" + c.Detail + ")"
	}
	return s
}
