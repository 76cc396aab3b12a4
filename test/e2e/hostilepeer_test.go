package e2e

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// sink is a server a hostile peer redirects to: it records whatever
// reaches it.
type sink struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newSink(t *testing.T) *sink {
	s := &sink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, fmt.Sprintf("%s %s auth=%q body=%d bytes", r.Method, r.URL.Path, r.Header.Get("Authorization"), n))
		s.mu.Unlock()
		http.Error(w, "sink", http.StatusTeapot)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// hostileAgent is an A2A agent whose card names itself and which answers
// every other request with a 307 to elsewhere (the card too, if
// cardToo).
func hostileAgent(self *string, elsewhere string, cardToo bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/.well-known/") && !cardToo {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"name":"hostile","description":"redirects","url":%q,"version":"1","protocolVersion":"0.3.0",`+
				`"preferredTransport":"JSONRPC","capabilities":{"streaming":true},"defaultInputModes":["text/plain"],`+
				`"defaultOutputModes":["text/plain"],"skills":[]}`, *self+"/a2a")
			return
		}
		http.Redirect(w, r, elsewhere+r.URL.Path, http.StatusTemporaryRedirect)
	})
}

// TestDelegatorFollowsNoRedirectOffItsPeer, as a hostile peer: an A2A
// agent or an executor that answers with a redirect to another server
// (another port, http:// from https://) gets the delegation refused, and
// the other server receives nothing — no token, no byte of the
// workspace, not even a request.
func TestDelegatorFollowsNoRedirectOffItsPeer(t *testing.T) {
	parallel(t)
	const token = "redirect-token-c0ffee"
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("the owner's words\n"), 0o644)
	s := newSink(t)

	var plainURL, cardURL, tlsURL string
	plain := httptest.NewServer(hostileAgent(&plainURL, s.URL, false))
	defer plain.Close()
	plainURL = plain.URL
	card := httptest.NewServer(hostileAgent(&cardURL, s.URL, true))
	defer card.Close()
	cardURL = card.URL
	secure := httptest.NewTLSServer(hostileAgent(&tlsURL, s.URL, false))
	defer secure.Close()
	tlsURL = secure.URL
	executor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer executor.Close()

	// The https agent's certificate, trusted by awcp-ctl as a CA would be.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw}), 0o644)

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"an A2A agent's task to another port", []string{"--peer", "a2a:" + plainURL, "--plain-http"}},
		{"an A2A agent's card to another port", []string{"--peer", "a2a:" + cardURL, "--plain-http"}},
		{"an https A2A agent to http://", []string{"--peer", "a2a:" + tlsURL}},
		{"an executor's INVITE to another port", []string{"--peer", executor.URL, "--plain-http", "--transport", "archive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t)
			c.env = append(c.env, "SSL_CERT_FILE="+ca)
			r := c.run(append([]string{"export", dir, "--token-file", tokenFile(t, token), "--prompt", "p"}, tc.args...)...)
			if r.code == 0 || !strings.Contains(r.stderr, "redirect") {
				t.Errorf("export: exit %d, want a refused redirect\n%s%s", r.code, r.stdout, r.stderr)
			}
			if seen := s.requests(); len(seen) > 0 {
				t.Errorf("the server redirected to received: %q", seen)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "secret.txt")); string(b) != "the owner's words\n" {
		t.Errorf("the lent directory changed: %q", b)
	}
}

// scriptedAgent is an A2A agent (JSON-RPC, no streaming) that answers
// every call with task: a JSON object, its words the test's.
func scriptedAgent(t *testing.T, task string) *httptest.Server {
	var self string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			fmt.Fprintf(w, `{"name":"scripted","description":"d","url":%q,"version":"1","protocolVersion":"0.3.0",`+
				`"preferredTransport":"JSONRPC","capabilities":{},"defaultInputModes":["text/plain"],`+
				`"defaultOutputModes":["text/plain"],"skills":[]}`, self+"/a2a")
			return
		}
		var call struct {
			ID json.RawMessage `json:"id"`
		}
		json.NewDecoder(r.Body).Decode(&call)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, call.ID, task)
	}))
	self = srv.URL
	t.Cleanup(srv.Close)
	return srv
}

// TestA2AAgentWordsReachNoTerminalRaw, as a hostile A2A agent: escape
// sequences (an OSC 8 link, a clear screen) in its context id are refused
// where the id enters, and a right-to-left override or an escape in its
// words reaches `export`, `status ID` and `output ID` escaped.
func TestA2AAgentWordsReachNoTerminalRaw(t *testing.T) {
	parallel(t)
	raw := func(s string) bool { return strings.ContainsAny(s, "\x1b\x07\u202e\u2066") }
	status := func(ctx, words string) string {
		b, _ := json.Marshal(map[string]any{"kind": "task", "id": "task-1", "contextId": ctx,
			"status": map[string]any{"state": "completed", "message": map[string]any{"kind": "message", "messageId": "m", "role": "agent",
				"parts": []any{map[string]any{"kind": "text", "text": words}}}}})
		return string(b)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)

	t.Run("context id", func(t *testing.T) {
		agent := scriptedAgent(t, status("\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07\x1b[2J", "done"))
		c := newCtl(t)
		r := c.run("export", dir, "--peer", "a2a:"+agent.URL, "--plain-http", "--prompt", "p")
		if raw(r.stdout + r.stderr) {
			t.Errorf("export printed the agent's escapes raw: %q", r.stdout+r.stderr)
		}
		if r.code == 0 || !strings.Contains(r.stderr, "not an id") {
			t.Errorf("export: exit %d, want the context id refused\n%s", r.code, r.stderr)
		}
		id := c.only().ID
		for _, cmd := range [][]string{{"status", id}, {"output", id}} {
			if r := c.run(cmd...); raw(r.stdout + r.stderr) {
				t.Errorf("%s printed the agent's escapes raw: %q", cmd[0], r.stdout+r.stderr)
			}
		}
	})
	t.Run("words", func(t *testing.T) {
		agent := scriptedAgent(t, status("ctx-1", "all fine \u202etxt.exe\u202c and \x1b[2J done"))
		c := newCtl(t)
		r := c.run("export", dir, "--peer", "a2a:"+agent.URL, "--plain-http", "--prompt", "p")
		if raw(r.stdout + r.stderr) {
			t.Errorf("export printed the agent's words raw: %q", r.stdout+r.stderr)
		}
		id := c.only().ID
		for _, cmd := range [][]string{{"status", id}, {"output", id}} {
			r := c.run(cmd...)
			if raw(r.stdout + r.stderr) {
				t.Errorf("%s printed the agent's words raw: %q", cmd[0], r.stdout+r.stderr)
			}
			if !strings.Contains(r.stdout+r.stderr, `\u202e`) {
				t.Errorf("%s does not show the override escaped: %q", cmd[0], r.stdout+r.stderr)
			}
		}
	})
}
