package executor_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/lease"
)

// peer is a delegator's client of f.
func peer(f *executortest.Fixture, token string) *delegator.PeerClient {
	return &delegator.PeerClient{BaseURL: f.URL(), Token: token, PlainHTTP: true}
}

func invite(id string) *control.Invite {
	return &control.Invite{
		BaseMessage: control.Header(control.TypeInvite, id),
		Task:        control.Task{Description: "test", Prompt: "do the thing"},
		Lease:       control.InviteLease{TTLSeconds: 600, AccessMode: control.AccessRW},
		Workspace:   &control.Workspace{ExportName: "awcp/" + id},
	}
}

func workspace(t *testing.T, files map[string]string) control.WorkDirInfo {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := archive.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	return control.WorkDirInfo{Transport: control.TransportArchive, WorkspaceBase64: base64.StdEncoding.EncodeToString(p.Zip), Checksum: archive.Checksum(p.Zip)}
}

func start(id string, wd control.WorkDirInfo, expires time.Time) *control.Start {
	return &control.Start{BaseMessage: control.Header(control.TypeStart, id), Lease: control.StartLease{ExpiresAt: control.Timestamp(expires), AccessMode: control.AccessRW}, WorkDir: wd}
}

// delegate runs INVITE and START for id.
func delegate(f *executortest.Fixture, id string, wd control.WorkDirInfo) {
	f.T.Helper()
	pc := peer(f, "")
	if _, err := pc.Invite(context.Background(), invite(id)); err != nil {
		f.T.Fatalf("INVITE: %v", err)
	}
	if err := pc.Start(context.Background(), start(id, wd, time.Now().Add(10*time.Minute))); err != nil {
		f.T.Fatalf("START: %v", err)
	}
}

type seqEvent struct {
	seq    uint64
	ev     *control.Event
	result []byte // the result ZIP a done event carried
}

// events reads id's stream from after last to its terminal event.
func events(f *executortest.Fixture, id string, last uint64) []seqEvent {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []seqEvent
	err := peer(f, "").Events(ctx, id, last, func(seq uint64, ev *control.Event) error {
		se := seqEvent{seq: seq, ev: ev}
		if ev.ResultFile != "" { // removed when this returns
			var err error
			if se.result, err = os.ReadFile(ev.ResultFile); err != nil {
				return err
			}
		}
		out = append(out, se)
		return nil
	})
	if err != nil {
		f.T.Fatalf("events of %s: %v (got %d)", id, err, len(out))
	}
	return out
}

func last(evs []seqEvent) *control.Event { return evs[len(evs)-1].ev }

func TestExecutorRunsTaskAndStreamsEvents(t *testing.T) {
	// same.txt and c.txt are written again with what they held: not
	// changes, not highlights.
	f := executortest.New(t, `echo step one; echo step two; echo more >> a.txt; echo new > b.txt; rm gone.txt; `+
		`echo same > same.txt; sed -i s/zzz/y/ c.txt`, nil)
	id := "dlg_happy"
	delegate(f, id, workspace(t, map[string]string{"a.txt": "a\n", "gone.txt": "x", "same.txt": "same\n", "c.txt": "c\n"}))
	evs := events(f, id, 0)

	var kinds []string
	for i, se := range evs {
		if se.seq != uint64(i+1) {
			t.Fatalf("event %d has id %d", i, se.seq)
		}
		kinds = append(kinds, se.ev.Type+"/"+se.ev.Status+se.ev.Message)
	}
	want := []string{"status/runningworkspace ready; agent starting; sandbox: none (--sandbox off)", "status/progressstep one", "status/progressstep two", "done/"}
	if strings.Join(kinds, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, want %q", kinds, want)
	}
	done := last(evs)
	if done.Summary != "step one\nstep two" || strings.Join(done.Highlights, ",") != "a.txt,b.txt" {
		t.Fatalf("done %+v", done)
	}
	if got, want := done.ResultChecksum, archive.Checksum(evs[len(evs)-1].result); got != want {
		t.Fatalf("resultChecksum %q, want the result's SHA-256 %q", got, want)
	}
	// The result is the work dir as the agent left it.
	dst := t.TempDir()
	if err := archive.Extract(evs[len(evs)-1].result, dst, archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(b) != "a\nmore\n" {
		t.Fatalf("a.txt = %q", b)
	}
	if _, err := os.Stat(filepath.Join(dst, "gone.txt")); !os.IsNotExist(err) {
		t.Fatal("deleted file in result")
	}
	// The work dir is gone; the stream stays for late subscribers and resumes.
	if _, err := os.Stat(filepath.Join(f.Root, id)); !os.IsNotExist(err) {
		t.Fatalf("work dir left behind: %v", err)
	}
	if again := events(f, id, 0); len(again) != len(evs) || !bytes.Equal(again[len(again)-1].result, evs[len(evs)-1].result) {
		t.Fatalf("late subscriber got %d events, want %d with the same result", len(again), len(evs))
	}
	// The received workspace is gone; the result is kept for the stream.
	if left, _ := os.ReadDir(filepath.Join(f.State, "incoming")); len(left) != 0 {
		t.Fatalf("received workspaces left: %v", left)
	}
	resumed := events(f, id, 2)
	if len(resumed) != 2 || resumed[0].seq != 3 {
		t.Fatalf("resume after 2 got %+v", resumed)
	}
}

func TestExecutorAgentFailure(t *testing.T) {
	f := executortest.New(t, `echo trying; echo "fatal: it broke" >&2; exit 4`, nil)
	delegate(f, "dlg_fail", workspace(t, map[string]string{"a": "1"}))
	ev := last(events(f, "dlg_fail", 0))
	if ev.Type != control.EventError || ev.Code != control.CodeTaskFailed || !strings.Contains(ev.Message, "status 4") || !strings.Contains(ev.Message, "it broke") {
		t.Fatalf("%+v", ev)
	}
}

func TestExecutorPolicy(t *testing.T) {
	tests := []struct {
		name     string
		mod      func(*executor.Options)
		prepare  func(f *executortest.Fixture)
		msg      func(*control.Invite)
		token    string
		wantCode string
		check    func(t *testing.T, acc *control.Accept)
	}{
		{name: "token required", mod: func(o *executor.Options) { o.Tokens = []string{"s3cret"} }, wantCode: control.CodeAuthFailed},
		{name: "wrong token", mod: func(o *executor.Options) { o.Tokens = []string{"s3cret"} }, token: "guess", wantCode: control.CodeAuthFailed},
		{name: "right token", mod: func(o *executor.Options) { o.Tokens = []string{"a", "s3cret"} }, token: "s3cret"},
		{name: "concurrency limit", mod: func(o *executor.Options) { o.MaxConcurrent = 1 },
			prepare: func(f *executortest.Fixture) {
				if _, err := peer(f, "").Invite(context.Background(), invite("dlg_first")); err != nil {
					f.T.Fatal(err)
				}
			}, wantCode: control.CodeDeclined},
		{name: "work dir not empty", prepare: func(f *executortest.Fixture) {
			os.MkdirAll(filepath.Join(f.Root, "dlg_policy"), 0o700)
			os.WriteFile(filepath.Join(f.Root, "dlg_policy", "precious"), []byte("x"), 0o600)
		}, wantCode: control.CodeWorkdirDenied},
		{name: "work dir is a symlink", prepare: func(f *executortest.Fixture) {
			os.Symlink("/etc", filepath.Join(f.Root, "dlg_policy"))
		}, wantCode: control.CodeWorkdirDenied},
		{name: "rw downgraded to ro", mod: func(o *executor.Options) { o.AccessModes = []string{control.AccessRO} },
			check: func(t *testing.T, acc *control.Accept) {
				if acc.ExecutorConstraints.AcceptedAccessMode != control.AccessRO {
					t.Fatalf("accepted %q", acc.ExecutorConstraints.AcceptedAccessMode)
				}
			}},
		{name: "ro refused by rw-only", mod: func(o *executor.Options) { o.AccessModes = []string{control.AccessRW} },
			msg: func(i *control.Invite) { i.Lease.AccessMode = control.AccessRO }, wantCode: control.CodeDeclined},
		{name: "ttl capped", mod: func(o *executor.Options) { o.MaxTTL = time.Minute },
			check: func(t *testing.T, acc *control.Accept) {
				if acc.ExecutorConstraints.MaxTTLSeconds != 60 {
					t.Fatalf("maxTtlSeconds %d", acc.ExecutorConstraints.MaxTTLSeconds)
				}
			}},
		{name: "transport not offered", msg: func(i *control.Invite) { i.Requirements = &control.Requirements{Transport: control.TransportSSHFS} }, wantCode: control.CodeDeclined},
		{name: "work dir under the root", check: func(t *testing.T, acc *control.Accept) {
			if !strings.HasSuffix(acc.ExecutorWorkDir.Path, "/work/dlg_policy") {
				t.Fatalf("work dir %s", acc.ExecutorWorkDir.Path)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := executortest.New(t, "true", tt.mod)
			os.MkdirAll(f.Root, 0o700)
			if tt.prepare != nil {
				tt.prepare(f)
			}
			inv := invite("dlg_policy")
			if tt.msg != nil {
				tt.msg(inv)
			}
			acc, err := peer(f, tt.token).Invite(context.Background(), inv)
			if tt.wantCode != "" {
				var pe *control.ProtocolError
				if !errors.As(err, &pe) || pe.Code != tt.wantCode {
					t.Fatalf("err = %v, want %s", err, tt.wantCode)
				}
				if strings.Contains(pe.Message, f.Root) {
					t.Fatalf("message leaks a host path: %s", pe.Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, acc)
			}
		})
	}
}

func TestExecutorTokenGuardsOtherEndpoints(t *testing.T) {
	f := executortest.New(t, "true", func(o *executor.Options) { o.Tokens = []string{"s3cret"} })
	for _, r := range []struct{ method, path string }{
		{"GET", "/awcp/status"}, {"GET", "/awcp/tasks/dlg_x/events"}, {"POST", "/awcp/cancel/dlg_x"},
		{"GET", "/awcp/probe?port=22"},
	} {
		req, _ := http.NewRequest(r.method, f.Srv.URL+r.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m control.Error
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || m.Code != control.CodeAuthFailed {
			t.Errorf("%s %s: %d %+v", r.method, r.path, resp.StatusCode, m)
		}
	}
}

func TestExecutorMalformedInput(t *testing.T) {
	f := executortest.New(t, "true", func(o *executor.Options) { o.MaxBodyBytes = 1 << 20 })
	tests := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"not json", "POST", "/awcp", "<xml/>", 400, "body"},
		{"empty", "POST", "/awcp", "", 400, "body"},
		{"wrong version", "POST", "/awcp", `{"version":"9","type":"INVITE","delegationId":"dlg_a"}`, 400, "version"},
		{"bad id", "POST", "/awcp", `{"version":"1","type":"INVITE","delegationId":"../x"}`, 400, "delegationId"},
		{"missing prompt", "POST", "/awcp", `{"version":"1","type":"INVITE","delegationId":"dlg_a","task":{"description":"d"}}`, 400, "task.prompt"},
		{"ACCEPT posted", "POST", "/awcp", `{"version":"1","type":"ACCEPT","delegationId":"dlg_a","executorWorkDir":{"path":"/x"}}`, 400, "ACCEPT"},
		{"GET on /awcp", "GET", "/awcp", "", 405, "GET"},
		{"unknown path", "GET", "/admin", "", 404, "no such endpoint"},
		{"bad id in path", "GET", "/awcp/tasks/..%2f..%2fetc/events", "", 400, "invalid delegation id"},
		{"unknown delegation events", "GET", "/awcp/tasks/dlg_nope/events", "", 404, "unknown delegation"},
		{"START without INVITE", "POST", "/awcp", mustJSON(start("dlg_nope", control.WorkDirInfo{Transport: "archive", WorkspaceBase64: "UEs=", Checksum: "00"}, time.Now().Add(time.Hour))), 503, "no INVITE"},
		{"too large", "POST", "/awcp", `{"version":"1","pad":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, f.Srv.URL+tt.path, strings.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			var m control.Error
			if resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &m) != nil {
				t.Fatalf("not a JSON answer: %s %s", resp.Header.Get("Content-Type"), body)
			}
			if resp.StatusCode != tt.status || m.Type != control.TypeError || m.Version != control.Version || !control.KnownCode(m.Code) || !strings.Contains(m.Message, tt.contains) {
				t.Fatalf("got %d %s", resp.StatusCode, body)
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := control.Marshal(v)
	return string(b)
}

// TestExecutorAcceptsLargeWorkspace: the reference implementation refuses
// bodies over 100 kB; a START carrying megabytes must go through.
func TestExecutorAcceptsLargeWorkspace(t *testing.T) {
	f := executortest.New(t, `wc -c < big.bin`, nil)
	big := make([]byte, 3<<20) // random: incompressible, ~4 MB as base64
	rand.Read(big)
	delegate(f, "dlg_big", workspace(t, map[string]string{"big.bin": string(big)}))
	ev := last(events(f, "dlg_big", 0))
	if ev.Type != control.EventDone || strings.TrimSpace(ev.Summary) != "3145728" {
		t.Fatalf("%+v", ev.Summary)
	}
}

func TestExecutorSetupFailures(t *testing.T) {
	badZip := func() control.WorkDirInfo {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.Create("../../escaped")
		w.Write([]byte("x"))
		zw.Close()
		return control.WorkDirInfo{Transport: control.TransportArchive, WorkspaceBase64: base64.StdEncoding.EncodeToString(buf.Bytes()), Checksum: archive.Checksum(buf.Bytes())}
	}
	tests := []struct {
		name string
		wd   func(t *testing.T) control.WorkDirInfo
		want string
	}{
		{"checksum mismatch", func(t *testing.T) control.WorkDirInfo {
			wd := workspace(t, map[string]string{"a": "1"})
			wd.Checksum = strings.Repeat("0", 64)
			return wd
		}, "checksum"},
		{"not base64", func(t *testing.T) control.WorkDirInfo {
			return control.WorkDirInfo{Transport: control.TransportArchive, WorkspaceBase64: "!!!", Checksum: "00"}
		}, "base64"},
		{"zip slip", func(t *testing.T) control.WorkDirInfo { return badZip() }, "leaves the work directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := executortest.New(t, "true", nil)
			id := "dlg_setup"
			pc := peer(f, "")
			if _, err := pc.Invite(context.Background(), invite(id)); err != nil {
				t.Fatal(err)
			}
			err := pc.Start(context.Background(), start(id, tt.wd(t), time.Now().Add(time.Hour)))
			var pe *control.ProtocolError
			if !errors.As(err, &pe) || pe.Code != control.CodeSetupFailed || !strings.Contains(pe.Message, tt.want) {
				t.Fatalf("err = %v", err)
			}
			ev := last(events(f, id, 0))
			if ev.Code != control.CodeSetupFailed {
				t.Fatalf("stream ends with %+v", ev)
			}
			ents, _ := os.ReadDir(f.Root)
			if len(ents) != 0 {
				t.Fatalf("work root not clean: %v", ents)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f.Root), "escaped")); err == nil {
				t.Fatal("zip slip wrote outside the work root")
			}
		})
	}
}

// agentPID waits until the assignment records its agent's pid.
func agentPID(t *testing.T, s *lease.Store, id string) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		if a, err := s.Assignment(id); err == nil && a.AgentPID > 0 {
			return a.AgentPID
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("agent never started")
	return 0
}

func TestExecutorCancelKillsAgent(t *testing.T) {
	f := executortest.New(t, `sleep 60 & sleep 60`, nil)
	id := "dlg_cancel"
	delegate(f, id, workspace(t, map[string]string{"a": "1"}))
	pid := agentPID(t, f.Store, id)
	if err := peer(f, "").Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	ev := last(events(f, id, 0))
	if ev.Code != control.CodeCancelled {
		t.Fatalf("%+v", ev)
	}
	if agent.GroupAlive(pid) {
		t.Fatalf("agent group %d still there after cancel returned", pid)
	}
	if _, err := os.Stat(filepath.Join(f.Root, id)); !os.IsNotExist(err) {
		t.Fatal("work dir left after cancel")
	}
	// A second cancel is harmless.
	if err := peer(f, "").Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

func TestExecutorExpiresRunningTask(t *testing.T) {
	slow(t)
	f := executortest.New(t, `sleep 60`, nil)
	id := "dlg_expire"
	pc := peer(f, "")
	pc.Invite(context.Background(), invite(id))
	if err := pc.Start(context.Background(), start(id, workspace(t, map[string]string{"a": "1"}), time.Now().Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	pid := agentPID(t, f.Store, id)
	ev := last(events(f, id, 0))
	if ev.Code != control.CodeExpired {
		t.Fatalf("%+v", ev)
	}
	if agent.GroupAlive(pid) {
		t.Fatal("agent survived expiry")
	}
	a, _ := f.Store.Assignment(id)
	if a.State != lease.Expired {
		t.Fatalf("state %s", a.State)
	}
}

func TestExecutorStartTimeoutFreesSlot(t *testing.T) {
	slow(t)
	f := executortest.New(t, "true", func(o *executor.Options) { o.MaxConcurrent = 1; o.StartTimeout = 300 * time.Millisecond })
	pc := peer(f, "")
	if _, err := pc.Invite(context.Background(), invite("dlg_slow")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	err := pc.Start(context.Background(), start("dlg_slow", workspace(t, map[string]string{"a": "1"}), time.Now().Add(time.Hour)))
	var pe *control.ProtocolError
	if !errors.As(err, &pe) || pe.Code != control.CodeStartExpired {
		t.Fatalf("late START: %v", err)
	}
	if _, err := pc.Invite(context.Background(), invite("dlg_next")); err != nil {
		t.Fatalf("slot not freed: %v", err)
	}
}

func TestExecutorKeepAliveAndRetention(t *testing.T) {
	slow(t)
	f := executortest.New(t, `sleep 0.5; echo late`, func(o *executor.Options) {
		o.KeepAlive = 50 * time.Millisecond
		o.Retention = 200 * time.Millisecond
	})
	id := "dlg_keep"
	delegate(f, id, workspace(t, map[string]string{"a": "1"}))
	resp, err := http.Get(f.Srv.URL + "/awcp/tasks/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %s", ct)
	}
	raw, _ := io.ReadAll(bufio.NewReader(resp.Body))
	resp.Body.Close()
	if !bytes.Contains(raw, []byte(": keep-alive\n\n")) || !bytes.Contains(raw, []byte("id: 1\ndata: {")) ||
		!bytes.Contains(raw, []byte(`,"resultBase64":"UEsDB`)) { // a ZIP's magic number
		t.Fatalf("stream:\n%s", raw)
	}
	// After the retention period the stream is gone, and its result.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_, err := f.Store.Assignment(id)
		_, ferr := os.Stat(filepath.Join(f.State, "results", id+".zip"))
		if errors.Is(err, lease.ErrNotFound) && errors.Is(ferr, fs.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("events or the result outlived the retention period")
}

func TestExecutorShutdownFailsRunningTask(t *testing.T) {
	f := executortest.New(t, `sleep 60`, nil)
	id := "dlg_shutdown"
	delegate(f, id, workspace(t, map[string]string{"a": "1"}))
	pid := agentPID(t, f.Store, id)
	f.Stop()
	a, _ := f.Store.Assignment(id)
	if a.State != lease.Error || a.Failure.Code != control.CodeTaskFailed || agent.GroupAlive(pid) {
		t.Fatalf("after shutdown: %s %+v, agent alive %v", a.State, a.Failure, agent.GroupAlive(pid))
	}
	f.Start("true", nil)
	if ev := last(events(f, id, 0)); ev.Code != control.CodeTaskFailed || !strings.Contains(ev.Message, "shut down") {
		t.Fatalf("%+v", ev)
	}
}

// TestExecutorRecoversAfterCrash: a daemon that died without shutting down
// left a running lease, its agent and its work dir; the next start stops
// the agent, fails the lease and removes the work dir.
func TestExecutorRecoversAfterCrash(t *testing.T) {
	f := executortest.New(t, "true", nil)
	f.Stop()
	id := "dlg_crashed"
	wd := filepath.Join(f.Root, id)
	os.MkdirAll(wd, 0o700)
	os.WriteFile(filepath.Join(wd, "half-done"), []byte("x"), 0o600)
	orphan := exec.Command("sleep", "60")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	defer orphan.Wait()
	if err := f.Store.CreateAssignment(&lease.Assignment{Lease: lease.Lease{ID: id, Transport: control.TransportArchive}, WorkDir: wd}, 5); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []lease.Event{lease.SendStart, lease.SetupComplete} {
		if _, _, err := f.Store.FireAssignment(id, ev, "", func(a *lease.Assignment) error {
			a.AgentPID = orphan.Process.Pid
			a.ExpiresAt = time.Now().Add(time.Hour)
			return nil
		}, nil); err != nil {
			t.Fatal(err)
		}
	}
	f.Start("true", nil)
	if ev := last(events(f, id, 0)); ev.Code != control.CodeTaskFailed || !strings.Contains(ev.Message, "restarted") {
		t.Fatalf("%+v", ev)
	}
	if agent.GroupAlive(orphan.Process.Pid) {
		t.Fatal("orphaned agent still runs")
	}
	f.WaitWorkDirRemoved(id)
}

func TestExecutorStatusAndAgentCard(t *testing.T) {
	skill := control.CardSkill{ID: "go-tests", Name: "go-tests", Description: "writes Go unit tests", Tags: []string{"go"}}
	f := executortest.New(t, `sleep 60`, func(o *executor.Options) {
		o.MaxConcurrent = 3
		o.Name, o.Description, o.Skills = "builder", "a Go build box", []control.CardSkill{skill}
	})
	delegate(f, "dlg_s", workspace(t, map[string]string{"a": "1"}))
	var st control.StatusReport
	getJSON(t, f.Srv.URL+"/awcp/status", &st)
	if !st.OK || st.Active != 1 || st.MaxConcurrent != 3 || len(st.Delegations) != 1 || st.Delegations[0].State != "running" {
		t.Fatalf("%+v", st)
	}
	card, err := (&delegator.PeerClient{BaseURL: f.Srv.URL, PlainHTTP: true}).AgentCard(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ext, ok := card.AWCP()
	if !ok || ext.Required || len(card.Extensions) != 1 {
		t.Fatalf("%+v", card)
	}
	if card.Name != "builder" || card.Description != "a Go build box" || len(card.Skills) != 1 || card.Skills[0].Description != skill.Description {
		t.Fatalf("card does not describe the executor: %+v", card)
	}
}

// An executor that only serves the older agent.json is still discovered;
// one that serves neither is an error, not a hang.
func TestAgentCardFallback(t *testing.T) {
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/agent.json" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`{"name":"legacy","description":"old card"}`))
	}))
	defer old.Close()
	card, err := (&delegator.PeerClient{BaseURL: old.URL + "/awcp", PlainHTTP: true}).AgentCard(context.Background())
	if err != nil || card.Name != "legacy" {
		t.Fatalf("card %+v, err %v", card, err)
	}
	if _, ok := card.AWCP(); ok {
		t.Error("a card without the extension claims AWCP")
	}
	none := httptest.NewServer(http.NotFoundHandler())
	defer none.Close()
	if _, err := (&delegator.PeerClient{BaseURL: none.URL, PlainHTTP: true}).AgentCard(context.Background()); err == nil {
		t.Fatal("no card, no error")
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// A lease of more seconds than a Duration holds, asked in an INVITE, is
// the executor's longest, not one that wrapped into the past.
func TestHugeTTLIsCapped(t *testing.T) {
	f := executortest.New(t, "true", func(o *executor.Options) { o.MaxTTL = time.Hour })
	for i, ttl := range []int64{1e10, math.MaxInt64, 9223372037} {
		id := control.NewDelegationID()
		inv := invite(id)
		inv.Lease.TTLSeconds = ttl
		var acc control.Accept
		if err := f.Post(context.Background(), inv, &acc); err != nil {
			t.Fatalf("INVITE %d with ttlSeconds %d: %v", i, ttl, err)
		}
		if got := acc.ExecutorConstraints.MaxTTLSeconds; got != 3600 {
			t.Errorf("ttlSeconds %d: the ACCEPT caps at %d", ttl, got)
		}
		a, err := f.Store.Assignment(id)
		if err != nil || a.TTLSeconds != 3600 {
			t.Errorf("ttlSeconds %d: the assignment's lease is %d s (%v)", ttl, a.TTLSeconds, err)
		}
	}
}
