//go:build linux

package delegator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator/lendarchive"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/lease"
)

// refusingINVITE answers an INVITE for which refuse is true the way the
// reference implementation does: an ERROR, with HTTP 200. Everything else
// goes to next.
func refusingINVITE(next http.Handler, refuse func(body string) bool, code, message string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/awcp" {
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), `"type":"INVITE"`) && refuse(string(body)) {
				var inv control.BaseMessage
				json.Unmarshal(body, &inv)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				io.WriteString(w, `{"version":"1","type":"ERROR","delegationId":"`+inv.DelegationID+
					`","code":"`+code+`","message":"`+message+`","hint":"ask for less"}`)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}

// An ERROR that comes with HTTP 200 is the peer's refusal, with its code
// and reason — not "no ACCEPT"; so a DEP_MISSING sent that way still falls
// back to the archive transport.
func TestErrorWithHTTP200(t *testing.T) {
	t.Run("refusal keeps its code and reason", func(t *testing.T) {
		x := executortest.New(t, "true", nil)
		srv := httptest.NewServer(refusingINVITE(x.Exec.Handler(), func(string) bool { return true },
			control.CodeDeclined, "ttl 3600 is above the maximum of 600"))
		defer srv.Close()
		end := delegateArchive(t, srv.URL, t.TempDir())
		if end.State != lease.Error || end.Failure == nil || end.Failure.Code != control.CodeDeclined ||
			!strings.Contains(end.Failure.Message, "above the maximum") {
			t.Fatalf("ended %s with %+v, want the peer's DECLINED and its reason", end.State, end.Failure)
		}
	})
	t.Run("DEP_MISSING falls back to archive", func(t *testing.T) {
		x := executortest.New(t, "echo done > out.txt", nil)
		srv := httptest.NewServer(refusingINVITE(x.Exec.Handler(), func(body string) bool { return strings.Contains(body, `"sshfs"`) },
			control.CodeDepMissing, "no sshfs here"))
		defer srv.Close()
		dlg := newAutoDelegator(t)
		dir := t.TempDir()
		d, err := dlg.Create(ExportRequest{Dir: dir, Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: "auto"})
		if err != nil {
			t.Fatal(err)
		}
		end, _ := dlg.Run(context.Background(), d.ID)
		if end.State != lease.Completed || end.Transport != control.TransportArchive {
			t.Fatalf("ended %s over %s (%+v), want completed over archive", end.State, end.Transport, end.Failure)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "done\n" {
			t.Fatalf("out.txt = %q", b)
		}
	})
}

// newAutoDelegator is a Delegator that offers a live mount (which fails
// if it gets as far as START) and the archive transport.
func newAutoDelegator(t *testing.T) *Delegator {
	t.Helper()
	state := t.TempDir()
	store, err := lease.Open(filepath.Join(state, "d.db"), lease.Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	dlg, err := New(Options{Store: store, Logger: slog.New(slog.DiscardHandler),
		Transports: map[string]control.DelegatorTransport{
			control.TransportArchive: &lendarchive.Transport{Blobs: store, StagingDir: filepath.Join(state, "staging"), ResultDir: filepath.Join(state, "results")},
			control.TransportSSHFS:   noMount{},
		}})
	if err != nil {
		t.Fatal(err)
	}
	return dlg
}

// noMount is a live-mount transport that cannot prepare anything.
type noMount struct{}

func (noMount) Name() string { return control.TransportSSHFS }
func (noMount) Prepare(context.Context, control.Lent) (*control.WorkDirInfo, error) {
	return nil, errors.New("no live mount in this test")
}
func (noMount) Finish(context.Context, control.Lent, *control.Event) (*archive.Report, error) {
	return &archive.Report{}, nil
}
func (noMount) Cleanup(context.Context, control.Lent) error { return nil }

// A done event that arrives while the delegation is still started (no
// "running" status reached the delegator first) completes it: set up,
// then done, as the state machine has it.
func TestDoneWhileStarted(t *testing.T) {
	x := executortest.New(t, "echo made > made.txt", nil)
	srv := httptest.NewServer(rewritingProxy{next: x.Exec.Handler(), rewrite: func(line string) string {
		return strings.Replace(line, `"status":"running"`, `"status":"progress"`, 1) // nothing to record
	}})
	defer srv.Close()
	dlg, _ := newArchiveDelegator(t, nil)
	dir := t.TempDir()
	d, err := dlg.Create(ExportRequest{Dir: dir, Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := dlg.Run(ctx, d.ID); done <- end }()
	select {
	case end := <-done:
		cancel()
		if end.State != lease.Completed {
			t.Fatalf("ended %s (%+v), want completed", end.State, end.Failure)
		}
	case <-time.After(15 * time.Second):
		cancel()
		<-done
		t.Fatal("the delegator still follows a stream whose done it has: it reconnects for ever")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "made.txt")); string(b) != "made\n" {
		t.Fatalf("made.txt = %q", b)
	}
}

// lateForgetting stands in for the seed's executor: it answers START only
// once the task has ended, and answers a subscriber that comes after the
// end NOT_FOUND. Only a delegator subscribed while START is out gets the
// result.
type lateForgetting struct {
	x *executortest.Fixture
}

func (p lateForgetting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := ""
	if strings.HasPrefix(r.URL.Path, "/awcp/tasks/") {
		id = strings.Split(r.URL.Path, "/")[3]
	}
	if id != "" && r.Method == http.MethodGet {
		if a, err := p.x.Store.Assignment(id); err == nil && a.State.Terminal() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"NOT_FOUND","message":"task not found"}`)
			return
		}
	}
	if r.Method != http.MethodPost || r.URL.Path != "/awcp" {
		p.x.Exec.Handler().ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var m control.BaseMessage
	json.Unmarshal(body, &m)
	if m.Type != control.TypeStart {
		p.x.Exec.Handler().ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	p.x.Exec.Handler().ServeHTTP(rec, r)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if a, err := p.x.Store.Assignment(m.DelegationID); err == nil && a.State.Terminal() {
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// A task that ends before START's answer reaches the delegator still
// brings its result: the event stream is open while START is out.
func TestFastTaskResultNotLost(t *testing.T) {
	x := executortest.New(t, "echo fast > fast.txt", nil)
	srv := httptest.NewServer(lateForgetting{x: x})
	defer srv.Close()
	dir := t.TempDir()
	end := delegateArchive(t, srv.URL, dir)
	if end.State != lease.Completed {
		t.Fatalf("ended %s (%+v), want completed with the result applied", end.State, end.Failure)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "fast.txt")); string(b) != "fast\n" {
		t.Fatalf("fast.txt = %q: the result was lost", b)
	}
}

// delegateArchive lends dir to the executor at peer over the archive
// transport and returns the delegation as it ended (within 20 s).
func delegateArchive(t *testing.T, peer, dir string) *lease.Delegation {
	t.Helper()
	dlg, _ := newArchiveDelegator(t, nil)
	d, err := dlg.Create(ExportRequest{Dir: dir, Peer: peer, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	end, err := dlg.Run(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	return end
}

// endlessResult stands in for a hostile executor: it accepts anything, and
// its event stream is a done whose resultBase64 never ends (or, with
// snapshots, that many snapshot events of size bytes before a done that
// names the last). It counts the streams opened.
// acceptAsHead answers POST /awcp as a head executor does: an ACCEPT (with
// a retention) to an INVITE, ok to the rest.
func acceptAsHead(w http.ResponseWriter, r *http.Request) {
	var m control.BaseMessage
	json.NewDecoder(r.Body).Decode(&m)
	if m.Type == control.TypeInvite {
		b, _ := control.Marshal(&control.Accept{BaseMessage: control.Header(control.TypeAccept, m.DelegationID), RetentionMs: new(int64),
			ExecutorWorkDir: control.ExecutorWorkDir{Path: "/w"}})
		w.Write(b)
		return
	}
	io.WriteString(w, `{"ok":true}`)
}

type endlessResult struct {
	snapshots, size int
	streams         atomic.Int32
	release         chan struct{} // closed: the done after the snapshots goes
}

func (h *endlessResult) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	parts := strings.Split(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/awcp":
		acceptAsHead(w, r)
	case len(parts) == 5 && parts[4] == "events":
		h.streams.Add(1)
		id := parts[3]
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := strings.Repeat("QUFB", 16<<10)
		if h.snapshots == 0 {
			fmt.Fprintf(w, `data: {"delegationId":%q,"type":"done","timestamp":"2026-11-25T00:00:00Z","summary":"s","resultBase64":"`, id)
			for {
				if _, err := io.WriteString(w, chunk); err != nil {
					return // the delegator hung up
				}
			}
		}
		for i := range h.snapshots {
			fmt.Fprintf(w, `data: {"delegationId":%q,"type":"snapshot","timestamp":"2026-11-25T00:00:00Z","snapshotId":"snap_%d","summary":"s","snapshotBase64":"%s"}`+"\n\n",
				id, i, strings.Repeat("A", h.size))
		}
		w.(http.Flusher).Flush()
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, `data: {"delegationId":%q,"type":"done","timestamp":"2026-11-25T00:00:00Z","summary":"s","snapshotIds":["snap_%d"],"recommendedSnapshotId":"snap_%d"}`+"\n\n",
			id, h.snapshots-1, h.snapshots-1)
	default:
		io.WriteString(w, `{"ok":true}`)
	}
}

// An executor whose result never ends fills nothing but the delegator's
// limit: the delegation fails with TASK_FAILED at the limit, once (no
// reconnection asks for the same again), and nothing is left on disk.
func TestEndlessResultIsCutAtTheLimit(t *testing.T) {
	peer := &endlessResult{}
	srv := httptest.NewServer(peer)
	defer srv.Close()
	spool := t.TempDir()
	dlg, _ := newArchiveDelegator(t, nil, func(o *Options) { o.SpoolDir, o.MaxResultBytes = spool, 4<<20 })
	dir := t.TempDir()
	d, err := dlg.Create(ExportRequest{Dir: dir, Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive, Dialect: control.DialectSeed})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	end, err := dlg.Run(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if end.State != lease.Error || end.Failure.Code != control.CodeTaskFailed || !strings.Contains(end.Failure.Message, "4194304 bytes") {
		t.Fatalf("ended %s with %+v, want TASK_FAILED at the limit", end.State, end.Failure)
	}
	if n := peer.streams.Load(); n != 1 {
		t.Errorf("the stream was opened %d times; a result over the limit is not asked for again", n)
	}
	if ents, _ := os.ReadDir(spool); len(ents) != 0 {
		t.Errorf("the spool holds %d files after the delegation ended", len(ents))
	}
}

// An executor sending snapshot after snapshot holds one of them on the
// delegator's disk, not all; the one done names is applied.
func TestSnapshotsHeldOneAtATime(t *testing.T) {
	peer := &endlessResult{snapshots: 20, size: 256 << 10, release: make(chan struct{})}
	srv := httptest.NewServer(peer)
	defer srv.Close()
	spool := t.TempDir()
	dlg, _ := newArchiveDelegator(t, nil, func(o *Options) { o.SpoolDir = spool })
	dir := t.TempDir()
	d, err := dlg.Create(ExportRequest{Dir: dir, Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive, Access: control.AccessRO})
	if err != nil {
		t.Fatal(err)
	}
	// Cancelled before the server's Close (deferred earlier) waits for
	// the stream, which waits for release, should the test fail first.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := dlg.Run(ctx, d.ID); done <- end }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		dlg.mu.Lock()
		held := dlg.snapshots[d.ID].id
		dlg.mu.Unlock()
		if held == "snap_19" {
			break // all twenty read
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last snapshot was never held (holding %q)", held)
		}
	}
	if ents, _ := os.ReadDir(spool); len(ents) != 1 {
		t.Fatalf("%d files in the spool after twenty snapshots, want the one held", len(ents))
	}
	close(peer.release)
	if end := <-done; end.State != lease.Completed {
		t.Fatalf("ended %s (%+v)", end.State, end.Failure)
	}
	if ents, _ := os.ReadDir(spool); len(ents) != 0 {
		t.Errorf("the spool holds %d files after the delegation ended", len(ents))
	}
}

// BenchmarkEndlessResult is what an executor whose result never ends costs
// the delegator at the default limit: the bytes it Spooled before the cut,
// how long that took, and what was left on disk after.
func BenchmarkEndlessResult(b *testing.B) {
	peer := &endlessResult{}
	srv := httptest.NewServer(peer)
	defer srv.Close()
	var Spooled, left int64
	for b.Loop() {
		spool := b.TempDir()
		var peak atomic.Int64
		stop := make(chan struct{})
		watched := make(chan struct{})
		go func() { // the spool's size, as it grows
			defer close(watched)
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if ents, _ := os.ReadDir(spool); len(ents) > 0 {
					if fi, err := ents[0].Info(); err == nil {
						peak.Store(max(peak.Load(), fi.Size()))
					}
				}
			}
		}()
		dlg, _ := newArchiveDelegator(b, nil, func(o *Options) { o.SpoolDir = spool })
		d, err := dlg.Create(ExportRequest{Dir: b.TempDir(), Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive, Dialect: control.DialectSeed})
		if err != nil {
			b.Fatal(err)
		}
		end, err := dlg.Run(context.Background(), d.ID)
		close(stop)
		<-watched
		if err != nil || end.State != lease.Error {
			b.Fatalf("ended %v %v", end, err)
		}
		ents, _ := os.ReadDir(spool)
		Spooled, left = peak.Load(), int64(len(ents))
	}
	b.ReportMetric(float64(Spooled)/(1<<20), "MiB-Spooled-at-peak")
	b.ReportMetric(float64(left), "files-left")
}
