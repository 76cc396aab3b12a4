package lease

import "time"

// MaxProgress is how many of the agent's progress lines a delegation
// keeps: the last ones, for `awcp-ctl logs`, `output` and the MCP tools.
const MaxProgress = 200

// ProgressLine is one progress event of the executor's agent.
type ProgressLine struct {
	Seq  uint64    `json:"seq,omitempty"` // the executor's event id; 0 if it numbers none
	At   time.Time `json:"at"`
	Text string    `json:"text"`
}

// AddProgress appends lines, keeping the last MaxProgress, and counts
// those that no longer fit in ProgressDropped.
func (d *Delegation) AddProgress(lines ...ProgressLine) {
	d.Progress = append(d.Progress, lines...)
	if n := len(d.Progress); n > MaxProgress {
		d.ProgressDropped += uint64(n - MaxProgress)
		d.Progress = append(d.Progress[:0], d.Progress[n-MaxProgress:]...)
	}
}

// ProgressAfter is the lines of progress after last: all of them if last
// is nil or no longer kept. Followers that read the record again and
// again (awcp-ctl logs -f, the MCP tools) show each line once with it.
func ProgressAfter(progress []ProgressLine, last *ProgressLine) []ProgressLine {
	if last == nil {
		return progress
	}
	for i := len(progress) - 1; i >= 0; i-- {
		if l := progress[i]; l.Seq == last.Seq && l.At.Equal(last.At) && l.Text == last.Text {
			return progress[i+1:]
		}
	}
	return progress
}

// MountRefused is what an executor's read-only live mount refused its
// agent: how many writes, and the first few (operation and name).
type MountRefused struct {
	Count    uint64   `json:"count"`
	Examples []string `json:"examples,omitempty"`
}

// SessionChannel is a session delegation's channel as seed 002 names it:
// its identity, how it runs, and when it was last heard.
type SessionChannel struct {
	ID           string    `json:"channelId"`
	Transport    string    `json:"transport"`    // "awcp-acp" (HTTP upgrade, then ACP's NDJSON)
	PeerRole     string    `json:"peerRole"`     // the far end: "executor"
	Capabilities []string  `json:"capabilities"` // what the editor declared: fs.readTextFile, …
	LastSeenAt   time.Time `json:"lastSeenAt"`
	// SessionID is the agent's ACP session, which a restarted editor
	// names to take the session over (session/load).
	SessionID string `json:"sessionId,omitempty"`
	// AgentSessionID is the agent's own id of it, where it differs (an
	// open session's agent chose the same).
	AgentSessionID string `json:"agentSessionId,omitempty"`
}

// SessionEvent is one of seed 002's channel events:
// channel.connected, channel.disconnected, channel.resumed,
// channel.permission_forwarded, channel.permission_returned.
type SessionEvent struct {
	At     time.Time `json:"at"`
	Event  string    `json:"event"`
	Detail string    `json:"detail,omitempty"`
}

// MaxSessionEvents is how many channel events a delegation keeps.
const MaxSessionEvents = 256

// AddSessionEvent records ev, keeping the last MaxSessionEvents, and
// that the channel was heard at ev.At.
func (d *Delegation) AddSessionEvent(ev SessionEvent) {
	d.SessionEvents = append(d.SessionEvents, ev)
	if n := len(d.SessionEvents); n > MaxSessionEvents {
		d.SessionEvents = append(d.SessionEvents[:0], d.SessionEvents[n-MaxSessionEvents:]...)
	}
	if d.SessionChannel != nil {
		d.SessionChannel.LastSeenAt = ev.At
	}
}
