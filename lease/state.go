// Package lease is the delegation lease model of AWCP v1: the nine states and
// transition table of spec §8.1, the bbolt store both daemons keep their
// leases and events in, and the expiry scheduler.
//
// # Persistence
//
// Every transition is written to the store, with its time, inside the same
// bbolt transaction that checks it against the table; callers act on a
// transition only after [Store] has committed it. lease is the only package
// that imports bbolt.
package lease

import "fmt"

// State is a lifecycle state of spec §8.1.
type State string

// The nine states.
const (
	Created   State = "created"
	Invited   State = "invited"
	Accepted  State = "accepted"
	Started   State = "started"
	Running   State = "running"
	Completed State = "completed"
	Error     State = "error"
	Cancelled State = "cancelled"
	Expired   State = "expired"
)

// States lists every state in lifecycle order.
var States = []State{Created, Invited, Accepted, Started, Running, Completed, Error, Cancelled, Expired}

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool {
	switch s {
	case Completed, Error, Cancelled, Expired:
		return true
	}
	return false
}

// Event is a transition event of spec §8.1.
type Event string

// The transition events. SEND_ERROR and RECEIVE_ERROR behave the same; both
// exist so the history says which side failed.
const (
	SendInvite    Event = "SEND_INVITE"
	ReceiveAccept Event = "RECEIVE_ACCEPT"
	SendStart     Event = "SEND_START"
	SetupComplete Event = "SETUP_COMPLETE"
	ReceiveDone   Event = "RECEIVE_DONE"
	ReceiveError  Event = "RECEIVE_ERROR"
	SendError     Event = "SEND_ERROR"
	Cancel        Event = "CANCEL"
	Expire        Event = "EXPIRE"
)

// Events lists every event.
var Events = []Event{SendInvite, ReceiveAccept, SendStart, SetupComplete, ReceiveDone, ReceiveError, SendError, Cancel, Expire}

// Next returns the state event leads to from s, or an error if the table of
// spec §8.1 has no such transition.
func Next(s State, e Event) (State, error) {
	var to State
	switch e {
	case SendInvite:
		if s == Created {
			to = Invited
		}
	case ReceiveAccept:
		if s == Invited {
			to = Accepted
		}
	case SendStart:
		if s == Accepted {
			to = Started
		}
	case SetupComplete:
		if s == Started {
			to = Running
		}
	case ReceiveDone:
		if s == Running {
			to = Completed
		}
	case ReceiveError, SendError:
		if !s.Terminal() {
			to = Error
		}
	case Cancel:
		if !s.Terminal() {
			to = Cancelled
		}
	case Expire:
		// Not from created (no lease yet) nor started (setup is under way
		// and must finish or fail first).
		if s == Invited || s == Accepted || s == Running {
			to = Expired
		}
	}
	if to == "" {
		return s, &TransitionError{From: s, Event: e}
	}
	return to, nil
}

// CanFire reports whether e is valid in s.
func CanFire(s State, e Event) bool {
	_, err := Next(s, e)
	return err == nil
}

// TransitionError is returned for an event the table does not allow.
type TransitionError struct {
	From  State
	Event Event
}

func (e *TransitionError) Error() string {
	if e.From.Terminal() {
		return fmt.Sprintf("lease is already %s; %s has no effect", e.From, e.Event)
	}
	return fmt.Sprintf("%s is not allowed in state %s", e.Event, e.From)
}
