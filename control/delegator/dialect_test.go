//go:build linux

package delegator

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/lease"
)

// headPeer stands in for the reference's executor at HEAD (b10e261), as
// its captured messages show it (testdata/head): it reads an INVITE's
// environment and answers with its retention; it reads START's
// transportHandle (and, without one, fails the task as it did when sent
// a seed START); its stream has no event ids and ends with a snapshot
// event, then done naming it; /result gives the snapshot again and /ack
// is recorded. Its "agent" changes workspace/hello.txt and leaves a file
// at the environment's root, as the captured run did.
type headPeer struct {
	t *testing.T
	// replayOnly: the stream holds what the reference replays to a
	// subscriber after the task ended: done alone, without snapshot ids.
	replayOnly bool
	// noResult: GET /result has no snapshot either.
	noResult bool

	mu       sync.Mutex
	invite   map[string]any
	start    map[string]any
	received []string // names in START's archive
	result   []byte   // the snapshot ZIP
	failed   bool     // START had no transportHandle
	started  chan struct{}
	acked    bool
	mounted  []string // what the live mount's root held
}

func newHeadPeer(t *testing.T) *headPeer { return &headPeer{t: t, started: make(chan struct{})} }

func (h *headPeer) captured(name, id string) string {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "head", name)) // control's, shared by both roles' tests
	if err != nil {
		h.t.Fatalf("the captured messages: %v", err)
	}
	return strings.NewReplacer("dlg_head0001", id, "dlg_seed0001", id).Replace(string(b))
}

func (h *headPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	parts := strings.Split(r.URL.Path, "/") // "", "awcp", "tasks", id, what
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/awcp":
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		id, _ := m["delegationId"].(string)
		h.mu.Lock()
		defer h.mu.Unlock()
		switch m["type"] {
		case control.TypeInvite:
			h.invite = m
			// Math.min(undefined, cap) is NaN, which JSON writes as null.
			var retention any
			if asked, ok := m["retentionMs"].(float64); ok {
				retention = min(asked, 604800000)
			}
			lease := m["lease"].(map[string]any)
			acc, _ := json.Marshal(map[string]any{"version": "1", "type": control.TypeAccept, "delegationId": id,
				"retentionMs": retention, "executorWorkDir": map[string]any{"path": "/srv/awcp/exec/work/" + id},
				"executorConstraints": map[string]any{"acceptedAccessMode": lease["accessMode"], "maxTtlSeconds": lease["ttlSeconds"]}})
			w.Write(acc)
		case control.TypeStart:
			h.start = m
			h.failed = m["transportHandle"] == nil
			switch {
			case h.failed:
			case m["transportHandle"].(map[string]any)["transport"] == control.TransportSSHFS:
				h.mount(m["transportHandle"].(map[string]any))
			default:
				h.work(m["transportHandle"].(map[string]any))
			}
			close(h.started)
			io.WriteString(w, `{"ok":true}`)
		default:
			io.WriteString(w, `{"ok":true}`)
		}
	case r.Method == http.MethodGet && len(parts) == 5 && parts[4] == "events":
		select {
		case <-h.started:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		h.mu.Lock()
		defer h.mu.Unlock()
		switch {
		case h.failed:
			io.WriteString(w, h.captured("sse-seed.txt", parts[3]))
		case h.mounted != nil: // a live mount has no snapshot
			for _, line := range strings.Split(h.captured("sse-head.txt", parts[3]), "\n\n") {
				if !strings.Contains(line, `"type":"snapshot"`) {
					io.WriteString(w, strings.Replace(line, `,"snapshotIds":["snap_3165170392ba"],"recommendedSnapshotId":"snap_3165170392ba"`, "", 1)+"\n\n")
				}
			}
		case h.replayOnly:
			fmt.Fprintf(w, "data: {\"delegationId\":%q,\"type\":\"done\",\"timestamp\":\"2026-11-21T22:15:55.039Z\",\"summary\":\"saw 2 entries\",\"highlights\":[\"EXECUTOR_WAS_HERE.txt\"]}\n\n", parts[3])
		default:
			events := h.captured("sse-head.txt", parts[3])
			var snap struct{ SnapshotBase64 string }
			for _, line := range strings.Split(events, "\n") {
				if strings.Contains(line, `"type":"snapshot"`) {
					json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &snap)
				}
			}
			io.WriteString(w, strings.Replace(events, snap.SnapshotBase64, base64.StdEncoding.EncodeToString(h.result), 1))
		}
	case r.Method == http.MethodGet && len(parts) == 5 && parts[4] == "result":
		h.mu.Lock()
		defer h.mu.Unlock()
		res := map[string]any{"status": "completed", "completedAt": "2026-11-21T22:15:55.039Z", "summary": "saw 2 entries"}
		if !h.noResult {
			res["snapshotBase64"] = base64.StdEncoding.EncodeToString(h.result)
		}
		json.NewEncoder(w).Encode(res)
	case r.Method == http.MethodPost && len(parts) == 5 && parts[4] == "ack":
		h.mu.Lock()
		h.acked = true
		h.mu.Unlock()
		io.WriteString(w, `{"ok":true}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"not found"}`)
	}
}

// mount does what the reference's executor does with a live mount, with
// Debian's sshfs and the reference's options (but noappledouble, which
// Linux's sshfs refuses): it mounts exportLocator, and its agent works in
// the resource folder, workspace/.
func (h *headPeer) mount(handle map[string]any) {
	ep, cred := handle["endpoint"].(map[string]any), handle["credential"].(map[string]any)
	keys := h.t.TempDir()
	key := filepath.Join(keys, "key")
	os.WriteFile(key, []byte(cred["privateKey"].(string)), 0o600)
	os.WriteFile(key+"-cert.pub", []byte(cred["certificate"].(string)), 0o600)
	mnt := h.t.TempDir()
	opts := "IdentityFile=" + key + ",CertificateFile=" + key + "-cert.pub,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null" +
		",reconnect,ServerAliveInterval=15,ServerAliveCountMax=3,follow_symlinks,BatchMode=yes,port=" + fmt.Sprint(ep["port"])
	remote := fmt.Sprintf("%s@%s:%s", ep["user"], ep["host"], handle["exportLocator"])
	if out, err := exec.Command("sshfs", "-o", opts, remote, mnt).CombinedOutput(); err != nil {
		h.t.Errorf("sshfs %s: %v\n%s", remote, err, out)
		h.mounted = []string{}
		return
	}
	defer exec.Command("fusermount3", "-u", "-z", mnt).Run()
	ents, _ := os.ReadDir(mnt)
	h.mounted = []string{}
	for _, e := range ents {
		h.mounted = append(h.mounted, e.Name())
	}
	if err := os.WriteFile(filepath.Join(mnt, "workspace", "hello.txt"), []byte("changed by the head executor\n"), 0o644); err != nil {
		h.t.Errorf("the agent's write: %v", err)
	}
	if err := exec.Command("fusermount3", "-u", mnt).Run(); err != nil {
		h.t.Errorf("unmount: %v", err)
	}
}

// work checks START's archive as the reference does (its checksum) and
// makes the snapshot its agent would leave.
func (h *headPeer) work(handle map[string]any) {
	zipData, err := base64.StdEncoding.DecodeString(handle["workspaceBase64"].(string))
	if err != nil {
		h.t.Errorf("START's workspaceBase64: %v", err)
		return
	}
	if sum := sha256.Sum256(zipData); hex.EncodeToString(sum[:]) != handle["checksum"] {
		h.t.Errorf("START's checksum does not match its archive")
	}
	zr, err := zip.NewReader(bytes.NewReader(zipData), int64(len(zipData)))
	if err != nil {
		h.t.Errorf("START's archive: %v", err)
		return
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, f := range zr.File {
		h.received = append(h.received, f.Name)
		hdr := f.FileHeader
		fw, _ := zw.CreateHeader(&hdr)
		if f.Name == "workspace/hello.txt" {
			io.WriteString(fw, "changed by the head executor\n")
			continue
		}
		if !f.Mode().IsDir() {
			rc, _ := f.Open()
			io.Copy(fw, rc)
			rc.Close()
		}
	}
	fw, _ := zw.Create("EXECUTOR_WAS_HERE.txt")
	io.WriteString(fw, "executor was here")
	zw.Close()
	h.result = out.Bytes()
}

// Our delegator, in its default dialect (auto), finds a head executor by
// its ACCEPT and speaks its dialect: START's transportHandle with the
// directory as the folder workspace/, the snapshot applied from that
// folder only, /ack after. When the stream holds done alone (the
// reference replays nothing else), the result is fetched with GET
// /result.
func TestDelegatorSpeaksHeadToHeadExecutor(t *testing.T) {
	for _, replayOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "snapshot event", true: "done replayed alone"}[replayOnly], func(t *testing.T) {
			peer := newHeadPeer(t)
			peer.replayOnly = replayOnly
			srv := httptest.NewServer(peer)
			defer srv.Close()
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi\n"), 0o644)
			end := delegateArchive(t, srv.URL, dir)
			if end.State != lease.Completed {
				t.Fatalf("ended %s (%+v), want completed", end.State, end.Failure)
			}
			if end.Dialect != control.DialectHead {
				t.Errorf("dialect %q, want head", end.Dialect)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "hello.txt")); string(b) != "changed by the head executor\n" {
				t.Errorf("hello.txt = %q: the snapshot was not applied", b)
			}
			if _, err := os.Stat(filepath.Join(dir, "EXECUTOR_WAS_HERE.txt")); err == nil {
				t.Error("a file outside the resource folder was applied")
			}
			if !slices.ContainsFunc(end.Notes, func(n string) bool { return strings.Contains(n, "EXECUTOR_WAS_HERE.txt") }) {
				t.Errorf("notes %q do not say what was left out", end.Notes)
			}
			if !slices.Equal(end.Changes, []string{"M hello.txt"}) {
				t.Errorf("changes %q", end.Changes)
			}
			peer.mu.Lock()
			defer peer.mu.Unlock()
			if peer.invite["workspace"] == nil || peer.invite["environment"] == nil || peer.invite["retentionMs"] == nil {
				t.Errorf("the auto INVITE lacks one dialect's members: %v", peer.invite)
			}
			if peer.start["transportHandle"] == nil || peer.start["workDir"] != nil {
				t.Errorf("START is not in the head dialect: %v", peer.start)
			}
			if !slices.Equal(peer.received, []string{"workspace/", "workspace/hello.txt"}) {
				t.Errorf("START's archive holds %v, want the folder workspace/", peer.received)
			}
			if !peer.acked {
				t.Error("the result was not acknowledged")
			}
		})
	}
}

// A head done whose snapshot neither its event nor GET /result delivers
// fails the delegation and changes nothing.
func TestHeadResultMissingIsRefused(t *testing.T) {
	peer := newHeadPeer(t)
	peer.replayOnly, peer.noResult = true, true
	srv := httptest.NewServer(peer)
	defer srv.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi\n"), 0o644)
	end := delegateArchive(t, srv.URL, dir)
	if end.State != lease.Error || end.Failure == nil || end.Failure.Code != control.CodeTaskFailed {
		t.Fatalf("ended %s with %+v, want TASK_FAILED", end.State, end.Failure)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "hello.txt")); string(b) != "hi\n" {
		t.Fatalf("hello.txt = %q", b)
	}
}

// Told to speak seed to a head executor, the delegator reports the
// executor's own failure (it reads no workDir) with its code and reason.
func TestSeedStartToHeadExecutorFailsWithItsReason(t *testing.T) {
	peer := newHeadPeer(t)
	srv := httptest.NewServer(peer)
	defer srv.Close()
	dir := t.TempDir()
	dlg, _ := newArchiveDelegator(t, nil)
	d, err := dlg.Create(ExportRequest{Dir: dir, Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive, Dialect: control.DialectSeed})
	if err != nil {
		t.Fatal(err)
	}
	end, err := dlg.Run(t.Context(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if end.State != lease.Error || end.Failure.Code != control.CodeTaskFailed || !strings.Contains(end.Failure.Message, "transport") {
		t.Fatalf("ended %s with %+v, want the executor's TASK_FAILED", end.State, end.Failure)
	}
	peer.mu.Lock()
	defer peer.mu.Unlock()
	if peer.invite["environment"] != nil || peer.invite["retentionMs"] != nil || peer.invite["workspace"] == nil {
		t.Errorf("--dialect seed sent %v, want the seed INVITE alone", peer.invite)
	}
}

// With our executor, the auto INVITE is answered in seed, the default.
func TestAutoDialectWithOursIsSeed(t *testing.T) {
	x := executortest.New(t, `echo hi > out.txt`, nil)
	dir := t.TempDir()
	end := delegateArchive(t, x.Srv.URL, dir)
	// The notes are plain HTTP's, said on each use, and the executor's
	// sandbox (none: the test executor's agents run unconfined).
	want := []string{"plain HTTP to " + x.Srv.URL + " (--plain-http): the token, the workspace and the session travel in clear", "executor sandbox: none (--sandbox off)"}
	if end.State != lease.Completed || end.Dialect != control.DialectSeed || !slices.Equal(end.Notes, want) {
		t.Fatalf("ended %s in %q with notes %q, want completed in seed", end.State, end.Dialect, end.Notes)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "hi\n" {
		t.Fatalf("out.txt = %q", b)
	}
}

// checkHeadRun fails unless end, a delegation in the head dialect of dir
// whose agent ran headAgent, completed as it should.
func checkHeadRun(t *testing.T, end *lease.Delegation, dir string) {
	t.Helper()
	if end.State != lease.Completed || end.Dialect != control.DialectHead {
		t.Fatalf("ended %s in dialect %q (%+v), want completed in head", end.State, end.Dialect, end.Failure)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "from the agent\n" {
		t.Fatalf("out.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "where.txt")); !strings.HasSuffix(strings.TrimSpace(string(b)), "/workspace") {
		t.Fatalf("the agent ran in %q, want the resource folder", b)
	}
}

// HeadAgent is the agent of checkHeadRun.
const HeadAgent = `echo from the agent > out.txt; pwd > where.txt`

// Our delegator told to speak head, with our executor, over the archive:
// the agent runs in workspace/ (the live mount: control_test).
func TestHeadDialectBetweenOurs(t *testing.T) {
	for _, rounds := range []bool{false, true} {
		t.Run(map[bool]string{false: "one task", true: "rounds"}[rounds], func(t *testing.T) { testHeadBetweenOurs(t, rounds) })
	}
}

// testHeadBetweenOurs: with rounds, the executor ends the agent's task
// with round_done and holds the workspace for a minute; the delegator's
// CLOSE ends it at once, the round's snapshot applied.
func testHeadBetweenOurs(t *testing.T, rounds bool) {
	x := executortest.New(t, HeadAgent, func(o *executor.Options) {
		if rounds {
			o.RoundWait = time.Minute
		}
	})
	dlg, _ := newArchiveDelegator(t, nil)
	dir := t.TempDir()
	start := time.Now()
	d, err := dlg.Create(ExportRequest{Dir: dir, Peer: x.Srv.URL, PeerKey: x.Key(), Prompt: "p", Transport: control.TransportArchive, Dialect: control.DialectHead})
	if err != nil {
		t.Fatal(err)
	}
	end, err := dlg.Run(t.Context(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkHeadRun(t, end, dir)
	if _, err := x.Store.Assignment(d.ID); err == nil {
		t.Error("the executor still keeps the delegation after the delegator's ack")
	}
	if got := slices.Contains(end.Notes, roundsNote); got != rounds || time.Since(start) > 20*time.Second {
		t.Errorf("rounds %v: noted %v, took %s (notes %q)", rounds, got, time.Since(start), end.Notes)
	}
}
