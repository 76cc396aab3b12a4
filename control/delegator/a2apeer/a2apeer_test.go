package a2apeer

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// A file part's name is a path of the directory, or nothing.
func TestResultName(t *testing.T) {
	for in, want := range map[string]string{
		"notes.md": "notes.md", "a/./b/../c.txt": "a/c.txt", "docs/x": "docs/x",
		"../escape": "", "a/../../b": "", "/etc/passwd": "", "": "", ".": "", "..": "",
		"a\\b": "", "nul\x00": "", "line\nbreak": "", "esc\x1b[2J": "",
	} {
		if got := resultName(in); got != want {
			t.Errorf("resultName(%q) = %q, want %q", in, got, want)
		}
	}
}

// A card may send tasks to the server it came from, under a loopback name
// for a loopback address; anywhere else is refused.
func TestSameServer(t *testing.T) {
	u := func(s string) *url.URL { v, _ := url.Parse(s); return v }
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"https://agent.example:8443", "https://agent.example:8443/a2a", true},
		{"http://127.0.0.1:18777", "http://localhost:18777/", true},
		{"http://127.0.0.1:18777", "http://[::1]:18777/", true},
		{"https://agent.example:8443", "https://evil.example:8443/a2a", false},
		{"https://agent.example:8443", "http://agent.example:8443/a2a", false},
		{"https://agent.example:8443", "https://agent.example:9443/a2a", false},
		{"http://127.0.0.1:18777", "http://10.0.0.1:18777/", false},
	} {
		if got := sameServer(u(c.a), u(c.b)); got != c.same {
			t.Errorf("sameServer(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

// The workspace's base64 goes where the message's mark is, streamed from
// its file, and nowhere else: not into a prompt that reads like a mark.
func TestSpliceWorkspace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ws.zip")
	os.WriteFile(file, []byte("the zip's bytes"), 0o600)
	body := `{"parts":[{"text":"awcp-workspace-base64"},{"text":"` + workspaceMark[:len(workspaceMark)-1] + `"},{"file":{"bytes":"` + workspaceMark + `"}}]}`
	r, _ := http.NewRequest(http.MethodPost, "http://agent.example/a2a", strings.NewReader(body))
	r, err := spliceWorkspace(r, file)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r.Body)
	want := strings.Replace(body, `"`+workspaceMark+`"`, `"`+base64.StdEncoding.EncodeToString([]byte("the zip's bytes"))+`"`, 1)
	if string(got) != want || r.ContentLength != int64(len(want)) || r.Header.Get("Expect") != "100-continue" {
		t.Errorf("spliced %q (length %d), want %q", got, r.ContentLength, want)
	}
	again, _ := r.GetBody()
	if b, _ := io.ReadAll(again); string(b) != want {
		t.Errorf("GetBody gave %q", b)
	}
}

// A card of either generation names where tasks go: 1.0's interfaces;
// 0.3's url by its transport, JSON-RPC where it names none (Gemini CLI's);
// a card naming neither is refused.
func TestParseCard(t *testing.T) {
	for _, c := range []struct{ name, card, want string }{
		{"1.0", `{"name":"a","supportedInterfaces":[{"url":"http://h/a2a","protocolBinding":"JSONRPC","protocolVersion":"1.0"},{"url":"http://h/rest","protocolBinding":"HTTP+JSON","protocolVersion":"1.0"}]}`,
			"JSONRPC 1.0 http://h/a2a; HTTP+JSON 1.0 http://h/rest"},
		{"0.3", `{"name":"a","url":"http://h/a2a","protocolVersion":"0.3.0","preferredTransport":"JSONRPC"}`, "JSONRPC 0.3.0 http://h/a2a"},
		{"0.3 without a transport", `{"name":"a","url":"http://h/a2a","protocolVersion":"0.3.0"}`, "JSONRPC 0.3 http://h/a2a"},
	} {
		card, err := parseCard([]byte(c.card))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, i := range card.SupportedInterfaces {
			got = append(got, string(i.ProtocolBinding)+" "+string(i.ProtocolVersion)+" "+i.URL)
		}
		if strings.Join(got, "; ") != c.want {
			t.Errorf("%s: %q, want %q", c.name, strings.Join(got, "; "), c.want)
		}
	}
	if _, err := parseCard([]byte(`{"name":"nowhere"}`)); err == nil {
		t.Errorf("a card naming no place was taken")
	}
}

// A 1.0 card may list several interfaces: one on another server is
// refused before anything is sent, wherever it stands in the list.
func TestCardInterfaceElsewhereRefused(t *testing.T) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/agent-card.json" {
			asked.Add(1)
			http.Error(w, "no", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":"a","supportedInterfaces":[{"url":"http://%s/a2a","protocolBinding":"JSONRPC","protocolVersion":"0.3"},
			{"url":"http://collector.example/a2a","protocolBinding":"JSONRPC","protocolVersion":"1.0"}]}`, r.Host)
	}))
	defer srv.Close()
	p := &Peer{Dir: t.TempDir()}
	_, _, err := p.client(context.Background(), &lease.Delegation{Peer: srv.URL, Token: "secret"})
	if err == nil || !strings.Contains(err.Error(), "collector.example") || !strings.Contains(err.Error(), "another place than the agent") {
		t.Fatalf("a card sending tasks elsewhere: %v", err)
	}
	if asked.Load() != 0 {
		t.Errorf("%d requests went past the card", asked.Load())
	}
}

// Gemini CLI's A2A server asks a tool call's confirmation as a working
// update naming the call, then input-required with no words: that is a
// permission, its id the call's, its options the outcomes Gemini takes;
// the answer is a data part Gemini reads ({callId, outcome}) and ours
// reads (optionId); once the task goes on, the call is left.
func TestGeminiToolConfirmationIsAPermission(t *testing.T) {
	var got []*control.Event
	f := &follower{del: &lease.Delegation{}, record: func(string, string) error { return nil },
		emit: func(ev *control.Event) error { got = append(got, ev); return nil }}
	ctx := context.Background()
	info := a2a.TaskInfo{TaskID: "task-1", ContextID: "ctx-1"}
	update := func(state a2a.TaskState, kind string, parts ...*a2a.Part) *a2a.TaskStatusUpdateEvent {
		var msg *a2a.Message
		if len(parts) > 0 {
			msg = a2a.NewMessageForTask(a2a.MessageRoleAgent, info, parts...)
		}
		ev := a2a.NewStatusUpdateEvent(info, state, msg)
		ev.Metadata = map[string]any{"coderAgent": map[string]any{"kind": kind}}
		return ev
	}
	call := func(status string) *a2a.Part {
		return a2a.NewDataPart(map[string]any{"request": map[string]any{"callId": "write_file-17", "name": "write_file"},
			"status": status, "confirmationDetails": map[string]any{"title": "Confirm Write: notes.md"}})
	}
	asked := update(a2a.TaskStateInputRequired, "state-change")
	for _, ev := range []a2a.Event{
		update(a2a.TaskStateWorking, "state-change"),
		update(a2a.TaskStateWorking, "tool-call-confirmation", call("awaiting_approval")),
		asked,
		asked, // the same status again (the task asked for): asked once
	} {
		if done, err := f.event(ctx, ev); done || err != nil {
			t.Fatalf("the task ended at %T: %v", ev, err)
		}
	}
	if len(got) != 2 || got[1].Type != control.EventPermission || got[1].RequestID != "write_file-17" ||
		got[1].Outcome != control.PermissionPending || !strings.Contains(got[1].Message, "Confirm Write: notes.md") {
		t.Fatalf("events: %+v", got)
	}
	var ids []string
	for _, o := range got[1].Options {
		ids = append(ids, o.OptionID)
	}
	if strings.Join(ids, ",") != "proceed_once,proceed_always,cancel" {
		t.Errorf("options %v", ids)
	}
	answer, _ := dataOf(answerParts("write_file-17", "proceed_once")[0])
	if answer["callId"] != "write_file-17" || answer["outcome"] != "proceed_once" || answer["optionId"] != "proceed_once" {
		t.Errorf("the answer's data: %v", answer)
	}
	// Confirmed: Gemini goes on with the call executing.
	if _, err := f.event(ctx, update(a2a.TaskStateWorking, "tool-call-update", call("executing"))); err != nil {
		t.Fatal(err)
	}
	if last := got[len(got)-1]; last.Type != control.EventPermission || last.Outcome != control.PermissionSelected || f.toolCall != nil {
		t.Errorf("after the answer: %+v, call kept %v", last, f.toolCall)
	}
}
