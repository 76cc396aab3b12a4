package delegator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/httpserve"
	"github.com/awcp/awcp/internal/peercred"
)

// The delegator daemon's local API, for the CLI: HTTP over a unix socket in
// the state dir, mode 0600 in a 0700 directory, so no other user reaches it;
// and a connection the kernel says another user made is closed unread
// (internal/peercred).

// LocalServer serves the local API of an `awcp-ctl serve` daemon.
type LocalServer struct {
	Delegator *Delegator
	// Stop, if set, ends the daemon: `awcp-ctl stop` asks for it.
	Stop func()
	// Drive, if set, runs a session delegation whose turns come from the
	// store (control/delegator/turns), for as long as it lives; without
	// it such sessions are refused.
	Drive func(ctx context.Context, id string) error
	// Resumed, if set, is called once the delegations this daemon takes
	// over at its start (its own from before a crash among them) have
	// what their transports keep in memory set up again: the SSH server
	// holds their certificates until then (lendlive.SSHOptions.Resumed).
	Resumed func()
	wg      sync.WaitGroup // delegations started through the API
	// lastRequest is when the API last took a request (unix nanoseconds):
	// a daemon that exits when idle does not exit under a command that
	// has just asked it for something.
	lastRequest atomic.Int64
}

// LastRequest is when the API last took a request; zero before any.
func (s *LocalServer) LastRequest() time.Time {
	if n := s.lastRequest.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Serve accepts on the unix socket at path until ctx is done, then waits for
// the delegations it runs to stop following (they stay in the store).
// Meanwhile it takes over orphans (takeOverOrphans).
func (s *LocalServer) Serve(ctx context.Context, path string) error {
	os.Remove(path) // a stale socket of a dead daemon; a live one was checked by the caller
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return err
	}
	ln = peercred.SameUser(ln) // the kernel's word too, not the file's mode alone
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		httpserve.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "pid": os.Getpid()})
	})
	mux.HandleFunc("POST /v1/delegations", func(w http.ResponseWriter, r *http.Request) { s.create(ctx, w, r) })
	mux.HandleFunc("POST /v1/stop", func(w http.ResponseWriter, r *http.Request) {
		if s.Stop == nil {
			httpserve.WriteJSON(w, http.StatusNotImplemented, localError(errors.New("this daemon cannot be stopped so")))
			return
		}
		httpserve.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "pid": os.Getpid()})
		s.Stop()
	})
	mux.HandleFunc("POST /v1/delegations/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		del, err := s.Delegator.Cancel(r.Context(), r.PathValue("id"))
		if err != nil {
			httpserve.WriteJSON(w, http.StatusConflict, localError(err))
			return
		}
		httpserve.WriteJSON(w, http.StatusOK, del)
	})
	mux.HandleFunc("POST /v1/delegations/{id}/adopt", func(w http.ResponseWriter, r *http.Request) {
		del, err := s.Delegator.store.Delegation(r.PathValue("id"))
		switch {
		case err != nil:
			httpserve.WriteJSON(w, http.StatusNotFound, localError(control.Errorf(control.CodeNotFound, "%v", err)))
		case del.State.Terminal() || !OwnerGone(del) || !Adoptable(del):
			httpserve.WriteJSON(w, http.StatusConflict, localError(control.Errorf(control.CodeDeclined, "delegation %s is not an orphan this daemon can follow", del.ID)))
		default:
			s.Adopt(ctx, del.ID)
			httpserve.WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
		}
	})
	srv := httpserve.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.lastRequest.Store(time.Now().UnixNano())
		mux.ServeHTTP(w, r)
	}))
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.takeOverOrphans(ctx, 2*time.Second) }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(sctx)
		cancel()
		err = <-errc
	}
	s.wg.Wait()
	os.Remove(path)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// takeOverOrphans follows, until ctx ends, the delegations whose process
// is gone: this daemon's own from before a crash at once, and every
// interval those of commands that died (an export killed, a closed
// terminal) — it follows those it can serve and ends the others
// (Adoptable). It runs under s.wg, so its Adopts never race Serve's wait.
func (s *LocalServer) takeOverOrphans(ctx context.Context, interval time.Duration) {
	d := s.Delegator
	t := time.NewTicker(interval)
	defer t.Stop()
	var setUp sync.WaitGroup // the first pass's
	for first := true; ctx.Err() == nil; first = false {
		orphans, err := d.Orphans()
		if err != nil {
			d.log.Warn("list orphaned delegations", "err", err)
		}
		for _, del := range orphans {
			if !Adoptable(del) {
				if err := d.EndOrphan(ctx, del); err != nil {
					d.log.Warn("end orphan", "delegation", del.ID, "err", err)
				}
				continue
			}
			d.log.Info("adopting delegation", "delegation", del.ID, "pid", del.OwnerPID)
			done := func() {}
			if first {
				setUp.Add(1)
				done = setUp.Done
			}
			s.adopt(ctx, del.ID, done)
		}
		if first && s.Resumed != nil {
			s.wg.Add(1)
			go func() { defer s.wg.Done(); setUp.Wait(); s.Resumed() }()
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// Adopt runs a delegation that no live process follows.
func (s *LocalServer) Adopt(ctx context.Context, id string) { s.adopt(ctx, id, func() {}) }

// adopt is Adopt, calling setUp once the delegation's transport is set up
// again (Delegator.TakeOver).
func (s *LocalServer) adopt(ctx context.Context, id string, setUp func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.Delegator.TakeOver(ctx, id, setUp)
	}()
}

func (s *LocalServer) create(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	var req ExportRequest
	body := httpserve.LimitBody(w, r, control.MaxMessageBytes, httpserve.DefaultBodyGrace)
	err := json.NewDecoder(body).Decode(&req)
	body.Finished(w, err)
	if err != nil {
		httpserve.WriteJSON(w, http.StatusBadRequest, localError(control.Errorf(control.CodeWorkspaceInvalid, "bad request: %v", err)))
		return
	}
	if req.Driven && s.Drive == nil {
		httpserve.WriteJSON(w, http.StatusUnprocessableEntity, localError(control.Errorf(control.CodeDeclined, "this daemon holds no sessions")))
		return
	}
	del, err := s.Delegator.Create(req)
	if err != nil {
		httpserve.WriteJSON(w, http.StatusUnprocessableEntity, localError(err))
		return
	}
	if del.SessionDriven {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.Drive(ctx, del.ID) }()
	} else {
		s.Adopt(ctx, del.ID)
	}
	httpserve.WriteJSON(w, http.StatusOK, map[string]string{"delegationId": del.ID})
}

func localError(err error) *control.Error {
	return control.AsProtocolError(err, control.CodeDeclined).ToMessage("")
}

// LocalClient talks to a daemon's local API.
type LocalClient struct{ http *http.Client }

// DialLocal returns a client if a daemon answers on the socket at path.
func DialLocal(path string) (*LocalClient, bool) {
	c := &LocalClient{http: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}}
	resp, err := c.http.Get("http://awcp/v1/health")
	if err != nil {
		return nil, false
	}
	resp.Body.Close()
	return c, resp.StatusCode == http.StatusOK
}

// Stop asks the daemon to stop: it stops following its delegations (they
// stay in the store, and run on at their executors) and exits.
func (c *LocalClient) Stop() error { return c.post("/v1/stop", nil, nil) }

func (c *LocalClient) post(path string, body, out any) error {
	data, _ := json.Marshal(body)
	resp, err := c.http.Post("http://awcp"+path, "application/json", bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var m control.Error
		if json.Unmarshal(raw, &m) == nil && m.Code != "" {
			return &control.ProtocolError{Code: m.Code, Message: m.Message, Hint: m.Hint}
		}
		return fmt.Errorf("daemon answered HTTP %d", resp.StatusCode)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// Export asks the daemon to run a delegation and returns its id.
func (c *LocalClient) Export(req ExportRequest) (string, error) {
	var out struct {
		DelegationID string `json:"delegationId"`
	}
	err := c.post("/v1/delegations", req, &out)
	return out.DelegationID, err
}

// Cancel asks the daemon to cancel a delegation.
func (c *LocalClient) Cancel(id string) error {
	var out json.RawMessage
	return c.post("/v1/delegations/"+id+"/cancel", nil, &out)
}

// Adopt asks the daemon to follow an orphaned delegation now.
func (c *LocalClient) Adopt(id string) error {
	var out json.RawMessage
	return c.post("/v1/delegations/"+id+"/adopt", nil, &out)
}
