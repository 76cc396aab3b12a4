package lease

import (
	"errors"
	"fmt"
	"time"
)

// A session delegation driven from the store (MCP's delegate, `awcp-ctl
// export --session`) takes its turns from the record: a command or tool
// queues a prompt (QueueTurn), the process that holds the session's
// channel runs it and writes back the agent's reply. Permission requests
// of a turn are the record's Permissions, answered there too.

// Turn states.
const (
	TurnQueued    = "queued"    // written, not yet sent to the agent
	TurnRunning   = "running"   // the agent works on it
	TurnDone      = "done"      // the agent ended it (StopReason says how)
	TurnCancelled = "cancelled" // cancelled before or while it ran
	TurnFailed    = "failed"    // the channel or the agent failed it
)

// MaxTurns is how many turns a session's record keeps, and MaxReply how
// much of one reply (its end is kept).
const (
	MaxTurns = 64
	MaxReply = 64 << 10
)

// Turn is one prompt of a driven session and what became of it.
type Turn struct {
	N          int       `json:"n"`
	Prompt     string    `json:"prompt"`
	By         string    `json:"by,omitempty"` // who queued it
	State      string    `json:"state"`
	StopReason string    `json:"stopReason,omitempty"` // ACP's: end_turn, cancelled, max_tokens, …
	Reply      string    `json:"reply,omitempty"`      // the agent's message, its last MaxReply bytes
	Error      string    `json:"error,omitempty"`
	QueuedAt   time.Time `json:"queuedAt"`
	EndedAt    time.Time `json:"endedAt,omitzero"`
	// CancelAsked asks the process driving the session to cancel this
	// turn (session/cancel), leaving the session open.
	CancelAsked bool `json:"cancelAsked,omitempty"`
}

// Ended reports whether the turn is over.
func (t *Turn) Ended() bool {
	return t.State == TurnDone || t.State == TurnCancelled || t.State == TurnFailed
}

// ErrTurnBusy refuses a turn while another is queued or running.
var ErrTurnBusy = errors.New("a turn is still running")

// QueueTurn adds prompt as the session's next turn, unless one is queued
// or running. It returns the turn's number.
func (d *Delegation) QueueTurn(prompt, by string, now time.Time) (int, error) {
	if !d.SessionDriven {
		return 0, fmt.Errorf("delegation %s is not a session driven from here", d.ID)
	}
	if t := d.LastTurn(); t != nil && !t.Ended() {
		return 0, fmt.Errorf("%w: turn %d is %s", ErrTurnBusy, t.N, t.State)
	}
	n := 1
	if t := d.LastTurn(); t != nil {
		n = t.N + 1
	}
	d.Turns = append(d.Turns, Turn{N: n, Prompt: prompt, By: by, State: TurnQueued, QueuedAt: now})
	if len(d.Turns) > MaxTurns {
		d.Turns = append(d.Turns[:0], d.Turns[len(d.Turns)-MaxTurns:]...)
	}
	return n, nil
}

// LastTurn is the session's latest turn, or nil.
func (d *Delegation) LastTurn() *Turn {
	if len(d.Turns) == 0 {
		return nil
	}
	return &d.Turns[len(d.Turns)-1]
}

// Turn is turn n, or nil.
func (d *Delegation) Turn(n int) *Turn {
	for i := range d.Turns {
		if d.Turns[i].N == n {
			return &d.Turns[i]
		}
	}
	return nil
}

// PendingPermission is the first permission request still waiting for an
// answer, or nil.
func (d *Delegation) PendingPermission() *Permission {
	for i := range d.Permissions {
		if d.Permissions[i].Outcome == "pending" {
			return &d.Permissions[i]
		}
	}
	return nil
}

// Awaiting reports whether a live driven session waits on its user: for
// a permission decision, or — its last turn ended — for the next prompt
// (seed 003's awaiting).
func (d *Delegation) Awaiting() bool {
	if !d.SessionDriven || d.State.Terminal() || d.SessionClose {
		return false
	}
	if d.PendingPermission() != nil {
		return true
	}
	t := d.LastTurn()
	return t != nil && t.Ended()
}

// KeepReply is the end of reply that a record keeps.
func KeepReply(reply string) string {
	if len(reply) <= MaxReply {
		return reply
	}
	return "…" + reply[len(reply)-MaxReply:]
}
