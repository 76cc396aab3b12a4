package webui

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/lendarchive"
	"github.com/awcp/awcp/lease"
)

// start serves a page over a real store and delegator, with known tokens.
func start(t *testing.T) *Server {
	s, _ := startWith(t)
	return s
}

// startWith is start, and the store it reads.
func startWith(t *testing.T) (*Server, *lease.Store) {
	t.Helper()
	store, err := lease.Open(filepath.Join(t.TempDir(), "delegator.db"), lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	archiveT := &lendarchive.Transport{Blobs: store, StagingDir: t.TempDir(), ResultDir: t.TempDir()}
	dlg, err := delegator.New(delegator.Options{Store: store, StagedDir: t.TempDir(), SpoolDir: t.TempDir(),
		Transports: map[string]control.DelegatorTransport{control.TransportArchive: archiveT}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, "127.0.0.1:0", Options{Store: store, Delegator: dlg, Token: "the-token", CSRF: "the-csrf",
		Cancel: func(id string) error { _, err := dlg.Cancel(ctx, id); return err }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Wait() })
	return s, store
}

// do sends a request; set adds headers (Host is the request's host).
func do(t *testing.T, method, u string, set map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// No token, a wrong one and the right one: only the right one, as a
// bearer, reads anything; a token in a query or a cookie is none. The
// page's code is served to anyone, and holds nothing secret.
func TestTokenIsChecked(t *testing.T) {
	s := start(t)
	o := s.Origin()
	for _, c := range []struct {
		name, path string
		set        map[string]string
		want       int
	}{
		{"no token", "/api/delegations", nil, http.StatusUnauthorized},
		{"no token, the stream", "/api/stream", nil, http.StatusUnauthorized},
		{"no token, the CSRF token", "/api/session", nil, http.StatusUnauthorized},
		{"wrong bearer", "/api/delegations", map[string]string{"Authorization": "Bearer nope"}, http.StatusUnauthorized},
		{"the token's prefix", "/api/delegations", map[string]string{"Authorization": "Bearer the-toke"}, http.StatusUnauthorized},
		{"not a bearer", "/api/delegations", map[string]string{"Authorization": "the-token"}, http.StatusUnauthorized},
		{"the token as a query", "/api/delegations?token=the-token", nil, http.StatusUnauthorized},
		{"the token as a cookie", "/api/delegations", map[string]string{"Cookie": "awcp_ui=the-token"}, http.StatusUnauthorized},
		{"right bearer", "/api/delegations", map[string]string{"Authorization": "Bearer the-token"}, http.StatusOK},
		{"right bearer, rebound host", "/api/delegations", map[string]string{"Authorization": "Bearer the-token", "Host": "evil.example" + strings.TrimPrefix(o, "http://127.0.0.1")}, http.StatusMisdirectedRequest},
		{"the page, rebound host", "/", map[string]string{"Host": "evil.example" + strings.TrimPrefix(o, "http://127.0.0.1")}, http.StatusMisdirectedRequest},
		{"the page", "/", nil, http.StatusOK},
		{"the script", "/app.js", nil, http.StatusOK},
		{"anything else", "/etc/passwd", nil, http.StatusNotFound},
	} {
		resp, body := do(t, http.MethodGet, o+c.path, c.set)
		if resp.StatusCode != c.want {
			t.Errorf("%s: HTTP %d, want %d: %s", c.name, resp.StatusCode, c.want, body)
		}
		if c.want != http.StatusOK && strings.Contains(body, "the-csrf") {
			t.Errorf("%s: the refusal carries the CSRF token", c.name)
		}
		if resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("%s: a cookie was set", c.name)
		}
	}
	resp, body := do(t, http.MethodGet, o+"/", nil)
	csp := resp.Header.Get("Content-Security-Policy")
	if strings.Contains(body, "the-token") || strings.Contains(body, "the-csrf") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("the page holds a secret, or its CSP allows inline script: CSP %q", csp)
	}
	if _, body := do(t, http.MethodGet, o+"/api/session", map[string]string{"Authorization": "Bearer the-token"}); !strings.Contains(body, `"the-csrf"`) {
		t.Fatalf("the session does not give the CSRF token: %s", body)
	}
	if !strings.HasSuffix(s.URL(), "/#token=the-token") {
		t.Fatalf("the URL %s does not carry the token in its fragment", s.URL())
	}
}

// A change needs the token, the page's own Origin and the CSRF token:
// each missing or wrong is refused before anything is done.
func TestChangesComeFromThePageOnly(t *testing.T) {
	s := start(t)
	o := s.Origin()
	u := o + "/api/delegations/no-such-id/discard"
	auth := "Bearer the-token"
	for _, c := range []struct {
		name string
		set  map[string]string
		want int
	}{
		{"no token", map[string]string{"Origin": o, "X-AWCP-CSRF": "the-csrf"}, http.StatusUnauthorized},
		{"wrong token", map[string]string{"Authorization": "Bearer x", "Origin": o, "X-AWCP-CSRF": "the-csrf"}, http.StatusUnauthorized},
		{"no Origin", map[string]string{"Authorization": auth, "X-AWCP-CSRF": "the-csrf"}, http.StatusForbidden},
		{"another Origin", map[string]string{"Authorization": auth, "Origin": "http://evil.example", "X-AWCP-CSRF": "the-csrf"}, http.StatusForbidden},
		{"null Origin", map[string]string{"Authorization": auth, "Origin": "null", "X-AWCP-CSRF": "the-csrf"}, http.StatusForbidden},
		{"no CSRF token", map[string]string{"Authorization": auth, "Origin": o}, http.StatusForbidden},
		{"wrong CSRF token", map[string]string{"Authorization": auth, "Origin": o, "X-AWCP-CSRF": "the-csrg"}, http.StatusForbidden},
		{"all right (no such delegation)", map[string]string{"Authorization": auth, "Origin": o, "X-AWCP-CSRF": "the-csrf"}, http.StatusNotFound},
	} {
		if resp, body := do(t, http.MethodPost, u, c.set); resp.StatusCode != c.want {
			t.Errorf("%s: HTTP %d, want %d: %s", c.name, resp.StatusCode, c.want, body)
		}
	}
}

// The page is for this machine: any other address is refused.
func TestListensOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0", "localhost:0"} {
		if _, err := Start(context.Background(), addr, Options{Store: &lease.Store{}, Delegator: &delegator.Delegator{}, Cancel: func(string) error { return nil }}); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("--listen %s: %v", addr, err)
		}
	}
}

// What the page is sent of a delegation never holds the executor's token
// (or its permission requests' raw tool calls): the list, one delegation,
// and the stream are tried with a record that has both.
func TestPageNeverGetsTheExecutorsToken(t *testing.T) {
	s, store := startWith(t)
	d := &lease.Delegation{Lease: lease.Lease{ID: "dlg_tokenheld", State: lease.Created, AccessMode: "rw", Transport: "archive"},
		Peer: "http://x:1", LocalDir: t.TempDir(), Prompt: "p", Token: "the-executors-secret",
		Permissions: []lease.Permission{{RequestID: "perm-1", Title: "t", Outcome: "pending", ToolCall: []byte(`{"rawInput":"tool-call-secret"}`)}}}
	if err := store.CreateDelegation(d); err != nil {
		t.Fatal(err)
	}
	auth := map[string]string{"Authorization": "Bearer the-token"}
	for _, path := range []string{"/api/delegations", "/api/delegations/dlg_tokenheld"} {
		resp, body := do(t, http.MethodGet, s.Origin()+path, auth)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "dlg_tokenheld") {
			t.Fatalf("%s: HTTP %d: %s", path, resp.StatusCode, body)
		}
		for _, secret := range []string{"the-executors-secret", "tool-call-secret"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s sends %s: %s", path, secret, body)
			}
		}
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.Origin()+"/api/stream", nil)
	req.Header.Set("Authorization", "Bearer the-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	n, _ := io.ReadAtLeast(resp.Body, buf, 1)
	if first := string(buf[:n]); !strings.Contains(first, "dlg_tokenheld") || strings.Contains(first, "the-executors-secret") {
		t.Errorf("the stream's first event: %s", first)
	}
}

// TestExecutorNamedAlike: the list and a delegation's page name its
// executor the same way, "name (URL)" where it has a name.
func TestExecutorNamedAlike(t *testing.T) {
	for _, tc := range []struct{ name, peer, want string }{
		{"", "https://10.0.0.2:10200", "https://10.0.0.2:10200"},
		{"build-box", "https://10.0.0.2:10200", "build-box (https://10.0.0.2:10200)"},
		{"https://10.0.0.2:10200", "https://10.0.0.2:10200", "https://10.0.0.2:10200"},
	} {
		d := &lease.Delegation{Lease: lease.Lease{ID: "d1"}, Peer: tc.peer, PeerName: tc.name}
		if got := rowOf(d).Executor; got != tc.want {
			t.Errorf("executor %q at %s is named %q, want %q", tc.name, tc.peer, got, tc.want)
		}
	}
}
