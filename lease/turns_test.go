package lease

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A session takes one turn at a time; it awaits its user when the last
// turn ended or a permission is pending, never once it has ended or is
// closing; a reply too long keeps its end.
func TestSessionTurns(t *testing.T) {
	now := time.Now()
	d := &Delegation{Lease: Lease{ID: "d", State: Running}}
	if _, err := d.QueueTurn("x", "", now); err == nil {
		t.Fatal("a task took a turn")
	}
	d.SessionDriven = true
	if n, err := d.QueueTurn("first", "me", now); err != nil || n != 1 || d.Awaiting() {
		t.Fatalf("first turn: %d %v, awaiting %v", n, err, d.Awaiting())
	}
	if _, err := d.QueueTurn("second", "me", now); !errors.Is(err, ErrTurnBusy) {
		t.Fatalf("a turn while one is queued: %v", err)
	}
	d.LastTurn().State = TurnRunning
	d.Permissions = append(d.Permissions, Permission{RequestID: "perm-1", Outcome: "pending"})
	if !d.Awaiting() || d.PendingPermission().RequestID != "perm-1" {
		t.Fatal("a pending permission is not awaited")
	}
	d.Permissions[0].Outcome = "selected"
	if d.Awaiting() {
		t.Fatal("a running turn awaits")
	}
	d.LastTurn().State = TurnDone
	if !d.Awaiting() {
		t.Fatal("an ended turn does not await the next")
	}
	if n, err := d.QueueTurn("second", "me", now); err != nil || n != 2 || d.Turn(2).Prompt != "second" {
		t.Fatalf("second turn: %d %v", n, err)
	}
	d.LastTurn().State = TurnDone
	d.SessionClose = true
	if d.Awaiting() {
		t.Fatal("a closing session awaits")
	}
	d.SessionClose, d.State = false, Completed
	if d.Awaiting() {
		t.Fatal("an ended session awaits")
	}
	long := strings.Repeat("a", MaxReply) + "the end"
	if k := KeepReply(long); !strings.HasSuffix(k, "the end") || len(k) > MaxReply+len("…") {
		t.Fatalf("a long reply kept %d bytes", len(k))
	}
	for i := 0; i < MaxTurns+5; i++ {
		d.State = Running
		d.LastTurn().State = TurnDone
		if _, err := d.QueueTurn("more", "", now); err != nil {
			t.Fatal(err)
		}
	}
	if len(d.Turns) != MaxTurns {
		t.Fatalf("%d turns kept, want %d", len(d.Turns), MaxTurns)
	}
}
