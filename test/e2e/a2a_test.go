package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/awcp/awcp/control"
)

// zipOf is a workspace ZIP of files (path → content), base64, and its
// SHA-256 (hex).
func zipOf(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		w, err := z.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(files[n]))
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b.Bytes())
	return base64.StdEncoding.EncodeToString(b.Bytes()), hex.EncodeToString(sum[:])
}

// a2aHTTP is an HTTP client for an executor's A2A face: TLS pinned to the
// executor's key, a bearer token if given, a client certificate of key if
// given.
func a2aHTTP(t *testing.T, executorKey, token string, key ed25519.PrivateKey) *http.Client {
	t.Helper()
	cfg := &tls.Config{
		InsecureSkipVerify: true, // the key is checked below, as awcp-ctl pins it
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if got := control.CertificateKey(raw); got != executorKey {
				return fmt.Errorf("the executor shows key %s", got)
			}
			return nil
		},
	}
	if key != nil {
		cert, err := control.IdentityCertificate(key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: cfg}
	if token != "" {
		rt = bearer{token: token, next: rt}
	}
	return &http.Client{Transport: rt}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// a2aClient is a2a-go's client for the executor at addr, from its card.
func a2aClient(t *testing.T, ctx context.Context, addr string, hc *http.Client) (*a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	card, err := agentcard.NewResolver(hc).Resolve(ctx, "https://"+addr)
	if err != nil {
		t.Fatalf("resolve the agent card: %v", err)
	}
	client, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatalf("a2a client: %v", err)
	}
	t.Cleanup(func() { client.Destroy() })
	return client, card
}

// taskMessage is a message giving the task text and the workspace ZIP.
func taskMessage(text, zipB64, sum string) *a2a.MessageSendParams {
	return &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser,
		a2a.TextPart{Text: text},
		a2a.FilePart{File: a2a.FileBytes{FileMeta: a2a.FileMeta{Name: "workspace.zip", MimeType: "application/zip"}, Bytes: zipB64},
			Metadata: map[string]any{"sha256": sum}})}
}

// a2aMetaDelegation is the metadata key of a task's updates that names
// its delegation.
const a2aMetaDelegation = "awcp.delegationId"

// streamed is what a task's stream gave.
type streamed struct {
	task      a2a.TaskID
	states    []a2a.TaskState
	artifacts map[string]*a2a.Artifact
	last      *a2a.TaskStatusUpdateEvent
	delegID   string
}

func collect(t *testing.T, events func(func(a2a.Event, error) bool), onWorking func(a2a.TaskID)) streamed {
	t.Helper()
	s := streamed{artifacts: map[string]*a2a.Artifact{}}
	for ev, err := range events {
		if err != nil {
			t.Fatalf("the stream: %v", err)
		}
		switch ev := ev.(type) {
		case *a2a.Task:
			s.task = ev.ID
			s.states = append(s.states, ev.Status.State)
		case *a2a.TaskStatusUpdateEvent:
			s.task = ev.TaskID
			if len(s.states) == 0 || s.states[len(s.states)-1] != ev.Status.State {
				s.states = append(s.states, ev.Status.State)
			}
			s.last = ev
			if id, ok := ev.Metadata[a2aMetaDelegation].(string); ok {
				s.delegID = id
			}
			if ev.Status.State == a2a.TaskStateWorking && onWorking != nil {
				onWorking(ev.TaskID)
				onWorking = nil
			}
		case *a2a.TaskArtifactUpdateEvent:
			s.artifacts[ev.Artifact.Name] = ev.Artifact
		}
	}
	return s
}

func statusText(ev *a2a.TaskStatusUpdateEvent) string {
	if ev == nil || ev.Status.Message == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range ev.Status.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			b.WriteString(tp.Text)
		}
	}
	return b.String()
}

// filesOf are an artifact's file parts, by name, decoded.
func filesOf(t *testing.T, a *a2a.Artifact) (map[string]string, map[string]any) {
	t.Helper()
	files := map[string]string{}
	var data map[string]any
	for _, p := range a.Parts {
		switch p := p.(type) {
		case a2a.FilePart:
			fb, ok := p.File.(a2a.FileBytes)
			if !ok {
				t.Fatalf("a file part by URI: %+v", p)
			}
			b, err := base64.StdEncoding.DecodeString(fb.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			files[fb.Name] = string(b)
		case a2a.DataPart:
			data = p.Data
		}
	}
	return files, data
}

const a2aAgent = `case "$AWCP_PROMPT" in hold*) sleep 600 ;; esac
echo "changed by the agent" > a.txt; echo made > made.txt; rm -f gone.txt; echo "did: $AWCP_PROMPT"`

// TestA2AGoClient: github.com/a2aproject/a2a-go's own client, pinned, gives
// our executor a task with a small workspace over its A2A face: it finds
// the face on the agent card, streams the task's states, gets the changed
// files and the diff as artifacts, and the task again by tasks/get; a
// second task is cancelled while it runs and its delegation ends; a wrong
// token, no token, and a client key the operator never authorized are
// refused before anything runs, and a key it did authorize is admitted.
func TestA2AGoClient(t *testing.T) {
	slow(t)
	parallel(t)
	const token = "a2a-token-5e1d"
	_, trustedKey, _ := ed25519.GenerateKey(rand.Reader)
	_, strangerKey, _ := ed25519.GenerateKey(rand.Reader)
	auth := filepath.Join(t.TempDir(), "authorized")
	if err := os.WriteFile(auth, []byte(control.IdentityPublic(trustedKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	x := startTLSExecutor(t, a2aAgent, "--token-file", tokenFile(t, token), "--authorized-delegators", auth, "--transports", "archive")
	key := x.key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	client, card := a2aClient(t, ctx, x.addr, a2aHTTP(t, key, token, nil))
	if !strings.HasSuffix(card.URL, "/a2a") || card.ProtocolVersion != "0.3.0" || card.PreferredTransport != a2a.TransportProtocolJSONRPC ||
		card.SecuritySchemes["bearer"] == nil || card.SecuritySchemes["identityKey"] == nil || !card.Capabilities.Streaming {
		t.Fatalf("the agent card does not declare the A2A face: %+v", card)
	}

	ws, sum := zipOf(t, map[string]string{"a.txt": "old a\n", "gone.txt": "to be removed\n", "keep/b.txt": "b\n"})
	s := collect(t, client.SendStreamingMessage(ctx, taskMessage("tidy the files", ws, sum)), nil)
	if s.last == nil || s.last.Status.State != a2a.TaskStateCompleted || !s.last.Final {
		t.Fatalf("the task did not complete: states %v, last %q", s.states, statusText(s.last))
	}
	if !slices.Contains(s.states, a2a.TaskStateSubmitted) || !slices.Contains(s.states, a2a.TaskStateWorking) {
		t.Errorf("states streamed: %v", s.states)
	}
	if !control.ValidDelegationID(s.delegID) || s.delegID == string(s.task) {
		t.Errorf("the task's updates name delegation %q (task %s): both ids, each its own", s.delegID, s.task)
	}
	if !strings.Contains(statusText(s.last), "did: tidy the files") {
		t.Errorf("the completed status says %q, not the agent's summary", statusText(s.last))
	}
	changes, diff := s.artifacts["changes"], s.artifacts["diff"]
	if changes == nil || diff == nil {
		t.Fatalf("artifacts: %v", s.artifacts)
	}
	files, data := filesOf(t, changes)
	if files["a.txt"] != "changed by the agent\n" || files["made.txt"] != "made\n" || len(files) != 2 {
		t.Errorf("changed files sent: %q", files)
	}
	if fmt.Sprint(data["removed"]) != "[gone.txt]" {
		t.Errorf("removed: %v", data)
	}
	d := ""
	if tp, ok := diff.Parts[0].(a2a.TextPart); ok {
		d = tp.Text
	}
	for _, want := range []string{"--- a/a.txt\n+++ b/a.txt\n", "-old a\n+changed by the agent\n", "--- /dev/null\n+++ b/made.txt\n", "--- a/gone.txt\n+++ /dev/null\n"} {
		if !strings.Contains(d, want) {
			t.Errorf("the diff lacks %q:\n%s", want, d)
		}
	}
	got, err := client.GetTask(ctx, &a2a.TaskQueryParams{ID: s.task})
	if err != nil || got.Status.State != a2a.TaskStateCompleted || len(got.Artifacts) != 2 {
		t.Errorf("tasks/get: %+v %v", got, err)
	}

	// A second task, cancelled while it runs.
	held := func(id a2a.TaskID) {
		task, err := client.CancelTask(ctx, &a2a.TaskIDParams{ID: id})
		if err != nil || task.Status.State != a2a.TaskStateCanceled {
			t.Errorf("tasks/cancel: %+v %v", task, err)
		}
	}
	s2 := collect(t, client.SendStreamingMessage(ctx, taskMessage("hold on", ws, sum)), held)
	if got, err := client.GetTask(ctx, &a2a.TaskQueryParams{ID: s2.task}); err != nil || got.Status.State != a2a.TaskStateCanceled {
		t.Errorf("the cancelled task: %+v %v (streamed %v)", got, err, s2.states)
	}
	waitUntil(t, 20*time.Second, "the cancelled delegation's work dir to go", func() bool {
		ents, _ := os.ReadDir(x.workRoot)
		return len(ents) == 0
	})

	// A task sent without waiting, followed by tasks/resubscribe while it
	// runs, and cancelled meanwhile: the resubscribed stream ends with it.
	no := false
	res, err := client.SendMessage(ctx, &a2a.MessageSendParams{Message: taskMessage("hold again", ws, sum).Message,
		Config: &a2a.MessageSendConfig{Blocking: &no}})
	bg, ok := res.(*a2a.Task)
	if err != nil || !ok {
		t.Fatalf("message/send without waiting: %+v %v", res, err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		client.CancelTask(ctx, &a2a.TaskIDParams{ID: bg.ID})
	}()
	s3 := collect(t, client.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: bg.ID}), nil)
	if s3.last == nil || s3.last.Status.State != a2a.TaskStateCanceled {
		t.Errorf("tasks/resubscribe of a task cancelled meanwhile: %v %q", s3.states, statusText(s3.last))
	}

	// Refused before anything is read: a wrong token, none, a stranger's key.
	for name, hc := range map[string]*http.Client{
		"a wrong token":       a2aHTTP(t, key, "not-the-token", nil),
		"no credential":       a2aHTTP(t, key, "", nil),
		"an unauthorized key": a2aHTTP(t, key, "", strangerKey),
	} {
		c, _ := a2aClient(t, ctx, x.addr, hc)
		_, err := c.SendMessage(ctx, taskMessage("should not run", ws, sum))
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The key the operator authorized, without a token.
	c, _ := a2aClient(t, ctx, x.addr, a2aHTTP(t, key, "", trustedKey))
	res, err = c.SendMessage(ctx, taskMessage("by key", ws, sum))
	task, ok := res.(*a2a.Task)
	if err != nil || !ok || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("an authorized key: %+v %v", res, err)
	}
	// Its task is its own: the token holder does not see it.
	if _, err := client.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) && (err == nil || !strings.Contains(err.Error(), "not found")) {
		t.Errorf("another client's task, asked by the token holder: %v", err)
	}
	if strings.Contains(x.log.String(), "should not run") {
		t.Errorf("a refused client's task reached the executor's log")
	}
}

// TestA2AInputRequired: a permission the agent asks (an ACP agent under
// --permission forward) is the task's input-required, with its options;
// the client's next message on the task answers it, the task goes on from
// where it was (nothing streamed twice) and completes with what the
// permission allowed.
func TestA2AInputRequired(t *testing.T) {
	parallel(t)
	x := acpExecutor(t, "--permission", "forward", "--transports", "archive")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hc := &http.Client{} // the suite's executors also take plain HTTP
	card, err := agentcard.NewResolver(hc).Resolve(ctx, x.url)
	if err != nil {
		t.Fatal(err)
	}
	client, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	ws, sum := zipOf(t, map[string]string{"README.md": "# Sample\n", "docs/.keep": ""})
	s := collect(t, client.SendStreamingMessage(ctx, taskMessage("work", ws, sum)), nil)
	if s.last == nil || s.last.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("no input-required: %v %q", s.states, statusText(s.last))
	}
	var asked map[string]any
	for _, p := range s.last.Status.Message.Parts {
		if dp, ok := p.(a2a.DataPart); ok {
			asked = dp.Data
		}
	}
	if !strings.Contains(statusText(s.last), "Write notes.md") || !strings.Contains(fmt.Sprint(asked["options"]), "allow") {
		t.Fatalf("what the agent asks: %q %v", statusText(s.last), asked)
	}
	answer := a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"optionId": "allow"}})
	answer.TaskID = s.task
	s2 := collect(t, client.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: answer}), nil)
	if s2.last == nil || s2.last.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("after the answer: %v %q", s2.states, statusText(s2.last))
	}
	if !strings.Contains(statusText(s2.last), "permission: allow") {
		t.Errorf("the agent did not get the answer: %q", statusText(s2.last))
	}
	files, _ := filesOf(t, s2.artifacts["changes"])
	if files["docs/notes.md"] != "notes from # Sample\n" {
		t.Errorf("what the permission allowed: %q", files)
	}
}

// a2aJS is the official JavaScript A2A SDK the client tests install.
const a2aJS = "@a2a-js/sdk@1.3.0"

// jsSeen is what testdata/a2a_client.mjs saw of one task's stream.
type jsSeen struct {
	States       []string                    `json:"states"`
	Artifacts    map[string][]map[string]any `json:"artifacts"`
	Last         string                      `json:"last"`
	LastState    string                      `json:"lastState"`
	TaskID       string                      `json:"taskId"`
	DelegationID string                      `json:"delegationId"`
	Asked        map[string]any              `json:"asked"`
}

// jsFiles are the file parts of a jsSeen artifact, by name.
func jsFiles(parts []map[string]any) map[string]string {
	files := map[string]string{}
	for _, p := range parts {
		if name, ok := p["file"].(string); ok {
			files[name], _ = p["text"].(string)
		}
	}
	return files
}

// TestA2AJSClient: the official JavaScript SDK's client — as it is made
// by default (A2A 1.0), and with its v0.3 layer on — gives our executor a
// task with its workspace, streams it, gets the changed files and the
// diff, cancels a second task and reads it back cancelled; a wrong token
// is refused, and a client holding another token of the executor's
// reads, cancels and lists nothing of the first's (1.0's ListTasks).
func TestA2AJSClient(t *testing.T) {
	slow(t)
	parallel(t)
	modules := nodeModules(t, a2aJS)
	for _, mode := range []string{"default", "legacy"} {
		t.Run(mode, func(t *testing.T) { testA2AJSClient(t, modules, mode == "legacy") })
	}
}

func testA2AJSClient(t *testing.T, modules string, legacy bool) {
	const token, other = "a2a-js-token-7c2b", "a2a-js-other-0d5a"
	x := startExecutor(t, a2aAgent, "--token-file", tokenFile(t, token+"\n"+other), "--transports", "archive")
	ws, sum := zipOf(t, map[string]string{"a.txt": "old a\n", "gone.txt": "to be removed\n"})
	var out struct {
		Done        jsSeen   `json:"done"`
		Held        jsSeen   `json:"held"`
		CancelState string   `json:"cancelState"`
		HeldState   string   `json:"heldState"`
		WrongToken  string   `json:"wrongToken"`
		OtherGet    string   `json:"otherGet"`
		OtherCancel string   `json:"otherCancel"`
		OwnList     []string `json:"ownList"`
		OtherList   []string `json:"otherList"`
	}
	env := []string{"A2A_URL=" + x.url, "A2A_TOKEN=" + token, "A2A_OTHER_TOKEN=" + other, "A2A_ZIP=" + ws, "A2A_SUM=" + sum}
	if legacy {
		env = append(env, "A2A_LEGACY=1")
	}
	runNode(t, modules, "a2a_client.mjs", env, &out)
	if !legacy {
		if !slices.Contains(out.OwnList, out.Done.TaskID) || !slices.Contains(out.OwnList, out.Held.TaskID) {
			t.Errorf("the client's own tasks %v, listed: %v", []string{out.Done.TaskID, out.Held.TaskID}, out.OwnList)
		}
		if len(out.OtherList) != 0 {
			t.Errorf("another token's holder lists the first client's tasks: %v", out.OtherList)
		}
	}
	if !strings.HasPrefix(out.OtherGet, "refused") || !strings.HasPrefix(out.OtherCancel, "refused") {
		t.Errorf("another token's holder on the first client's tasks: get %q, cancel %q", out.OtherGet, out.OtherCancel)
	}
	if out.Done.LastState != "TASK_STATE_COMPLETED" || !slices.Contains(out.Done.States, "TASK_STATE_WORKING") {
		t.Fatalf("the task: %+v", out.Done)
	}
	if !control.ValidDelegationID(out.Done.DelegationID) || !strings.Contains(out.Done.Last, "did: tidy the files") {
		t.Errorf("the task's delegation %q, its last word %q", out.Done.DelegationID, out.Done.Last)
	}
	if files := jsFiles(out.Done.Artifacts["changes"]); files["a.txt"] != "changed by the agent\n" || files["made.txt"] != "made\n" {
		t.Errorf("the changed files: %q", files)
	}
	if d := fmt.Sprint(out.Done.Artifacts["diff"]); !strings.Contains(d, "+changed by the agent") || !strings.Contains(d, "+++ /dev/null") {
		t.Errorf("the diff: %s", d)
	}
	if out.CancelState != "TASK_STATE_CANCELED" || out.HeldState != "TASK_STATE_CANCELED" {
		t.Errorf("the cancelled task: cancel said %s, tasks/get %s (streamed %v)", out.CancelState, out.HeldState, out.Held.States)
	}
	if !strings.Contains(out.WrongToken, "AUTH_FAILED") {
		t.Errorf("a wrong token: %q", out.WrongToken)
	}
	waitUntil(t, 20*time.Second, "the cancelled delegation's work dir to go", func() bool {
		ents, _ := os.ReadDir(x.workRoot)
		return len(ents) == 0
	})
}

// TestA2AJSClientAnswersAPermission: the input-required round trip with
// the JavaScript SDK's client.
func TestA2AJSClientAnswersAPermission(t *testing.T) {
	slow(t)
	parallel(t)
	x := acpExecutor(t, "--permission", "forward", "--transports", "archive")
	modules := nodeModules(t, a2aJS)
	ws, sum := zipOf(t, map[string]string{"README.md": "# Sample\n", "docs/.keep": ""})
	var out struct {
		Done     jsSeen `json:"done"`
		Answered jsSeen `json:"answered"`
	}
	runNode(t, modules, "a2a_client.mjs", []string{"A2A_URL=" + x.url, "A2A_ZIP=" + ws, "A2A_SUM=" + sum, "A2A_ANSWER=allow"}, &out)
	if out.Done.LastState != "TASK_STATE_INPUT_REQUIRED" || out.Done.Asked["requestId"] == nil {
		t.Fatalf("no permission asked: %+v", out.Done)
	}
	if out.Answered.LastState != "TASK_STATE_COMPLETED" || !strings.Contains(out.Answered.Last, "permission: allow") {
		t.Fatalf("after the answer: %+v", out.Answered)
	}
	if files := jsFiles(out.Answered.Artifacts["changes"]); files["docs/notes.md"] != "notes from # Sample\n" {
		t.Errorf("what the permission allowed: %q", files)
	}
}

// TestA2ATokenHoldersKeepApart, as the attacker: B holds a token from the
// same --token-file as A, and no client key (as a2a-go, @a2a-js/sdk and
// Gemini CLI never show one). A's task, running and done, is not B's to
// read, follow, cancel or answer on either face, and B's status lists
// nothing of A's; A itself still can.
func TestA2ATokenHoldersKeepApart(t *testing.T) {
	parallel(t)
	const tokenA, tokenB = "a2a-holder-a-41f0", "a2a-holder-b-9c3e"
	x := startTLSExecutor(t, a2aAgent, "--token-file", tokenFile(t, tokenA+"\n"+tokenB), "--transports", "archive")
	key := x.key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hcA, hcB := a2aHTTP(t, key, tokenA, nil), a2aHTTP(t, key, tokenB, nil)
	a, _ := a2aClient(t, ctx, x.addr, hcA)
	b, _ := a2aClient(t, ctx, x.addr, hcB)

	ws, sum := zipOf(t, map[string]string{"a.txt": "A's secret\n", "gone.txt": "x\n"})
	done := collect(t, a.SendStreamingMessage(ctx, taskMessage("tidy the files", ws, sum)), nil)
	if done.last == nil || done.last.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("A's task: %v", done.states)
	}
	probe := func(id a2a.TaskID, running string) {
		// A's second task runs; B tries everything on both of A's tasks.
		for _, task := range []a2a.TaskID{done.task, id} {
			if got, err := b.GetTask(ctx, &a2a.TaskQueryParams{ID: task}); err == nil {
				t.Errorf("B's tasks/get of A's task %s: %d artifacts, state %s", task, len(got.Artifacts), got.Status.State)
			}
			if got, err := b.CancelTask(ctx, &a2a.TaskIDParams{ID: task}); err == nil {
				t.Errorf("B's tasks/cancel of A's task %s: %s", task, got.Status.State)
			}
			for ev, err := range b.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: task}) {
				if err == nil {
					t.Errorf("B's tasks/resubscribe of A's task %s gave %T", task, ev)
				}
				break
			}
			// The answer to a permission A's agent asked, sent as B.
			answer := a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"optionId": "allow"}})
			answer.TaskID = task
			_, err := b.SendMessage(ctx, &a2a.MessageSendParams{Message: answer})
			if err == nil {
				t.Errorf("B's message on A's task %s was taken", task)
			}
		}
		// The AWCP face, with B's token, about A's delegations.
		for _, dlg := range []string{done.delegID, running} {
			for _, r := range []struct{ method, path string }{
				{"GET", "/awcp/tasks/" + dlg + "/events"},
				{"GET", "/awcp/tasks/" + dlg + "/result"},
				{"POST", "/awcp/cancel/" + dlg},
				{"POST", "/awcp/tasks/" + dlg + "/permission"},
				{"POST", "/awcp/tasks/" + dlg + "/ack"},
			} {
				if code, body := awcpRequest(t, hcB, r.method, "https://"+x.addr+r.path); code != http.StatusForbidden {
					t.Errorf("B's %s %s: %d %.200s", r.method, r.path, code, body)
				}
			}
			if _, body := awcpRequest(t, hcB, "GET", "https://"+x.addr+"/awcp/status"); strings.Contains(body, dlg) {
				t.Errorf("B's /awcp/status lists A's delegation %s: %.300s", dlg, body)
			}
			if _, body := awcpRequest(t, hcA, "GET", "https://"+x.addr+"/awcp/status"); !strings.Contains(body, dlg) {
				t.Errorf("A's /awcp/status does not list its own delegation %s: %.300s", dlg, body)
			}
		}
		if code, body := awcpRequest(t, hcA, "GET", "https://"+x.addr+"/awcp/tasks/"+done.delegID+"/events"); code != http.StatusOK || !strings.Contains(body, "resultBase64") {
			t.Errorf("A's own events: %d %.200s", code, body)
		}
		if _, err := a.CancelTask(ctx, &a2a.TaskIDParams{ID: id}); err != nil {
			t.Errorf("A cancels its own task: %v", err)
		}
	}
	var last a2a.TaskState
	probed := false
	for ev, err := range a.SendStreamingMessage(ctx, taskMessage("hold on", ws, sum)) {
		if err != nil {
			t.Fatalf("A's second task's stream: %v", err)
		}
		if st, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
			last = st.Status.State
			if dlg, _ := st.Metadata[a2aMetaDelegation].(string); last == a2a.TaskStateWorking && dlg != "" && !probed {
				probed = true
				probe(st.TaskID, dlg)
			}
		}
	}
	if !probed || last != a2a.TaskStateCanceled {
		t.Errorf("A's second task ended %s (tried while it ran: %v), not cancelled by A alone", last, probed)
	}
	if got, err := a.GetTask(ctx, &a2a.TaskQueryParams{ID: done.task}); err != nil || len(got.Artifacts) != 2 {
		t.Errorf("A's own tasks/get: %+v %v", got, err)
	}
}

// awcpRequest sends an empty request with hc, the answer's status and up
// to 64 KiB of its body (an SSE stream is read for a second at most).
func awcpRequest(t *testing.T, hc *http.Client, method, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(data)
}
