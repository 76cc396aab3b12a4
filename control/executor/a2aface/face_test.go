package a2aface_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/a2aface"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/internal/httpserve"
)

const token = "face-token"

// faceRead counts the body bytes the face has taken, all requests of a
// test together (the tests do not run in parallel).
var faceRead atomic.Int64

type counted struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func serveFace(t testing.TB, agent string, opts a2aface.Options) (*httptest.Server, *executortest.Fixture) {
	t.Helper()
	f := executortest.New(t, agent, func(o *executor.Options) { o.Tokens = []string{token} })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	opts.Logger = slog.New(slog.DiscardHandler)
	face := a2aface.New(ctx, f.Exec, opts)
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = httpserve.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &counted{ReadCloser: r.Body, n: &faceRead}
		face.ServeHTTP(w, r)
	}))
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, f
}

type rpcReply struct {
	Status int
	Result struct {
		Kind   string `json:"kind"`
		Status struct {
			State   string `json:"state"`
			Message struct {
				Parts []struct {
					Text string `json:"text"`
				} `json:"parts"`
			} `json:"message"`
		} `json:"status"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (r rpcReply) text() string {
	var b strings.Builder
	for _, p := range r.Result.Status.Message.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func post(t *testing.T, url, tok, body string) rpcReply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+a2aface.Path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	r := rpcReply{Status: resp.StatusCode}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("reply %d %q: %v", resp.StatusCode, data, err)
	}
	return r
}

func zipB64(t testing.TB, files map[string]string) (string, string) {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for n, c := range files {
		w, err := z.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(c))
	}
	z.Close()
	sum := sha256.Sum256(b.Bytes())
	return base64.StdEncoding.EncodeToString(b.Bytes()), hex.EncodeToString(sum[:])
}

// send is message/send of text and a file part (raw JSON).
func send(text, file string) string {
	parts := `[{"kind":"text","text":` + quote(text) + `}`
	if file != "" {
		parts += `,` + file
	}
	parts += `]`
	return `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":` + parts + `}}}`
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func filePart(b64, mime, sum string) string {
	meta := ""
	if sum != "" {
		meta = `,"metadata":{"sha256":"` + sum + `"}`
	}
	return `{"kind":"file","file":{"name":"ws.zip","mimeType":"` + mime + `","bytes":"` + b64 + `"}` + meta + `}`
}

// Whatever a client sends that is not a well-formed task is refused with
// why, before any agent runs and with nothing left behind.
func TestHostileMessages(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	srv, f := serveFace(t, "touch "+marker+"; echo ran", a2aface.Options{MaxBody: 64 << 10})
	good, sum := zipB64(t, map[string]string{"a.txt": "a\n"})
	evil, evilSum := zipB64(t, map[string]string{"../escaped.txt": "out\n"})

	for name, c := range map[string]struct {
		tok, body   string
		status      int
		code        int
		state, says string
	}{
		"no credential":     {"", send("x", filePart(good, "application/zip", sum)), 401, -32001, "", "AUTH_FAILED"},
		"a wrong token":     {"wrong", send("x", filePart(good, "application/zip", sum)), 401, -32001, "", "AUTH_FAILED"},
		"too large":         {token, send(strings.Repeat("x", 70<<10), ""), 413, -32600, "", "WORKSPACE_TOO_LARGE"},
		"a key twice":       {token, `{"jsonrpc":"2.0","id":1,"id":2,"method":"tasks/get","params":{"id":"x"}}`, 400, -32700, "", "ambiguous"},
		"push notification": {token, `{"jsonrpc":"2.0","id":1,"method":"tasks/pushNotificationConfig/set","params":{"taskId":"t","pushNotificationConfig":{"url":"http://169.254.169.254/"}}}`, 200, -32003, "", "push"},
		"by URI":            {token, send("x", `{"kind":"file","file":{"name":"ws.zip","uri":"file:///etc/passwd"}}`), 200, 0, "rejected", "fetches nothing"},
		"not a ZIP":         {token, send("x", filePart(good, "text/html", "")), 200, 0, "rejected", "must be a ZIP"},
		"not base64":        {token, send("x", filePart("!!!not base64!!!", "application/zip", "")), 200, 0, "rejected", "not base64"},
		"a wrong checksum":  {token, send("x", filePart(good, "application/zip", strings.Repeat("0", 64))), 200, 0, "failed", "checksum mismatch"},
		"no text":           {token, send("   ", filePart(good, "application/zip", sum)), 200, 0, "rejected", "no text"},
		"two file parts":    {token, send("x", filePart(good, "application/zip", sum)+","+filePart(good, "application/zip", sum)), 200, 0, "rejected", "two file parts"},
		"a path out":        {token, send("x", filePart(evil, "application/zip", evilSum)), 200, 0, "failed", "SETUP_FAILED"},
		"another's task":    {token, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"no-such-task"}}`, 200, -32001, "", "not found"},
	} {
		r := post(t, srv.URL, c.tok, c.body)
		got := r.text()
		if r.Error != nil {
			got = r.Error.Message
		}
		switch {
		case r.Status != c.status:
			t.Errorf("%s: HTTP %d, want %d (%s)", name, r.Status, c.status, got)
		case c.code != 0 && (r.Error == nil || r.Error.Code != c.code):
			t.Errorf("%s: error %+v, want code %d", name, r.Error, c.code)
		case c.state != "" && r.Result.Status.State != c.state:
			t.Errorf("%s: state %q (%s), want %s", name, r.Result.Status.State, got, c.state)
		case !strings.Contains(strings.ToLower(got), strings.ToLower(c.says)):
			t.Errorf("%s: %q does not say %q", name, got, c.says)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("an agent ran for a refused message")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(f.Root), "escaped.txt")); err == nil {
		t.Errorf("the ZIP wrote out of its work dir")
	}
	if ents, _ := os.ReadDir(f.Root); len(ents) != 0 {
		t.Errorf("left in the work root: %v", ents)
	}
	incoming, _ := filepath.Glob(filepath.Join(f.State, "incoming", "*"))
	if len(incoming) != 0 {
		t.Errorf("workspaces left behind: %v", incoming)
	}

	// And a good one runs.
	r := post(t, srv.URL, token, send("x", filePart(good, "application/zip", sum)))
	if r.Result.Status.State != "completed" {
		t.Fatalf("a good task: %+v", r)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the agent did not run for a good task")
	}
}

// endless is a body that never ends, counting what was taken of it.
type endless struct{ n atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.n.Add(int64(len(p)))
	return len(p), nil
}

// A body that never ends: without a credential it is refused on its
// headers, and none of it is read; with one it is read to the bound and
// no further. The refusal closes the connection on the rest, so a client
// still sending may see the reset rather than the status: what is
// asserted is what the face took, and how soon it ended.
func TestEndlessBodies(t *testing.T) {
	const bound = 1 << 20
	srv, _ := serveFace(t, "true", a2aface.Options{MaxBody: bound})
	for name, c := range map[string]struct {
		tok         string
		status      int
		least, most int64
	}{
		"no credential": {"", http.StatusUnauthorized, 0, 0},
		"a wrong token": {"wrong", http.StatusUnauthorized, 0, 0},
		"a valid token": {token, http.StatusRequestEntityTooLarge, bound, bound + 64<<10},
	} {
		faceRead.Store(0)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+a2aface.Path, &endless{})
		req.Header.Set("Content-Type", "application/json")
		if c.tok != "" {
			req.Header.Set("Authorization", "Bearer "+c.tok)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		timedOut := ctx.Err() != nil
		cancel()
		took := time.Since(start)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Errorf("%s: HTTP %d, want %d", name, resp.StatusCode, c.status)
			}
		} else if timedOut {
			t.Errorf("%s: no end after %s: %v", name, took, err)
		}
		if read := faceRead.Load(); read < c.least || read > c.most || took > 5*time.Second {
			t.Errorf("%s: the face read %d bytes, and it ended after %s; want %d to %d, at once", name, read, took, c.least, c.most)
		}
	}
}

// A task's lease asked in more seconds than a Duration holds (as a number
// or a string) is the executor's longest, not one that ended in 1759.
func TestHugeTTLOnTheA2AFace(t *testing.T) {
	srv, f := serveFace(t, "echo done", a2aface.Options{})
	good, sum := zipB64(t, map[string]string{"a.txt": "a\n"})
	for _, ttl := range []string{`1e10`, `"10000000000"`, `9.3e18`, `1e300`} {
		msg := strings.Replace(send("work", filePart(good, "application/zip", sum)), `"role":"user"`,
			`"role":"user","metadata":{"awcp.ttlSeconds":`+ttl+`}`, 1)
		if r := post(t, srv.URL, token, msg); r.Error != nil || r.Result.Status.State != "completed" {
			t.Errorf("ttlSeconds %s: %+v", ttl, r)
		}
	}
	as, err := f.Store.Assignments()
	if err != nil || len(as) != 4 {
		t.Fatalf("assignments: %d, %v", len(as), err)
	}
	for _, a := range as {
		if a.TTLSeconds <= 0 || a.TTLSeconds > 3600 || !a.ExpiresAt.After(a.AcceptedAt) {
			t.Errorf("a lease of %d s, expiring %v (accepted %v)", a.TTLSeconds, a.ExpiresAt, a.AcceptedAt)
		}
	}
}

// postAs is post with an A2A-Version header, giving the raw answer.
func postAs(t *testing.T, url, version, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+a2aface.Path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if version != "" {
		req.Header.Set("A2A-Version", version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("answer %d %q: %v", resp.StatusCode, data, err)
	}
	return resp.StatusCode, out
}

// One face, both wire versions, as each request says: 1.0's SendMessage
// with its workspace as a raw part runs the task and answers in 1.0's
// shapes (TASK_STATE_*, the changed file as a raw part); 0.3's errors keep
// 0.3's shape (data an object, which a2a-go 0.3's client requires); a
// version the face does not speak is refused as 1.0 says.
func TestBothWireVersions(t *testing.T) {
	srv, _ := serveFace(t, "echo changed > a.txt; echo done", a2aface.Options{})
	ws, sum := zipB64(t, map[string]string{"a.txt": "old\n"})
	msg := `{"jsonrpc":"2.0","id":"r1","method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[` +
		`{"text":"change a.txt"},{"raw":"` + ws + `","filename":"ws.zip","mediaType":"application/zip","metadata":{"sha256":"` + sum + `"}}]}}}`
	status, out := postAs(t, srv.URL, "1.0", msg)
	task, _ := out["result"].(map[string]any)["task"].(map[string]any)
	if status != 200 || task == nil {
		t.Fatalf("SendMessage: HTTP %d %v", status, out)
	}
	if st := task["status"].(map[string]any)["state"]; st != "TASK_STATE_COMPLETED" {
		t.Fatalf("the task: %v", task)
	}
	var changed string
	for _, a := range task["artifacts"].([]any) {
		for _, p := range a.(map[string]any)["parts"].([]any) {
			if part := p.(map[string]any); part["filename"] == "a.txt" {
				raw, _ := base64.StdEncoding.DecodeString(part["raw"].(string))
				changed = string(raw)
			}
		}
	}
	if changed != "changed\n" {
		t.Errorf("the changed file: %q in %v", changed, task["artifacts"])
	}

	_, out = postAs(t, srv.URL, "", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"no-such-task"}}`)
	rpcErr, _ := out["error"].(map[string]any)
	if _, isObject := rpcErr["data"].(map[string]any); rpcErr == nil || rpcErr["code"] != float64(-32001) || (rpcErr["data"] != nil && !isObject) {
		t.Errorf("a 0.3 error: %v", out)
	}
	_, out = postAs(t, srv.URL, "1.0", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"no-such-task"}}`)
	if rpcErr, _ := out["error"].(map[string]any); rpcErr == nil || rpcErr["code"] != float64(-32001) {
		t.Errorf("a 1.0 error: %v", out)
	}

	status, out = postAs(t, srv.URL, "2.0", msg)
	if rpcErr, _ := out["error"].(map[string]any); status != 400 || rpcErr == nil || rpcErr["code"] != float64(-32009) {
		t.Errorf("version 2.0: HTTP %d %v", status, out)
	}
}
