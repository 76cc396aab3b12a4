package delegator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/lease"
)

// A session with an executor whose agent is a command, not an ACP agent:
// its turns are rounds — the first the task, the next ones CONTINUE on
// the same workspace, each turn's reply the round's words — and its end
// a CLOSE, after which every round's edit is in the owner's directory. A
// round whose agent fails fails its turn, not the session.
func TestSessionOfRounds(t *testing.T) {
	x := executortest.New(t, `[ "$AWCP_PROMPT" = fail ] && { echo broke >&2; exit 3; }; echo "$AWCP_PROMPT" >> rounds.txt; echo "did: $AWCP_PROMPT"`, func(o *executor.Options) { o.RoundWait = time.Minute })
	dlg, store := newArchiveDelegator(t, nil)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "rounds.txt"), []byte("start\n"), 0o644)
	d, err := dlg.Create(ExportRequest{Dir: dir, Peer: x.Srv.URL, PeerKey: x.Key(), Prompt: "first", Transport: control.TransportArchive, Driven: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if rounds, err := dlg.PreferRounds(ctx, d.ID); err != nil || !rounds {
		t.Fatalf("an executor without an ACP agent: rounds %v (%v)", rounds, err)
	}
	driven := make(chan error, 1)
	go func() { driven <- dlg.DriveRounds(ctx, d.ID, 0, 20*time.Millisecond) }()
	awaits := func(n int) *lease.Delegation {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			del, err := store.Delegation(d.ID)
			if err != nil {
				t.Fatal(err)
			}
			if del.State.Terminal() {
				t.Fatalf("the session ended (%s, %+v) before turn %d", del.State, del.Failure, n)
			}
			if del.Awaiting() && del.LastTurn().N == n {
				return del
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("turn %d never ended", n)
		return nil
	}
	for n, prompt := range []string{"first", "second", "fail", "third"} {
		if n > 0 {
			if _, err := dlg.Say(d.ID, prompt, "test"); err != nil {
				t.Fatal(err)
			}
		}
		del := awaits(n + 1)
		turn := del.LastTurn()
		if prompt == "fail" {
			if turn.State != lease.TurnFailed || !strings.Contains(turn.Error, "3") {
				t.Errorf("the failed round's turn: %+v", turn)
			}
			continue
		}
		if turn.Reply != "did: "+prompt || turn.State != lease.TurnDone {
			t.Errorf("turn %d: %+v", n+1, turn)
		}
	}
	if err := dlg.EndSession(d.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-driven:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("CLOSE did not end the session")
	}
	end, _ := store.Delegation(d.ID)
	if end.State != lease.Completed || end.Session != control.SessionRounds || end.Summary != "did: third" {
		t.Fatalf("ended %s, session %q, summary %q (%+v)", end.State, end.Session, end.Summary, end.Failure)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "rounds.txt")); string(b) != "start\nfirst\nsecond\nthird\n" {
		t.Errorf("the owner's rounds.txt: %q", b)
	}
}
