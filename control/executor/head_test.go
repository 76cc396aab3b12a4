package executor_test

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control"

	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/internal/sandbox"
	"github.com/awcp/awcp/sshd"
	"github.com/awcp/awcp/sshd/sshdtest"
	"golang.org/x/crypto/ssh/knownhosts"
)

// headDelegator replays what the reference's delegator at HEAD sent an
// executor (testdata/head/head-delegator-wire.log): INVITE, the event
// stream, START, and /ack once the result is in, with the captured
// bodies. It returns the ACCEPT and the events, read as raw SSE.
func headDelegator(t *testing.T, x *executortest.Fixture, id, start string) (accept map[string]any, events []map[string]any) {
	t.Helper()
	return headDelegatorStart(t, x, id, captured(t, start, id))
}

// headDelegatorStart is headDelegator with START's body given.
func headDelegatorStart(t *testing.T, x *executortest.Fixture, id, start string) (accept map[string]any, events []map[string]any) {
	t.Helper()
	post := func(body string) map[string]any {
		resp, err := http.Post(x.Srv.URL+"/awcp", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		if resp.StatusCode != http.StatusOK || m["type"] == control.TypeError {
			t.Fatalf("HTTP %d: %v", resp.StatusCode, m)
		}
		return m
	}
	accept = post(captured(t, "invite-head.json", id))
	stream, err := http.Get(x.Srv.URL + "/awcp/tasks/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if ok := post(start); ok["ok"] != true {
		t.Fatalf("START answered %v", ok)
	}
	err = control.ReadSSE(stream.Body, t.TempDir(), 0, func(_ uint64, data []byte, result control.Spooled) (bool, error) {
		var m map[string]any
		json.Unmarshal(data, &m)
		if result.File != "" { // the reader diverted it to a file
			if m["type"] != control.EventSnapshot {
				t.Errorf("a %s event carries the result too", m["type"])
			}
			b, _ := os.ReadFile(result.File)
			m["snapshotBase64"] = base64.StdEncoding.EncodeToString(b)
		}
		events = append(events, m)
		return m["type"] == control.EventDone || m["type"] == control.EventError, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return accept, events
}

// getResult is GET /awcp/tasks/{id}/result: its HTTP status and body.
func getResult(t *testing.T, x *executortest.Fixture, id string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(x.Srv.URL + "/awcp/tasks/" + id + "/result")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// A head delegator, as the reference's sends it, gets from our executor
// what the reference's executor gives: ACCEPT with the retention, the
// agent run in the resource folder, the result as a snapshot of the
// environment named by done, the same again from GET /result, and after
// /ack nothing kept.
func TestExecutorAnswersHeadDelegator(t *testing.T) {
	x := executortest.New(t, `echo changed >> hello.txt; pwd > where.txt`, nil)
	id := "dlg_head0002"
	accept, events := headDelegator(t, x, id, "start-head.json")
	if accept["type"] != control.TypeAccept || accept["retentionMs"] != float64(60000) {
		t.Fatalf("ACCEPT %v, want one granting the 60000 ms asked", accept)
	}
	var types []string
	for _, ev := range events {
		types = append(types, ev["type"].(string))
	}
	if !slices.Equal(types, []string{"status", "snapshot", "done"}) {
		t.Fatalf("events %v, want status, snapshot, done", events)
	}
	snap, done := events[1], events[2]
	// What the reference's delegator keeps of it in its staged mode
	// (SnapshotManager.receive: the id is a directory name there, the
	// metadata shown by its delegate_snapshots).
	if id, _ := snap["snapshotId"].(string); !regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`).MatchString(id) {
		t.Errorf("snapshotId %q is not a safe directory name", snap["snapshotId"])
	}
	if sum, _ := snap["summary"].(string); sum == "" || snap["recommended"] != true {
		t.Errorf("snapshot event %v lacks a summary or recommended", snap)
	}
	if hl, ok := snap["highlights"].([]any); !ok || !slices.Contains(hl, any("hello.txt")) {
		t.Errorf("snapshot highlights %v", snap["highlights"])
	}
	meta, _ := snap["metadata"].(map[string]any)
	if tb, _ := meta["totalBytes"].(float64); meta["fileCount"] != float64(2) || tb < float64(len("hi\nchanged\n")) {
		t.Errorf("snapshot metadata %v, want fileCount 2 and totalBytes", meta)
	}
	if done["recommendedSnapshotId"] != snap["snapshotId"] || !slices.Equal(done["snapshotIds"].([]any), []any{snap["snapshotId"]}) {
		t.Fatalf("done %v does not name snapshot %v", done, snap["snapshotId"])
	}
	files := unzipString(t, snap["snapshotBase64"].(string))
	if files["workspace/hello.txt"] != "hi\nchanged\n" || !strings.HasSuffix(strings.TrimSpace(files["workspace/where.txt"]), "/"+id+"/workspace") {
		t.Fatalf("snapshot holds %v; want the agent's work in workspace/, where it ran", files)
	}
	status, res := getResult(t, x, id)
	if status != http.StatusOK || res["status"] != "completed" || res["snapshotBase64"] != snap["snapshotBase64"] ||
		res["summary"] != done["summary"] || res["resultChecksum"] != snap["resultChecksum"] {
		t.Fatalf("GET /result: %d %v", status, res["status"])
	}
	resp, err := http.Post(x.Srv.URL+"/awcp/tasks/"+id+"/ack", "application/json", nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("ack: %v %v", resp, err)
	}
	resp.Body.Close()
	if status, res := getResult(t, x, id); status != http.StatusNotFound || res["status"] != "not_found" {
		t.Fatalf("after ack GET /result: %d %v, want 404 not_found", status, res)
	}
	if _, err := os.Stat(filepath.Join(x.State, "results", id+".zip")); !os.IsNotExist(err) {
		t.Fatalf("the result is still kept after ack: %v", err)
	}
}

func unzipString(t *testing.T, b64 string) map[string]string {
	t.Helper()
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range zr.File {
		rc, _ := f.Open()
		b, _ := io.ReadAll(rc)
		rc.Close()
		out[f.Name] = string(b)
	}
	return out
}

// The reference's delegator at HEAD lends a directory over the live mount
// as its capture shows: its own OpenSSH serves the whole machine, and
// START's exportLocator is an absolute environment root holding
// .awcp/manifest.json and workspace, a symlink to the directory. Our
// executor mounts the resource itself — the agent, run there, sees the
// directory's files and nothing of the environment or the machine — and
// its work lands in the directory.
func TestExecutorMountsHeadEnvironment(t *testing.T) {
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		t.Fatalf("no usable /dev/fuse (.ci/run installs fuse3): %v", err)
	} else {
		f.Close()
	}
	addr, hostKey := sshdtest.OpenSSHSFTP(t)
	real := t.TempDir()
	os.WriteFile(filepath.Join(real, "hello.txt"), []byte("hi\n"), 0o644)
	env := filepath.Join(t.TempDir(), "environments", "dlg_head0003")
	os.MkdirAll(filepath.Join(env, ".awcp"), 0o700)
	os.WriteFile(filepath.Join(env, ".awcp", "manifest.json"), []byte(`{"version":"1"}`), 0o600)
	if err := os.Symlink(real, filepath.Join(env, "workspace")); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(knownHosts, []byte(knownhosts.Line([]string{addr}, hostKey)+"\n"), 0o600)
	auth, err := sshd.LoadAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cred, err := auth.Issue("awcp", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.DiscardHandler)
	x := executortest.New(t, `ls -A > seen.txt; ls -A .. > above.txt; echo made > made.txt`, func(o *executor.Options) {
		o.Transports = []control.ExecutorTransport{&executor.SSHFSExecutor{Logger: log, KnownHosts: knownHosts}}
	})
	id := "dlg_head0003"
	invite := strings.Replace(captured(t, "invite-head.json", id), `"archive"`, `"sshfs"`, 1)
	start, _ := json.Marshal(map[string]any{"version": "1", "type": control.TypeStart, "delegationId": id,
		"lease": map[string]any{"expiresAt": control.Timestamp(time.Now().Add(time.Hour)), "accessMode": "rw"},
		"transportHandle": map[string]any{"transport": "sshfs", "endpoint": map[string]any{"host": host, "port": mustAtoi(t, port), "user": "awcp"},
			"exportLocator": env + "/", "credential": map[string]any{"privateKey": cred.PrivateKey, "certificate": cred.Certificate}}})
	var acc control.Accept
	if err := x.Post(t.Context(), json.RawMessage(invite), &acc); err != nil || acc.RetentionMs == nil {
		t.Fatalf("INVITE: %v %+v", err, acc)
	}
	var ok control.StartResponse
	if err := x.Post(t.Context(), json.RawMessage(start), &ok); err != nil {
		t.Fatalf("START: %v", err)
	}
	if ev := x.LastEvent(id); ev.Type != control.EventDone {
		t.Fatalf("ended with %+v", ev)
	}
	if b, _ := os.ReadFile(filepath.Join(real, "made.txt")); string(b) != "made\n" {
		t.Fatalf("made.txt = %q: the agent's work did not land in the directory", b)
	}
	if b, _ := os.ReadFile(filepath.Join(real, "seen.txt")); string(b) != "hello.txt\nseen.txt\n" {
		t.Errorf("the agent saw %q in its folder, want the directory's files", b)
	}
	if b, _ := os.ReadFile(filepath.Join(real, "above.txt")); string(b) != "workspace\n" {
		t.Errorf("above its folder the agent saw %q, want only workspace (its environment root, local)", b)
	}
	if _, err := os.Stat(filepath.Join(x.Root, id)); !os.IsNotExist(err) {
		t.Errorf("the work dir is left: %v", err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// captured is the reference's captured message testdata/head/name (in
// control, shared by both roles' tests) for delegation id.
func captured(t *testing.T, name, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "head", name))
	if err != nil {
		t.Fatalf("the captured messages: %v", err)
	}
	return strings.NewReplacer("dlg_head0001", id, "dlg_seed0001", id).Replace(string(b))
}

// The reference's head delegator's archive runs under the default
// sandbox — a root and a user of its own — as under none, the agent in
// its resource folder, its change coming back: the captured START (its
// folder with no entry of its own), and one as the reference packs a
// folder of mode 0700 (archiver's glob stores "workspace/" with its
// mode) while the operator's idmapped grant holds the work root, as the
// interop suite grants its temporary directories. That one failed: "a
// root of its own: bind …/workspace: permission denied" — through the
// grant, the environment's root was the agent's, an owner the mapping
// does not know, and its 0700 stopped root.
func TestHeadArchiveUnderTheSandbox(t *testing.T) {
	if !sandbox.CanIsolate() {
		t.Fatal("not root: the agent's user and its idmapped grant cannot be tested here")
	}
	for _, tc := range []struct{ name, start string }{{"captured", "captured"}, {"0700 folder, granted work root", "0700"}} {
		t.Run(tc.name, func(t *testing.T) {
			var x *executortest.Fixture
			x = executortest.New(t, `echo changed >> hello.txt; pwd > where.txt`, func(o *executor.Options) {
				p := &sandbox.Policy{RO: slices.Clone(sandbox.System), Devices: sandbox.Devices, Isolated: true}
				if tc.start == "0700" {
					grant := filepath.Dir(o.WorkRoot)
					p.RW, p.Yours = []string{grant}, []string{grant}
				}
				o.Confine = p
			})
			id := "dlg_head0003"
			start := captured(t, "start-head.json", id)
			if tc.start == "0700" {
				start = headStartWith(t, start, map[string]string{"workspace/": "", "workspace/hello.txt": "hi\n"}, 0o700)
			}
			_, events := headDelegatorStart(t, x, id, start)
			last := events[len(events)-1]
			if last["type"] != "done" {
				t.Fatalf("the head delegation under the sandbox ended %v", last)
			}
			var snap map[string]any
			for _, ev := range events {
				if ev["type"] == "snapshot" {
					snap = ev
				}
			}
			if files := unzipString(t, snap["snapshotBase64"].(string)); files["workspace/hello.txt"] != "hi\nchanged\n" {
				t.Errorf("the agent's change did not come back: %v", files)
			}
		})
	}
}

// headStartWith is START with its archive replaced by one of files (a
// name ending in / is a directory, of mode dirMode), as the reference
// packs one.
func headStartWith(t *testing.T, start string, files map[string]string, dirMode os.FileMode) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	names := slices.Sorted(maps.Keys(files))
	for _, name := range names {
		hdr := &zip.FileHeader{Name: name, Method: zip.Deflate}
		if strings.HasSuffix(name, "/") {
			hdr.SetMode(os.ModeDir | dirMode)
		} else {
			hdr.SetMode(0o644)
		}
		w, err := zw.CreateHeader(hdr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, files[name])
	}
	zw.Close()
	var m map[string]any
	json.Unmarshal([]byte(start), &m)
	th := m["transportHandle"].(map[string]any)
	th["workspaceBase64"] = base64.StdEncoding.EncodeToString(buf.Bytes())
	sum := sha256.Sum256(buf.Bytes())
	th["checksum"] = hex.EncodeToString(sum[:])
	out, _ := json.Marshal(m)
	return string(out)
}
