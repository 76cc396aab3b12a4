package lease

import (
	"errors"
	"testing"
)

// TestNextEveryPair checks all 81 (state, event) pairs against spec §8.1.
func TestNextEveryPair(t *testing.T) {
	// want[state][event] = target; absent means refused.
	want := map[State]map[Event]State{
		Created:  {SendInvite: Invited, ReceiveError: Error, SendError: Error, Cancel: Cancelled},
		Invited:  {ReceiveAccept: Accepted, ReceiveError: Error, SendError: Error, Cancel: Cancelled, Expire: Expired},
		Accepted: {SendStart: Started, ReceiveError: Error, SendError: Error, Cancel: Cancelled, Expire: Expired},
		Started:  {SetupComplete: Running, ReceiveError: Error, SendError: Error, Cancel: Cancelled},
		Running:  {ReceiveDone: Completed, ReceiveError: Error, SendError: Error, Cancel: Cancelled, Expire: Expired},
	}
	for _, s := range States {
		for _, e := range Events {
			t.Run(string(s)+"/"+string(e), func(t *testing.T) {
				to, err := Next(s, e)
				target, ok := want[s][e]
				if ok {
					if err != nil || to != target {
						t.Fatalf("Next(%s, %s) = %s, %v; want %s", s, e, to, err, target)
					}
					return
				}
				var te *TransitionError
				if !errors.As(err, &te) || to != s {
					t.Fatalf("Next(%s, %s) = %s, %v; want refusal", s, e, to, err)
				}
				if CanFire(s, e) {
					t.Fatalf("CanFire(%s, %s) = true", s, e)
				}
			})
		}
	}
}

func TestTerminal(t *testing.T) {
	for _, s := range States {
		want := s == Completed || s == Error || s == Cancelled || s == Expired
		if s.Terminal() != want {
			t.Errorf("%s.Terminal() = %v", s, !want)
		}
	}
}
