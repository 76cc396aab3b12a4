// Package webui is `awcp-ctl ui`: a page on loopback for what people would
// rather look at than read — delegations live, one delegation's events,
// output, audit log and permission requests, a staged result's review,
// the attempts of a group side by side, and the peers.
//
// It is a view of the same store the CLI reads, and acts through the same
// delegator (no second source of truth). Everything it shows came from an
// executor or the network: the page writes all of it as text
// (textContent), never as HTML, and its Content-Security-Policy allows no
// inline script, so a name like `<img src=x onerror=…>` is only a name.
//
// Who may use it: the holder of the run's token. The URL printed at start
// carries it in its fragment, which a browser never sends anywhere; the
// page keeps it in its origin's storage and sends it as a bearer token
// with every request for data or action. Not a cookie: a browser sends a
// cookie for 127.0.0.1 to every port of 127.0.0.1, so any local web server
// the browser visits would receive it; storage is bound to the origin,
// port included. The page's own code (HTML, script, style) holds nothing
// secret and is served to anyone who reaches the port. A request that
// changes anything must also come from the page itself (Origin, and a
// CSRF token the page reads with its token), and every request's Host must
// be the page's address (a DNS name rebound to 127.0.0.1 is not this page).
package webui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/review"
	"github.com/awcp/awcp/control/discovery"
	"github.com/awcp/awcp/lease"
)

//go:embed assets
var assets embed.FS

// Store is what the page reads of the delegator's store (*lease.Store).
type Store interface {
	Delegations() ([]*lease.Delegation, error)
	Delegation(id string) (*lease.Delegation, error)
	AuditAfter(id string, after uint64, limit int) ([]lease.StoredEvent, *lease.AuditSummary, error)
}

// Delegator is what the page does through the delegator
// (*delegator.Delegator), as the CLI's commands do.
type Delegator interface {
	OpenResult(id, snap string) (*review.Result, *lease.Delegation, error)
	ApplyResult(ctx context.Context, id, snap, branch string, allowGitControl bool) (*delegator.Applied, error)
	DiscardResult(id, snap string) error
	DiscardAttemptsBut(keep string) ([]string, error)
	Permit(ctx context.Context, id, requestID, optionID, answerer string) error
	Say(id, prompt, by string) (int, error)
	EndSession(id string) error
	CompareGroup(group string) ([]delegator.Attempt, error)
}

// Peers is the peer book and browser (*discovery.Browser).
type Peers interface {
	Peers() []discovery.Peer
	Trust(id, key string) (discovery.Peer, error)
}

// Options configure a Server.
type Options struct {
	Store     Store
	Delegator Delegator
	Peers     Peers // nil: no peers page
	// Token admits a browser; CSRF is what the page sends with a change.
	// Both are made at random when empty.
	Token, CSRF string
	// Cancel cancels a running delegation: through the daemon that
	// follows it, where one runs, as `awcp-ctl cancel` does.
	Cancel func(id string) error
	// Answerer is who decides from this page, for the record
	// ("awcp-ctl ui by USER").
	Answerer string
	// Poll is how often the stream reads the store for changes (300ms).
	Poll   time.Duration
	Logger *slog.Logger
}

// Server serves the page and its API.
type Server struct {
	opts   Options
	origin string // the page's own, http://127.0.0.1:PORT
	mux    *http.ServeMux
	done   chan error // the serving's end
}

// Start serves the page on addr, a loopback address, until ctx ends;
// Wait returns once it has stopped.
func Start(ctx context.Context, addr string, opts Options) (*Server, error) {
	if opts.Store == nil || opts.Delegator == nil || opts.Cancel == nil {
		return nil, errors.New("webui: a store, a delegator and a cancel are needed")
	}
	for _, s := range []*string{&opts.Token, &opts.CSRF} {
		if *s == "" {
			*s = randomToken()
		}
	}
	if opts.Poll <= 0 {
		opts.Poll = 300 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ln, err := listen(addr)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), origin: "http://" + ln.Addr().String(), done: make(chan error, 1)}
	s.routes()
	go func() { s.done <- s.serve(ctx, ln) }()
	return s, nil
}

// Wait returns when the server has stopped.
func (s *Server) Wait() error { return <-s.done }

func randomToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// listen opens addr, which must be a loopback address: the page acts as
// its owner, and is for this machine alone.
func listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, control.Errorf(control.CodeWorkspaceInvalid, "--listen %s is not a loopback address", addr).
			WithHint("the page acts as you: it listens on 127.0.0.1 or ::1 only (reach it from elsewhere through ssh -L)")
	}
	return net.Listen("tcp", addr)
}

// URL is where a browser opens the page: the token in the fragment, which
// the browser keeps to itself.
func (s *Server) URL() string { return s.origin + "/#token=" + s.opts.Token }

// Origin is the page's own origin, http://127.0.0.1:PORT.
func (s *Server) Origin() string { return s.origin }

// serve serves on ln until ctx ends.
func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx) // the streams end with ctx
		<-done
		return nil
	case err := <-done:
		return err
	}
}

// ServeHTTP checks who asks before anything is read or done.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if r.Host != strings.TrimPrefix(s.origin, "http://") {
		// A name rebound to 127.0.0.1 reaches this port with its own Host.
		httpError(w, http.StatusMisdirectedRequest, "this page answers at "+s.origin+" only")
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/api/") {
		s.mux.ServeHTTP(w, r) // the page's code: nothing secret in it
		return
	}
	if !s.admitted(r) {
		httpError(w, http.StatusUnauthorized, "no token, or a wrong one: open the URL `awcp-ctl ui` printed")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if r.Header.Get("Origin") != s.origin {
			httpError(w, http.StatusForbidden, "a change is taken from this page only (Origin)")
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-AWCP-CSRF")), []byte(s.opts.CSRF)) != 1 {
			httpError(w, http.StatusForbidden, "a change is taken from this page only (CSRF token)")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) tokenIs(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(s.opts.Token)) == 1
}

// admitted: the run's token as a bearer.
func (s *Server) admitted(r *http.Request) bool {
	b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && s.tokenIs(b)
}

func (s *Server) routes() {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	s.mux.Handle("GET /app.js", files)
	s.mux.Handle("GET /app.css", files)
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /api/session", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"csrf": s.opts.CSRF})
	})
	s.mux.HandleFunc("GET /api/delegations", s.listDelegations)
	s.mux.HandleFunc("GET /api/stream", s.stream)
	s.mux.HandleFunc("GET /api/delegations/{id}", s.oneDelegation)
	s.mux.HandleFunc("GET /api/delegations/{id}/audit", s.audit)
	s.mux.HandleFunc("GET /api/delegations/{id}/result", s.result)
	s.mux.HandleFunc("POST /api/delegations/{id}/apply", s.apply)
	s.mux.HandleFunc("POST /api/delegations/{id}/discard", s.discard)
	s.mux.HandleFunc("POST /api/delegations/{id}/permit", s.permit)
	s.mux.HandleFunc("POST /api/delegations/{id}/say", s.say)
	s.mux.HandleFunc("POST /api/delegations/{id}/cancel", s.cancel)
	s.mux.HandleFunc("POST /api/delegations/{id}/close", s.closeSession)
	s.mux.HandleFunc("GET /api/groups/{group}", s.group)
	s.mux.HandleFunc("GET /api/peers", s.peers)
	s.mux.HandleFunc("POST /api/peers/{id}/trust", s.trust)
}

// index is the page.
func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	page, err := assets.ReadFile("assets/index.html")
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(page)
}

// httpError answers with a JSON error the page shows as text.
func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// failed answers err: a protocol error with its code and hint.
func failed(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	if errors.Is(err, lease.ErrNotFound) {
		code = http.StatusNotFound
	}
	body := map[string]string{"error": err.Error()}
	var pe *control.ProtocolError
	if errors.As(err, &pe) {
		body["error"], body["code"], body["hint"] = pe.Message, pe.Code, pe.Hint
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// readJSON decodes a request's body into v.
func readJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return fmt.Errorf("the request: %w", err)
	}
	if len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the request: %w", err)
	}
	return nil
}
