//go:build linux

package delegator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
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

// asTheReference stands between a delegator and our executor as the
// reference's executor would answer it: no /manifest, and an INVITE's
// session request unread (taken out before our executor sees it).
func asTheReference(t *testing.T, executorURL string) string {
	t.Helper()
	target, _ := url.Parse(executorURL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/manifest" {
			http.NotFound(w, r)
			return
		}
		if r.Method == http.MethodPost && r.URL.Path == "/awcp" {
			body, _ := io.ReadAll(r.Body)
			var m map[string]any
			if json.Unmarshal(body, &m) == nil && m["type"] == control.TypeInvite {
				delete(m, "session")
				body, _ = json.Marshal(m)
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A session with a head executor that reads no session request and
// answers with its rounds (the reference's development line, played by
// our executor behind asTheReference) goes as rounds; with one that knows
// no rounds (its release: rounds off), the session ends with its first
// turn, its work applied, and says so.
func TestSessionOfRoundsWithTheReference(t *testing.T) {
	for _, rounds := range []bool{true, false} {
		t.Run(map[bool]string{true: "development line", false: "release"}[rounds], func(t *testing.T) {
			x := executortest.New(t, `echo "$AWCP_PROMPT" >> rounds.txt; echo "did: $AWCP_PROMPT"`, func(o *executor.Options) {
				if rounds {
					o.RoundWait = time.Minute
				}
			})
			dlg, store := newArchiveDelegator(t, nil)
			dir := t.TempDir()
			d, err := dlg.Create(ExportRequest{Dir: dir, Peer: asTheReference(t, x.Srv.URL), PlainHTTP: true, Prompt: "first",
				Transport: control.TransportArchive, Dialect: control.DialectHead, Driven: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if ok, err := dlg.PreferRounds(ctx, d.ID); err != nil || !ok {
				t.Fatalf("no manifest: rounds %v (%v)", ok, err)
			}
			driven := make(chan error, 1)
			go func() { driven <- dlg.DriveRounds(ctx, d.ID, 0, 20*time.Millisecond) }()
			wait := func(what string, ok func(*lease.Delegation) bool) *lease.Delegation {
				t.Helper()
				for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if del, _ := store.Delegation(d.ID); del != nil && ok(del) {
						return del
					}
				}
				t.Fatalf("never: %s", what)
				return nil
			}
			if !rounds {
				end := wait("the end", func(del *lease.Delegation) bool { return del.State.Terminal() })
				if end.State != lease.Completed || !slices.Contains(end.Notes, "the executor knows no rounds: the session ended with its first turn") {
					t.Errorf("ended %s, notes %q", end.State, end.Notes)
				}
				if b, _ := os.ReadFile(filepath.Join(dir, "rounds.txt")); string(b) != "first\n" {
					t.Errorf("rounds.txt %q", b)
				}
				return
			}
			for _, prompt := range []string{"second", "third"} {
				wait("awaiting", (*lease.Delegation).Awaiting)
				if _, err := dlg.Say(d.ID, prompt, "test"); err != nil {
					t.Fatal(err)
				}
			}
			wait("the third turn's end", func(del *lease.Delegation) bool { return del.Awaiting() && del.LastTurn().N == 3 })
			dlg.EndSession(d.ID)
			<-driven
			end, _ := store.Delegation(d.ID)
			if b, _ := os.ReadFile(filepath.Join(dir, "rounds.txt")); end.State != lease.Completed || string(b) != "first\nsecond\nthird\n" {
				t.Errorf("ended %s (%+v); rounds.txt %q", end.State, end.Failure, b)
			}
		})
	}
}
