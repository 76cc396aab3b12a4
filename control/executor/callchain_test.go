package executor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
)

const selfID = "11111111-2222-4333-8444-555555555555"

// An executor in the INVITE's call chain refuses it, on the wire, as the
// seed's circular_call_detected: DECLINED, the reason and the chain; one
// outside it runs the task and hands its agent the chain with itself
// appended. A peer that sends no chain is served as before.
func TestCallChainRefusedAndHandedOn(t *testing.T) {
	f := executortest.New(t, `printf %s "$AWCP_CALL_CHAIN" > "$AWCP_SUMMARY_FILE"`, func(o *executor.Options) {
		o.AgentID = selfID
	})
	for _, chain := range [][]string{{"aaaa", selfID, "bbbb"}, {selfID, selfID}} {
		loop := invite("dlg_loop")
		loop.CallChain = chain
		refusedAsCircular(t, f, loop)
	}

	for _, tc := range []struct {
		id, want string
		chain    []string
	}{
		{"dlg_chain", "aaaa,bbbb," + selfID, []string{"aaaa", "bbbb"}},
		{"dlg_nochain", selfID, nil},
		// Begun by a person at this agent's own delegator (one machine,
		// one state dir): taken.
		{"dlg_self", selfID, []string{selfID}},
	} {
		inv := invite(tc.id)
		inv.CallChain = tc.chain
		if _, err := peer(f, "").Invite(context.Background(), inv); err != nil {
			t.Fatal(err)
		}
		if err := peer(f, "").Start(context.Background(), start(tc.id, workspace(t, map[string]string{"a": "1"}), time.Now().Add(time.Minute))); err != nil {
			t.Fatal(err)
		}
		if done := last(events(f, tc.id, 0)); done.Type != control.EventDone || done.Summary != tc.want {
			t.Fatalf("%s: the agent got AWCP_CALL_CHAIN %q, want %q", tc.id, done.Summary, tc.want)
		}
	}
}

func refusedAsCircular(t *testing.T, f *executortest.Fixture, loop *control.Invite) {
	t.Helper()
	resp := post(t, f, loop)
	var m control.Error
	if err := json.Unmarshal(resp, &m); err != nil || m.Type != control.TypeError || m.Code != control.CodeDeclined ||
		m.Reason != control.ReasonCircularCall || strings.Join(m.CallChain, ",") != strings.Join(loop.CallChain, ",") ||
		!strings.Contains(m.Message, "circular call: agent "+selfID) {
		t.Fatalf("INVITE with the executor in its chain answered %s (%v)", resp, err)
	}
	if _, err := f.Store.Assignment("dlg_loop"); err == nil {
		t.Fatal("a refused INVITE was recorded")
	}
}

// A chain that is not a list of agent ids is refused, not logged.
func TestCallChainMalformed(t *testing.T) {
	f := executortest.New(t, `true`, func(o *executor.Options) { o.AgentID = selfID })
	for _, chain := range [][]string{{"a b"}, {strings.Repeat("x", 65)}, make([]string, control.MaxCallChain+1)} {
		inv := invite("dlg_bad")
		inv.CallChain = chain
		var pe *control.ProtocolError
		if _, err := peer(f, "").Invite(context.Background(), inv); !errors.As(err, &pe) || pe.Code != control.CodeDeclined {
			t.Fatalf("chain %q: %v", chain, err)
		}
	}
}

// GET /manifest says who the executor is and what it offers now.
func TestManifest(t *testing.T) {
	f := executortest.New(t, `sleep 60`, func(o *executor.Options) {
		o.AgentID, o.Name, o.MaxConcurrent = selfID, "builder", 2
		o.Skills = []control.CardSkill{{ID: "go-tests", Name: "go-tests", Description: "writes Go tests"}}
	})
	var m control.Manifest
	getJSON(t, f.URL()+"/manifest", &m)
	if m.AgentID != selfID || m.Name != "builder" || m.AWCP == nil || m.AWCP.FreeSlots != 2 || m.AWCP.MaxConcurrent != 2 ||
		m.AWCP.FUSE || strings.Join(m.AWCP.Transports, ",") != "archive" || !m.AWCP.CallChain ||
		m.Endpoints["awcp"] != f.URL()+"/awcp" || len(m.Capabilities) != 2 || m.Capabilities[1].ID != "go-tests" {
		t.Fatalf("manifest %+v %+v", m, m.AWCP)
	}
	delegate(f, "dlg_busy", workspace(t, map[string]string{"a": "1"}))
	getJSON(t, f.URL()+"/manifest", &m)
	if m.AWCP.FreeSlots != 1 {
		t.Fatalf("a running delegation leaves %d free slots, want 1", m.AWCP.FreeSlots)
	}
	var card control.AgentCard
	getJSON(t, f.URL()+"/.well-known/agent-card.json", &card)
	if ext, _ := card.AWCP(); ext.Params["agentId"] != selfID {
		t.Fatalf("the card's AWCP extension names agent %v", ext.Params["agentId"])
	}
}

func post(t *testing.T, f *executortest.Fixture, v any) []byte {
	t.Helper()
	b, _ := json.Marshal(v)
	resp, err := http.Post(f.URL()+"/awcp", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return body
}
