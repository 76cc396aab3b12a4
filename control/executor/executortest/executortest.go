// Package executortest serves a real Executor on loopback, with its own
// bbolt store and work root, for the tests of either role.
//
// It does not import the delegator, so that the delegator's own tests can
// use it.
package executortest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/internal/httpserve"
	"github.com/awcp/awcp/lease"
)

// Fixture is an Executor served over HTTP on loopback.
type Fixture struct {
	T     testing.TB
	Exec  *executor.Executor
	Srv   *httptest.Server
	Root  string // the work root
	State string // the state dir
	Store *lease.Store
	// Identity is the executor's identity key: its TLS certificate.
	Identity ed25519.PrivateKey
	stop     func()
}

// New serves an Executor running agentCmd with the archive transport, a
// kill grace of 200 ms and no log; mod changes its options. It is stopped
// when the test ends.
func New(t testing.TB, agentCmd string, mod func(*executor.Options)) *Fixture {
	t.Helper()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	store, err := lease.Open(filepath.Join(state, "executor.db"), lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, identity, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &Fixture{T: t, Root: filepath.Join(dir, "work"), State: state, Store: store, Identity: identity}
	f.Start(agentCmd, mod)
	t.Cleanup(func() { f.Stop(); store.Close() })
	return f
}

// Start runs an Executor on f's store, as New does; after Stop, it is the
// daemon's restart.
func (f *Fixture) Start(agentCmd string, mod func(*executor.Options)) {
	opts := executor.Options{
		WorkRoot: f.Root, AgentCommand: agentCmd, Store: f.Store, StateDir: f.State,
		Transports: []control.ExecutorTransport{&executor.ArchiveExecutor{}}, KillGrace: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), IdentityKey: f.Identity, PlainHTTP: true,
	}
	if mod != nil {
		mod(&opts)
	}
	f.Identity = opts.IdentityKey
	e, err := executor.New(opts)
	if err != nil {
		f.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx) }()
	// The daemon's own server (Serve): its timeouts, its connection cap.
	srv := httptest.NewUnstartedServer(e.Handler())
	srv.Config = httpserve.NewServer(e.Handler())
	srv.Config.ConnContext = httpserve.WithConn
	srv.Listener = httpserve.LimitListener(srv.Listener, httpserve.MaxConns)
	if opts.IdentityKey != nil {
		// TLS, and plain HTTP where the options allow it, on one port,
		// as Serve does.
		cert, err := control.IdentityCertificate(opts.IdentityKey)
		if err != nil {
			f.T.Fatal(err)
		}
		srv.Listener = httpserve.TLSOrPlain(srv.Listener, control.ServerTLSConfig(cert), opts.PlainHTTP, []byte("HTTP/1.1 426 Upgrade Required\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
	}
	srv.Start()
	f.Exec, f.Srv = e, srv
	f.stop = func() {
		f.Srv.CloseClientConnections()
		f.Srv.Close()
		cancel()
		wg.Wait()
	}
}

// Stop ends the Executor as a daemon's SIGTERM would. It may be called
// once after each Start.
func (f *Fixture) Stop() {
	if f.stop != nil {
		f.stop()
		f.stop = nil
	}
}

// URL is the executor's base URL, for plain HTTP; a PeerClient with Key
// reaches it over TLS.
func (f *Fixture) URL() string { return f.Srv.URL }

// Key is the executor's identity key, in authorized_keys form.
func (f *Fixture) Key() string { return control.IdentityPublic(f.Identity) }

// WaitWorkDirRemoved waits up to 2 s for delegation id's work dir to be
// removed, and fails the test if it is not.
func (f *Fixture) WaitWorkDirRemoved(id string) {
	f.T.Helper()
	path := filepath.Join(f.Root, id)
	for range 200 {
		if _, err := os.Lstat(path); os.IsNotExist(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.T.Fatalf("%s was not removed", path)
}

// Post sends msg as JSON to the executor's /awcp and decodes a 200 answer
// into out; any other answer is an error that carries its body.
func (f *Fixture) Post(ctx context.Context, msg, out any) error {
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.Srv.URL+"/awcp", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.Srv.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, answer)
	}
	return json.Unmarshal(answer, out)
}

// LastEvent reads delegation id's event stream to its terminal event,
// within 15 s, and returns that event.
func (f *Fixture) LastEvent(id string) *control.Event {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.Srv.URL+"/awcp/tasks/"+id+"/events", nil)
	if err != nil {
		f.T.Fatal(err)
	}
	resp, err := f.Srv.Client().Do(req)
	if err != nil {
		f.T.Fatalf("events of %s: %v", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		f.T.Fatalf("events of %s: HTTP %d", id, resp.StatusCode)
	}
	var last *control.Event
	err = control.ReadSSE(resp.Body, f.T.TempDir(), 0, func(_ uint64, data []byte, _ control.Spooled) (bool, error) {
		ev, err := control.DecodeEvent(data)
		if err != nil {
			return false, err
		}
		last = ev
		return ev.Terminal(), nil
	})
	if err != nil {
		f.T.Fatalf("events of %s: %v", id, err)
	}
	return last
}

// WaitEvents waits up to 10 s until ok holds of the events delegation id
// has in the executor's store (each as its JSON), and fails the test if it
// does not.
func (f *Fixture) WaitEvents(id string, ok func(events []string) bool) {
	f.T.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		evs, err := f.Store.EventsAfter(id, 0, 0)
		if err != nil {
			f.T.Fatal(err)
		}
		var data []string
		for _, e := range evs {
			data = append(data, string(e.Data))
		}
		if ok(data) {
			return
		}
		if time.Now().After(deadline) {
			f.T.Fatalf("events of %s: %q", id, data)
		}
	}
}
