package executor_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
)

// roundsDelegator is the reference's delegator of its development line
// (8d66b97) driving our executor: the captured head INVITE and START,
// then, at each round_done, CONTINUE with the next task, and CLOSE after
// the last; it returns every event of the one stream.
func roundsDelegator(t *testing.T, x *executortest.Fixture, id string, tasks []string, send func(id string, round int) string) []map[string]any {
	t.Helper()
	post := func(body string) (int, map[string]any) {
		resp, err := http.Post(x.Srv.URL+"/awcp", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	if code, m := post(captured(t, "invite-head.json", id)); code != 200 || m["type"] != control.TypeAccept {
		t.Fatalf("INVITE: %d %v", code, m)
	}
	stream, err := http.Get(x.Srv.URL + "/awcp/tasks/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if code, m := post(captured(t, "start-head.json", id)); code != 200 {
		t.Fatalf("START: %d %v", code, m)
	}
	var events []map[string]any
	err = control.ReadSSE(stream.Body, t.TempDir(), 0, func(_ uint64, data []byte, result control.Spooled) (bool, error) {
		var m map[string]any
		json.Unmarshal(data, &m)
		if result.File != "" {
			b, _ := os.ReadFile(result.File)
			m["snapshotBase64"] = base64.StdEncoding.EncodeToString(b)
		}
		events = append(events, m)
		if m["type"] == control.EventRoundDone {
			round := int(m["round"].(float64))
			if body := send(id, round); body != "" {
				if code, m := post(body); code != 200 {
					t.Errorf("after round %d: %d %v", round, code, m)
				}
			}
		}
		return m["type"] == control.EventDone || m["type"] == control.EventError, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// Three rounds, then CLOSE, as the reference's delegator drives them: each
// round runs the agent again with its task on the same workspace, and
// sends a snapshot holding every round's work so far and round_done; a
// CONTINUE mid-round, one out of order and one for a delegation that
// takes no rounds are refused; CLOSE ends it with done naming the
// rounds' snapshots, the last one the result.
func TestRoundsAsTheReferenceDrivesThem(t *testing.T) {
	x := executortest.New(t, `echo "$AWCP_PROMPT" >> rounds.txt; sleep 0.3; echo "did: $AWCP_PROMPT"`, func(o *executor.Options) { o.RoundWait = time.Minute })
	id := "dlg_rounds0001"
	tasks := map[int]string{2: "second task", 3: "third task"}
	var refused []int
	cont := func(id string, round int) string {
		third := `{"version":"1","type":"CONTINUE","delegationId":"` + id + `","round":3,"task":{"description":"x","prompt":"x"}}`
		if round == 1 {
			// Out of order; then round 2, and at once its next: mid-round.
			refused = append(refused, postCode(t, x, third))
			if code := postCode(t, x, `{"version":"1","type":"CONTINUE","delegationId":"`+id+`","round":2,"task":{"description":"second task","prompt":"second task"}}`); code != 200 {
				t.Fatalf("CONTINUE round 2: HTTP %d", code)
			}
			refused = append(refused, postCode(t, x, third))
			return ""
		}
		if next, ok := tasks[round+1]; ok {
			return `{"version":"1","type":"CONTINUE","delegationId":"` + id + `","round":` + itoa(round+1) +
				`,"task":{"description":"` + next + `","prompt":"` + next + `"}}`
		}
		return `{"version":"1","type":"CLOSE","delegationId":"` + id + `"}`
	}
	events := roundsDelegator(t, x, id, nil, cont)
	if len(refused) != 2 || refused[0] != http.StatusConflict || refused[1] != http.StatusConflict {
		t.Errorf("CONTINUE out of order, then mid-round: HTTP %v, want 409 each", refused)
	}
	var types []string
	var snaps []map[string]any
	for _, ev := range events {
		types = append(types, ev["type"].(string))
		if ev["type"] == control.EventSnapshot {
			snaps = append(snaps, ev)
		}
	}
	if n := strings.Count(strings.Join(types, " "), "round_done"); n != 3 || types[len(types)-1] != "done" {
		t.Fatalf("events %v: want three rounds, then done", types)
	}
	want := []string{"", "second task\n", "second task\nthird task\n"} // after round 1's line, the INVITE's prompt
	if len(snaps) != 3 {
		t.Fatalf("%d snapshots, want one a round", len(snaps))
	}
	var ids []any
	for i, s := range snaps {
		files := unzipString(t, s["snapshotBase64"].(string))
		if !strings.HasSuffix(files["workspace/rounds.txt"], want[i]) ||
			strings.Count(files["workspace/rounds.txt"], "\n") != i+1 {
			t.Errorf("round %d's snapshot: rounds.txt %q", i+1, files["workspace/rounds.txt"])
		}
		ids = append(ids, s["snapshotId"])
	}
	done := events[len(events)-1]
	if !slices.Equal(done["snapshotIds"].([]any), ids) || done["recommendedSnapshotId"] != ids[2] || !strings.Contains(done["summary"].(string), "did: third task") {
		t.Errorf("done %v, want the three snapshots named, the last recommended, its words", done)
	}
	if code, res := getResult(t, x, id); code != 200 || !strings.HasSuffix(unzipString(t, res["snapshotBase64"].(string))["workspace/rounds.txt"], "third task\n") {
		t.Errorf("GET /result after the rounds: %d", code)
	}
}

// postCode posts an AWCP message, giving the HTTP status.
func postCode(t *testing.T, x *executortest.Fixture, body string) int {
	t.Helper()
	resp, err := http.Post(x.Srv.URL+"/awcp", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Past the wait with neither CONTINUE nor CLOSE — a head delegator that
// knows no rounds, the reference's release — the delegation ends as a
// one-round one: done naming round 1's snapshot. A delegation that takes
// no rounds refuses CONTINUE.
func TestRoundsWaitEndsAsOneRound(t *testing.T) {
	x := executortest.New(t, `echo changed >> hello.txt`, func(o *executor.Options) { o.RoundWait = 300 * time.Millisecond })
	id := "dlg_rounds0002"
	_, events := headDelegator(t, x, id, "start-head.json")
	var types []string
	for _, ev := range events {
		types = append(types, ev["type"].(string))
	}
	if !slices.Equal(types, []string{"status", "snapshot", "round_done", "done"}) {
		t.Fatalf("events %v", types)
	}
	if done := events[3]; done["recommendedSnapshotId"] != events[1]["snapshotId"] {
		t.Errorf("done %v does not name round 1's snapshot", done)
	}
	if files := unzipString(t, events[1]["snapshotBase64"].(string)); files["workspace/hello.txt"] != "hi\nchanged\n" {
		t.Errorf("the snapshot: %q", files)
	}
	if code := postCode(t, x, `{"version":"1","type":"CONTINUE","delegationId":"`+id+`","round":2,"task":{"description":"x","prompt":"x"}}`); code != http.StatusNotFound {
		t.Errorf("CONTINUE after the end: HTTP %d, want 404", code)
	}

	none := executortest.New(t, `echo changed >> hello.txt`, nil) // RoundWait 0: no rounds
	_, events = headDelegator(t, none, "dlg_rounds0003", "start-head.json")
	if last := events[len(events)-1]; last["type"] != control.EventDone || len(events) != 3 {
		t.Errorf("without rounds: %v", events)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
