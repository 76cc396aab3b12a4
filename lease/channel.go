package lease

import (
	"strconv"
	"time"
)

// The channel is the delegator's view of the executor's side of a
// delegation that has not ended (seed 002, "Remote channels"): not a
// state of the lease — the lease alone ends a delegation — but what the
// event stream says of the executor now. None of these is a failure.
const (
	// ChannelRunning: the executor runs the task and its stream is live.
	ChannelRunning = "running"
	// ChannelIdle: running, but no event for a while (the agent is quiet).
	ChannelIdle = "idle"
	// ChannelWaiting: the agent waits for a permission decision.
	ChannelWaiting = "waiting"
	// ChannelFinishing: done arrived; its result is not applied yet.
	ChannelFinishing = "finished-not-applied"
	// ChannelUnreachable: the executor cannot be reached (network, or
	// its token refused) since Since.
	ChannelUnreachable = "unreachable"
	// ChannelMissing: the executor answers, and does not know the
	// delegation (it restarted without it, or dropped it).
	ChannelMissing = "missing"
)

// MaxChannelLog is how many channel changes a delegation keeps.
const MaxChannelLog = 64

// Channel is where the executor's side stands.
type Channel struct {
	State  string    `json:"state"`
	Since  time.Time `json:"since"`
	Detail string    `json:"detail,omitempty"`
}

// ChannelChange is one entry of the channel's log.
type ChannelChange struct {
	State  string    `json:"state"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// EventGap is a run of events, From to To, that the executor no longer
// had when its stream was followed again (its bounded store dropped them,
// or it replays only some).
type EventGap struct {
	From uint64    `json:"from"`
	To   uint64    `json:"to"`
	At   time.Time `json:"at"`
}

// SetChannel records the channel in state since at, with detail, and logs
// the change; it reports whether anything changed. The same state with a
// new detail is logged, its Since kept.
func (d *Delegation) SetChannel(state, detail string, at time.Time) bool {
	if c := d.Channel; c != nil && c.State == state {
		if c.Detail == detail {
			return false
		}
		c.Detail = detail
	} else {
		d.Channel = &Channel{State: state, Since: at, Detail: detail}
	}
	d.logChannel(state, detail, at)
	return true
}

func (d *Delegation) logChannel(state, detail string, at time.Time) {
	d.ChannelLog = append(d.ChannelLog, ChannelChange{State: state, Detail: detail, At: at})
	if n := len(d.ChannelLog); n > MaxChannelLog {
		d.ChannelLog = append(d.ChannelLog[:0], d.ChannelLog[n-MaxChannelLog:]...)
	}
}

// RecordGap records events from..to as lost, in the gaps and the log.
func (d *Delegation) RecordGap(from, to uint64, at time.Time) {
	const maxGaps = 32
	d.Gaps = append(d.Gaps, EventGap{From: from, To: to, At: at})
	if n := len(d.Gaps); n > maxGaps {
		d.Gaps = append(d.Gaps[:0], d.Gaps[n-maxGaps:]...)
	}
	state := ""
	if d.Channel != nil {
		state = d.Channel.State
	}
	d.logChannel(state, gapText(from, to), at)
}

func gapText(from, to uint64) string {
	if from == to {
		return "event " + strconv.FormatUint(from, 10) + " was lost: the executor no longer had it"
	}
	return "events " + strconv.FormatUint(from, 10) + "–" + strconv.FormatUint(to, 10) + " were lost: the executor no longer had them"
}
