//go:build linux

package delegator

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator/lendarchive"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/lease"
)

// slowExecutor holds the answer to INVITE or START until released, so the
// delegation can be cancelled in the state before it.
type slowExecutor struct {
	next    http.Handler
	hold    string // "INVITE" or "START"
	arrived chan struct{}
	release chan struct{}
}

func (s *slowExecutor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/awcp" {
		body, _ := readAllLimited(r)
		if strings.Contains(string(body), `"type":"`+s.hold+`"`) {
			// Let the executor act on it, but hold the answer back.
			rec := httptest.NewRecorder()
			r.Body = nopBody(body)
			s.next.ServeHTTP(rec, r)
			close(s.arrived)
			<-s.release
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		r.Body = nopBody(body)
	}
	s.next.ServeHTTP(w, r)
}

// TestCancelInEveryHandshakeState cancels while INVITE and while START are
// out (the delegation is invited, then started). Either way the delegation
// ends cancelled, the executor holds no reservation or work dir, and the
// local directory is untouched.
func TestCancelInEveryHandshakeState(t *testing.T) {
	for _, hold := range []string{control.TypeInvite, control.TypeStart} {
		t.Run(hold, func(t *testing.T) {
			// The agent outlives the test's checks: while START is out the
			// event stream is open, and a task that ended would complete.
			x := executortest.New(t, `sleep 30; echo should not run > ran.txt`, nil)
			slow := &slowExecutor{next: x.Exec.Handler(), hold: hold, arrived: make(chan struct{}), release: make(chan struct{})}
			srv := httptest.NewServer(slow)
			defer srv.Close()

			dlg, store := newArchiveDelegator(t, nil)
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644)
			d, done := runExport(t, dlg, ExportRequest{Dir: dir, Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive})
			<-slow.arrived
			// While START is out the event stream is open, so a "running"
			// from the executor may already have moved it on.
			want := map[string][]lease.State{control.TypeInvite: {lease.Invited}, control.TypeStart: {lease.Started, lease.Running}}[hold]
			if cur, _ := store.Delegation(d.ID); !slices.Contains(want, cur.State) {
				close(slow.release) // or the server's Close waits for the held answer
				t.Fatalf("state %s, want one of %v", cur.State, want)
			}
			if _, err := dlg.Cancel(context.Background(), d.ID); err != nil {
				t.Fatal(err)
			}
			close(slow.release)
			end := <-done
			if end.State != lease.Cancelled {
				t.Fatalf("ended %s", end.State)
			}
			deadline := time.Now().Add(5 * time.Second)
			for x.Exec.Active() != 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if n := x.Exec.Active(); n != 0 {
				t.Fatalf("executor still holds %d reservations", n)
			}
			x.WaitWorkDirRemoved(d.ID)
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Fatalf("local dir changed: %v", ents)
			}
		})
	}
}

// overtakenExecutor holds an INVITE before the executor sees it, until an
// ERROR for the delegation has come and gone: the ERROR overtakes the
// INVITE, as two requests on two connections may, and finds no
// delegation. The INVITE is then handled as the executor would handle one
// whose sender has hung up: to the end.
type overtakenExecutor struct {
	next    http.Handler
	arrived chan struct{} // the INVITE is held
	erred   chan struct{} // an ERROR was answered
	once    sync.Once
}

func (o *overtakenExecutor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/awcp" {
		o.next.ServeHTTP(w, r)
		return
	}
	body, _ := readAllLimited(r)
	r.Body = nopBody(body)
	switch {
	case strings.Contains(string(body), `"type":"`+control.TypeInvite+`"`):
		close(o.arrived)
		<-o.erred
		o.next.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
	case strings.Contains(string(body), `"type":"`+control.TypeError+`"`):
		o.next.ServeHTTP(w, r)
		o.once.Do(func() { close(o.erred) })
	default:
		o.next.ServeHTTP(w, r)
	}
}

// TestCancelledInviteThatOvertakesItsError cancels a delegation while its
// INVITE is on the way, and the executor takes the INVITE only after the
// ERROR that said it ended: it accepts a delegation nobody will START.
// The delegator tells it again until it knows it, and its slot is free
// within seconds, not at its START deadline.
func TestCancelledInviteThatOvertakesItsError(t *testing.T) {
	x := executortest.New(t, `true`, nil)
	o := &overtakenExecutor{next: x.Exec.Handler(), arrived: make(chan struct{}), erred: make(chan struct{})}
	srv := httptest.NewServer(o)
	defer srv.Close()
	dlg, _ := newArchiveDelegator(t, nil)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644)
	d, done := runExport(t, dlg, ExportRequest{Dir: dir, Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive})
	<-o.arrived
	if _, err := dlg.Cancel(context.Background(), d.ID); err != nil {
		t.Fatal(err)
	}
	if end := <-done; end.State != lease.Cancelled {
		t.Fatalf("ended %s", end.State)
	}
	deadline := time.Now().Add(5 * time.Second)
	for x.Exec.Active() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := x.Exec.Active(); n != 0 {
		t.Fatalf("the executor holds %d reservations: it accepted the INVITE after the ERROR, and was not told again", n)
	}
}

func readAllLimited(r *http.Request) ([]byte, error) {
	defer r.Body.Close()
	return io.ReadAll(io.LimitReader(r.Body, 64<<20))
}

func nopBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// gatedTransport blocks Prepare (the delegation is accepted, START not yet
// sent) until released.
type gatedTransport struct {
	control.DelegatorTransport
	arrived, release chan struct{}
}

func (g *gatedTransport) Prepare(ctx context.Context, d control.Lent) (*control.WorkDirInfo, error) {
	close(g.arrived)
	<-g.release
	return g.DelegatorTransport.Prepare(ctx, d)
}

// TestEndWhileAccepted cancels, and separately lets expire, a delegation
// the executor has accepted but that has no START yet: the executor's
// reservation is released at once.
func TestEndWhileAccepted(t *testing.T) {
	slow(t)
	for _, how := range []string{"cancel", "expire"} {
		t.Run(how, func(t *testing.T) {
			x := executortest.New(t, `true`, nil)
			gate := &gatedTransport{arrived: make(chan struct{}), release: make(chan struct{})}
			dlg, _ := newArchiveDelegator(t, func(tr control.DelegatorTransport) control.DelegatorTransport {
				gate.DelegatorTransport = tr
				return gate
			})
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			go dlg.RunScheduler(ctx)
			ttl := time.Hour
			if how == "expire" {
				ttl = time.Second
			}
			d, done := runExport(t, dlg, ExportRequest{Dir: t.TempDir(), Peer: x.Srv.URL, PeerKey: x.Key(), Prompt: "p", Transport: control.TransportArchive, TTL: ttl})
			<-gate.arrived
			if x.Exec.Active() != 1 {
				t.Fatalf("executor reservations: %d", x.Exec.Active())
			}
			start := time.Now()
			want := lease.Cancelled
			if how == "cancel" {
				if _, err := dlg.Cancel(context.Background(), d.ID); err != nil {
					t.Fatal(err)
				}
			} else {
				want = lease.Expired
			}
			deadline := time.Now().Add(5 * time.Second)
			for x.Exec.Active() != 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if n := x.Exec.Active(); n != 0 {
				t.Fatalf("executor still holds %d reservations", n)
			}
			if how == "expire" && time.Since(start) > 3*time.Second {
				t.Fatalf("expired %s after the lease's end", time.Since(start)-ttl)
			}
			close(gate.release)
			if end := <-done; end.State != want {
				t.Fatalf("ended %s, want %s", end.State, want)
			}
		})
	}
}

// TestCancelBeforeInvite: a delegation cancelled before anything was sent
// ends cancelled, and a later Run does not revive it.
func TestCancelBeforeInvite(t *testing.T) {
	x := executortest.New(t, `true`, nil)
	dlg, _ := newArchiveDelegator(t, nil)
	d, err := dlg.Create(ExportRequest{Dir: t.TempDir(), Peer: x.Srv.URL, PeerKey: x.Key(), Prompt: "p", Transport: control.TransportArchive})
	if err != nil {
		t.Fatal(err)
	}
	if end, err := dlg.Cancel(context.Background(), d.ID); err != nil || end.State != lease.Cancelled {
		t.Fatalf("%v %v", end, err)
	}
	if end, _ := dlg.Run(context.Background(), d.ID); end.State != lease.Cancelled {
		t.Fatalf("Run revived it: %s", end.State)
	}
	if as, _ := x.Store.Assignments(); len(as) != 0 {
		t.Fatalf("the executor heard of it: %v", as)
	}
}

// newArchiveDelegator is a Delegator with the archive transport on a fresh
// store; wrap, if set, wraps the transport.
func newArchiveDelegator(t testing.TB, wrap func(control.DelegatorTransport) control.DelegatorTransport, mods ...func(*Options)) (*Delegator, *lease.Store) {
	t.Helper()
	state := t.TempDir()
	store, err := lease.Open(filepath.Join(state, "d.db"), lease.Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	var tr control.DelegatorTransport = &lendarchive.Transport{Blobs: store,
		StagingDir: filepath.Join(state, "staging"), ResultDir: filepath.Join(state, "results")}
	if wrap != nil {
		tr = wrap(tr)
	}
	opts := Options{Store: store, Logger: slog.New(slog.DiscardHandler),
		Transports: map[string]control.DelegatorTransport{control.TransportArchive: tr}}
	for _, mod := range mods {
		mod(&opts)
	}
	dlg, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return dlg, store
}

// corruptingProxy passes everything to the executor but turns the first
// "running" status of an event stream into one no version of AWCP has.
func corruptingProxy(next http.Handler) http.Handler {
	corrupted := false
	return rewritingProxy{next: next, rewrite: func(line string) string {
		if !corrupted && strings.Contains(line, `"status":"running"`) {
			line, corrupted = strings.Replace(line, `"status":"running"`, `"status":"sprinting"`, 1), true
		}
		return line
	}}
}

// rewritingProxy passes everything to the executor, and each line of an
// event stream through rewrite.
type rewritingProxy struct {
	next    http.Handler
	rewrite func(line string) string
}

func (p rewritingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/events") {
		p.next.ServeHTTP(w, r)
		return
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(r.Context())
	upstream := make(chan struct{})
	go func() {
		defer close(upstream)
		p.next.ServeHTTP(&pipeWriter{ResponseWriter: httptest.NewRecorder(), w: pw}, r.WithContext(ctx))
		pw.Close()
	}()
	defer func() { cancel(); <-upstream }()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	br := bufio.NewReader(pr)
	for {
		line, err := br.ReadString('\n')
		line = p.rewrite(line)
		if _, werr := w.Write([]byte(line)); werr != nil && err == nil {
			err = werr // the delegator hung up
		}
		w.(http.Flusher).Flush()
		if err != nil {
			pr.CloseWithError(err) // the executor's handler stops writing
			return
		}
	}
}

// pipeWriter sends a handler's body into a pipe as it is written.
type pipeWriter struct {
	http.ResponseWriter
	w *io.PipeWriter
}

func (p *pipeWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeWriter) Flush()                      {}

// TestMalformedEventEndsDelegation: an event the delegator cannot read
// comes again, the same, after every reconnection. The delegation ends in
// error with TASK_FAILED at once, and the executor is told: its agent is
// stopped and its slot freed.
func TestMalformedEventEndsDelegation(t *testing.T) {
	x := executortest.New(t, `sleep 30`, nil)
	srv := httptest.NewServer(corruptingProxy(x.Exec.Handler()))
	defer srv.Close()
	dlg, _ := newArchiveDelegator(t, nil)
	_, done := runExport(t, dlg, ExportRequest{Dir: t.TempDir(), Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive})
	var end *lease.Delegation
	select {
	case end = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the delegator still follows the stream: a malformed event must end the delegation")
	}
	if end.State != lease.Error || end.Failure == nil || end.Failure.Code != control.CodeTaskFailed ||
		!strings.Contains(end.Failure.Message, "malformed event") || end.Failure.Hint == "" {
		t.Fatalf("ended %s with %+v, want error TASK_FAILED naming the malformed event, with a hint", end.State, end.Failure)
	}
	deadline := time.Now().Add(5 * time.Second)
	for x.Exec.Active() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := x.Exec.Active(); n != 0 {
		t.Fatalf("executor still holds %d reservations", n)
	}
}

// A result whose SHA-256 is not the resultChecksum of its done event (the
// ZIP changed on the way) is not applied: the delegation fails and the
// directory is as it was.
func TestResultChecksumMismatchIsRefused(t *testing.T) {
	x := executortest.New(t, `echo planted > new.txt; echo changed > a.txt`, nil)
	srv := httptest.NewServer(rewritingProxy{next: x.Exec.Handler(), rewrite: func(line string) string {
		// One hex digit of the checksum changed: as if the ZIP had.
		if i := strings.Index(line, `"resultChecksum":"`); i >= 0 {
			j := i + len(`"resultChecksum":"`)
			digit := "0"
			if line[j] == '0' {
				digit = "1"
			}
			line = line[:j] + digit + line[j+1:]
		}
		return line
	}})
	defer srv.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	end := delegateArchive(t, srv.URL, dir)
	if end.State != lease.Error || end.Failure == nil || !strings.Contains(end.Failure.Message, "resultChecksum") {
		t.Fatalf("ended %s with %+v, want an error naming the checksum", end.State, end.Failure)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "mine\n" {
		t.Fatalf("a.txt = %q: the tampered result was applied", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); err == nil {
		t.Fatal("new.txt exists: the tampered result was applied")
	}
}

// runExport creates the delegation req asks for and runs it in the
// background: done has its final record.
func runExport(t *testing.T, dlg *Delegator, req ExportRequest) (*lease.Delegation, <-chan *lease.Delegation) {
	t.Helper()
	d, err := dlg.Create(req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := dlg.Run(context.Background(), d.ID); done <- end }()
	return d, done
}
