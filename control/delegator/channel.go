package delegator

import (
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// The channel (lease.Channel) is what this delegator knows of the
// executor's side of a delegation it follows: running, idle, waiting for
// a permission, finished with the result not yet applied, unreachable
// since when, or missing there. The follower of the delegation (events.go)
// holds it, with what decides it — whether the task runs, the permission
// requests pending, when the executor last spoke — and writes it to the
// record (Channel, ChannelLog) only when it changes, telling the Progress
// callback as an EventChannel; none of it ends the lease.

// DefaultIdleAfter is how long a running executor may send no event
// before its channel shows idle.
const DefaultIdleAfter = time.Minute

// errUnchanged aborts a store update that would change nothing.
var errUnchanged = errors.New("unchanged")

// follower follows one delegation: its event stream, and its channel.
type follower struct {
	d  *Delegator
	id string

	last      uint64       // the last event id handled
	awaySince time.Time    // since when the executor cannot be reached; zero while it can
	lastEvent atomic.Int64 // when the executor last sent an event (unix ns)

	mu      sync.Mutex // guards what follows: the stream's reader and watchIdle share it
	channel lease.Channel
	running bool              // the executor said it runs the task
	pending map[string]string // permission requests pending, by request id: their titles
}

// newFollower starts from del's record: the channel as it was left, the
// task running, the permission requests pending.
func (d *Delegator) newFollower(del *lease.Delegation) *follower {
	f := &follower{d: d, id: del.ID, last: del.LastEventID, running: del.State == lease.Running, pending: map[string]string{}}
	if del.Channel != nil {
		f.channel = *del.Channel
	}
	for _, p := range del.Permissions {
		if p.Outcome == control.PermissionPending {
			f.pending[p.RequestID] = p.Title
		}
	}
	f.lastEvent.Store(time.Now().UnixNano())
	return f
}

// set records the channel, unless it is so already or the lease has
// ended.
func (f *follower) set(state, detail string, since time.Time) {
	f.mu.Lock()
	if f.channel.State == state && f.channel.Detail == detail {
		f.mu.Unlock()
		return
	}
	f.channel = lease.Channel{State: state, Detail: detail, Since: since}
	f.mu.Unlock()
	d := f.d
	_, err := d.store.UpdateDelegation(f.id, func(del *lease.Delegation) error {
		if del.State.Terminal() || !del.SetChannel(state, detail, since) {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, errUnchanged) {
			d.log.Warn("record the executor's channel", "delegation", f.id, "err", err)
		}
		return
	}
	d.log.Info("executor channel", "delegation", f.id, "state", state, "detail", detail)
	if d.opts.Progress != nil {
		d.opts.Progress(f.id, &control.Event{DelegationID: f.id, Type: control.EventChannel, Status: state, Message: detail,
			Timestamp: control.Timestamp(since)})
	}
}

// state is the channel's state now.
func (f *follower) state() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.channel.State
}

// permission notes a permission event: pending, or decided.
func (f *follower) permission(ev *control.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ev.Outcome == control.PermissionPending {
		f.pending[ev.RequestID] = ev.Message
	} else {
		delete(f.pending, ev.RequestID)
	}
}

// backToLive sets the channel of a running task live: waiting while a
// permission request is pending, else running.
func (f *follower) backToLive() {
	f.mu.Lock()
	running := f.running
	state, detail := lease.ChannelRunning, ""
	for _, title := range f.pending {
		state, detail = lease.ChannelWaiting, "for a permission decision: "+title
		break
	}
	f.mu.Unlock()
	if running {
		f.set(state, detail, f.d.store.Now())
	}
}

// recordGap records that events from..to could not be replayed.
func (f *follower) recordGap(from, to uint64) {
	d := f.d
	now := d.store.Now()
	_, err := d.store.UpdateDelegation(f.id, func(del *lease.Delegation) error {
		if del.State.Terminal() {
			return errUnchanged
		}
		del.RecordGap(from, to, now)
		return nil
	})
	if err != nil {
		return
	}
	d.log.Warn("events lost between reconnections", "delegation", f.id, "from", from, "to", to)
	if d.opts.Progress != nil {
		d.opts.Progress(f.id, &control.Event{DelegationID: f.id, Type: control.EventChannel, Status: f.state(),
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
