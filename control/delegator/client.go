package delegator

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// PeerClient talks to one executor.
type PeerClient struct {
	// BaseURL is the executor's base, e.g. https://host:10200. A URL ending
	// in /awcp (the message endpoint) is accepted too.
	BaseURL string
	// Token, if set, is sent in INVITE's auth and as a bearer token. Secret.
	Token string
	// AgentID and Key, if Key is set, are the identity the executor must
	// hold: every connection to it is TLS, and its certificate's key is
	// compared with Key as the connection is made (control/peertls.go),
	// before a byte of a request goes — the token, the START, the session.
	// An https:// BaseURL without a Key is a first contact: refused, with
	// the key the executor showed.
	AgentID, Key string
	// PlainHTTP allows an http:// BaseURL without a Key: plain HTTP, for
	// a peer that speaks nothing else (the reference implementation).
	// Without it such a URL is refused before anything is sent.
	PlainHTTP bool
	// Identity is this delegator's identity key, its TLS certificate: an
	// executor may admit it by key.
	Identity ed25519.PrivateKey
	// SpoolDir is where results of the archive transport are decoded to
	// as they arrive. Default: the system's temporary directory.
	SpoolDir string
	// MaxResultBytes bounds a result (resultBase64, snapshotBase64) as
	// base64: an executor that sends more fails its delegation rather than
	// filling the disk. Default DefaultMaxResultBytes.
	MaxResultBytes int64
	// HTTP is the client used. Default: one without a timeout (event
	// streams are long); requests are bounded by their contexts.
	HTTP *http.Client
	// Transfer, if set, is told how an archive moves: "workspace" (START's
	// body: done and total bytes) and "result" (its base64 as it arrives:
	// total -1, unknown).
	Transfer func(what string, done, total int64)
	// Opened, if set, is called when an event stream is answered (before
	// its first event).
	Opened func()
}

// DefaultMaxResultBytes is the default bound of a result: 1 GiB of base64,
// a ZIP of 768 MiB (archive's extraction stops at 1 GiB written).
const DefaultMaxResultBytes = 1 << 30

func (c *PeerClient) maxResult() int64 {
	if c.MaxResultBytes > 0 {
		return c.MaxResultBytes
	}
	return DefaultMaxResultBytes
}

// resultTooLarge is err as the delegation's end, if it is a result over
// the limit: the same result would come again at every reconnection.
func resultTooLarge(err error) error {
	var full *control.SpoolFullError
	if !errors.As(err, &full) {
		return err
	}
	return control.Errorf(control.CodeTaskFailed, "the executor sent %s, over this delegator's limit: nothing was applied", full).
		WithHint("lend a smaller directory, or have the agent leave build output out of it")
}

// base is the executor's base URL, https where a key is pinned for it
// (discovery's URLs say http: what the executor serves is TLS).
func (c *PeerClient) base() string {
	b := strings.TrimSuffix(strings.TrimSuffix(c.BaseURL, "/"), "/awcp")
	if c.Key != "" {
		if rest, ok := strings.CutPrefix(b, "http://"); ok {
			b = "https://" + rest
		}
	}
	return b
}

// overTLS reports whether the executor is reached over TLS.
func (c *PeerClient) overTLS() bool { return strings.HasPrefix(c.base(), "https://") }

// secure refuses plain HTTP unless it was asked for.
func (c *PeerClient) secure() error {
	if c.overTLS() || c.PlainHTTP {
		return nil
	}
	return plainHTTPRefused(c.base())
}

// plainHTTPRefused refuses plain HTTP to base, which was not asked for.
func plainHTTPRefused(base string) error {
	return control.Errorf(control.CodeUsage, "plain HTTP to %s would carry the token, the workspace and the session in clear; nothing was sent", base).
		WithHint("reach the executor over TLS: --peer https://HOST:PORT with its key (--peer-key, or `awcp-ctl peers trust`); " +
			"for a peer that speaks only plain HTTP (the reference implementation), pass --plain-http")
}

func (c *PeerClient) client() *http.Client {
	if c.overTLS() {
		var timeout time.Duration
		if c.HTTP != nil {
			timeout = c.HTTP.Timeout
		}
		return pinnedClient(c.Key, c.Identity, timeout)
	}
	if c.HTTP != nil {
		return control.WithSameServerRedirects(c.HTTP)
	}
	return plainClient
}

// plainClient is the client of plain-HTTP executors (--plain-http).
var plainClient = control.WithSameServerRedirects(nil)

// tlsConfig is the TLS of a connection to the executor.
func (c *PeerClient) tlsConfig() *tls.Config {
	return control.PinnedClientConfig(c.Key, ownCertificate(c.Identity))
}

// pinnedClients are the HTTP clients of TLS connections, one for each
// pinned key, own identity and timeout, so that connections are reused
// across a delegation's requests.
var pinnedClients = struct {
	sync.Mutex
	m map[string]*http.Client
}{m: map[string]*http.Client{}}

func pinnedClient(key string, own ed25519.PrivateKey, timeout time.Duration) *http.Client {
	id := key + "\x00" + control.IdentityPublic(own) + "\x00" + timeout.String()
	pinnedClients.Lock()
	defer pinnedClients.Unlock()
	if cl := pinnedClients.m[id]; cl != nil {
		return cl
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = control.PinnedClientConfig(key, ownCertificate(own))
	tr.ForceAttemptHTTP2 = false
	cl := &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: control.SameServerRedirects}
	pinnedClients.m[id] = cl
	return cl
}

// CloseIdleConnections closes the idle connections kept to executors,
// plain and TLS.
func CloseIdleConnections() {
	plainClient.CloseIdleConnections()
	pinnedClients.Lock()
	defer pinnedClients.Unlock()
	for _, cl := range pinnedClients.m {
		cl.CloseIdleConnections()
	}
}

// ownCertificates are the certificates made of identity keys, one each,
// by public key.
var ownCertificates sync.Map // control.IdentityPublic(key) → *tls.Certificate

// ownCertificate is the TLS certificate of identity key own; nil for none.
func ownCertificate(own ed25519.PrivateKey) *tls.Certificate {
	if own == nil {
		return nil
	}
	pub := control.IdentityPublic(own)
	if c, ok := ownCertificates.Load(pub); ok {
		return c.(*tls.Certificate)
	}
	cert, err := control.IdentityCertificate(own)
	if err != nil {
		return nil
	}
	c, _ := ownCertificates.LoadOrStore(pub, &cert)
	return c.(*tls.Certificate)
}

// untrustedKey is err as the refusal of a first contact or a changed key:
// the key the executor showed, this delegator's, and how to trust it.
func (c *PeerClient) untrustedKey(err error) error {
	var ue *control.UnpinnedError
	if !errors.As(err, &ue) {
		return nil
	}
	self := ""
	if c.Identity != nil {
		self = "; this delegator is " + control.Fingerprint(control.IdentityPublic(c.Identity)) + " (awcp-ctl peers self)"
	}
	trust := "run again with --peer-key '" + ue.Seen + "'"
	if c.AgentID != "" {
		trust += ", or `awcp-ctl peers trust " + c.AgentID + " --key '" + ue.Seen + "'`"
	}
	return control.Errorf(control.CodeUsage, "executor %s: %v; nothing was sent to it", c.base(), ue).
		WithHint("compare with the fingerprint `awcp-fs serve` logs at start (`awcp-fs id` prints it); if it is the executor's, " + trust + self)
}

func (c *PeerClient) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	if err := c.secure(); err != nil {
		return nil, err
	}
	var (
		rd   io.Reader
		size int64
	)
	if body != nil {
		var done func()
		var err error
		if rd, size, done, err = requestBody(body); err != nil {
			return nil, err
		}
		defer done()
		if st, ok := body.(*control.Start); ok && st.WorkDir.WorkspaceFile != "" && c.Transfer != nil {
			rd = &countingReader{r: rd, total: size, report: func(n, total int64) { c.Transfer("workspace", n, total) }}
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, rd)
	if err != nil {
		return nil, control.Errorf(control.CodeUsage, "invalid executor URL %q: %v", c.BaseURL, err)
	}
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.client().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if uerr := c.untrustedKey(err); uerr != nil {
			return nil, uerr
		}
		if errors.Is(err, control.ErrRedirectRefused) {
			return nil, &control.ProtocolError{Code: control.CodeSetupFailed, Reason: control.ReasonUnreachable,
				Message: shortNetError(err).Error(),
				Hint:    "an executor answers at its own address; name the server it redirects to with --peer only if you trust it", Err: err}
		}
		// Not DECLINED: the executor refused nothing, it did not answer.
		// The spec has no code for that; setting the delegation up
		// failed, and the reason says why.
		return nil, &control.ProtocolError{Code: control.CodeSetupFailed, Reason: control.ReasonUnreachable,
			Message: fmt.Sprintf("cannot reach the executor at %s: %v", c.base(), shortNetError(err)),
			Hint:    "check --peer and that `awcp-fs serve` runs there (`awcp-ctl doctor --peer " + c.base() + "` checks both ways)", Err: err}
	}
	return resp, nil
}

// shortNetError is a network error without net/http's "Post \"URL\":"
// prefix, which the message says already.
func shortNetError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// workspacePlaceholder stands for workspaceBase64 in a marshalled START
// until the file's base64 takes its place; no other START field can hold
// it.
const workspacePlaceholder = "awcp:workspace-file"

// requestBody is msg as an HTTP body and its length. A START whose
// workspace is a file carries the file's base64 as workspaceBase64, read
// from the file as the body is sent. done releases the file.
func requestBody(msg any) (body io.Reader, size int64, done func(), err error) {
	st, ok := msg.(*control.Start)
	if !ok || st.WorkDir.WorkspaceFile == "" {
		data, err := control.Marshal(msg)
		return bytes.NewReader(data), int64(len(data)), func() {}, err
	}
	cp := *st
	cp.WorkDir.WorkspaceBase64 = workspacePlaceholder
	data, err := control.Marshal(&cp)
	if err != nil {
		return nil, 0, nil, err
	}
	prefix, suffix, ok := bytes.Cut(data, []byte(workspacePlaceholder))
	if !ok || bytes.Contains(suffix, []byte(workspacePlaceholder)) {
		return nil, 0, nil, errors.New("START: the workspace placeholder is not unique")
	}
	f, err := os.Open(st.WorkDir.WorkspaceFile)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("open the packed workspace: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	body = io.MultiReader(bytes.NewReader(prefix), control.NewBase64Reader(f), bytes.NewReader(suffix))
	size = int64(len(prefix)+len(suffix)) + int64(base64.StdEncoding.EncodedLen(int(fi.Size())))
	return body, size, func() { f.Close() }, nil
}

// post sends msg to path and decodes a 200 answer into out; any other
// answer becomes the *ProtocolError its ERROR body describes.
func (c *PeerClient) post(ctx context.Context, path string, msg, out any) error {
	resp, err := c.do(ctx, http.MethodPost, path, msg)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &control.ProtocolError{Code: control.CodeDeclined, Message: "the executor's answer was cut off", Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return peerError(resp.StatusCode, body)
	}
	// An ERROR is an ERROR whatever the HTTP status: the reference
	// implementation answers some (a TTL above its cap) with 200.
	if m, ok := errorMessage(body); ok {
		return m.ProtocolError()
	}
	if err := json.Unmarshal(body, out); err != nil {
		return control.Errorf(control.CodeDeclined, "the executor answered with something that is not AWCP: %.200s", body)
	}
	return nil
}

// errorMessage is body as an AWCP ERROR, if it is one.
func errorMessage(body []byte) (*control.Error, bool) {
	var m control.Error
	if json.Unmarshal(body, &m) != nil || m.Type != control.TypeError || m.Code == "" {
		return nil, false
	}
	return &m, true
}

func peerError(status int, body []byte) error {
	var m control.Error
	if json.Unmarshal(body, &m) == nil && m.Code != "" {
		return m.ProtocolError()
	}
	return control.Errorf(control.CodeDeclined, "the executor answered HTTP %d: %.200s", status, body)
}

// Invite sends INVITE and returns the ACCEPT.
func (c *PeerClient) Invite(ctx context.Context, inv *control.Invite) (*control.Accept, error) {
	if c.Token != "" {
		inv.Auth = &control.Auth{Type: "bearer", Credential: c.Token}
	}
	raw := new(json.RawMessage)
	if err := c.post(ctx, "/awcp", inv, raw); err != nil {
		return nil, err
	}
	msg, err := control.DecodeMessage(*raw)
	if err != nil {
		return nil, control.Errorf(control.CodeDeclined, "the executor's answer to INVITE is invalid: %v", err)
	}
	acc, ok := msg.(*control.Accept)
	if !ok || acc.DelegationID != inv.DelegationID {
		return nil, control.Errorf(control.CodeDeclined, "the executor did not answer INVITE with an ACCEPT for this delegation")
	}
	return acc, nil
}

// Probe asks the executor whether it can open a connection to port of
// this machine's address towards it (GET /awcp/probe). The answer's Date
// header is returned too, for the clock check of doctor.
func (c *PeerClient) Probe(ctx context.Context, port int) (*control.ProbeResult, time.Time, error) {
	resp, err := c.do(ctx, http.MethodGet, "/awcp/probe?port="+strconv.Itoa(port), nil)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer resp.Body.Close()
	date, _ := http.ParseTime(resp.Header.Get("Date"))
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, date, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, date, peerError(resp.StatusCode, body)
	}
	var res control.ProbeResult
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, date, fmt.Errorf("probe answer: %w", err)
	}
	return &res, date, nil
}

// Start sends START; nil means the workspace is set up.
func (c *PeerClient) Start(ctx context.Context, st *control.Start) error {
	var ok control.StartResponse
	if err := c.post(ctx, "/awcp", st, &ok); err != nil {
		return err
	}
	if !ok.OK {
		return control.Errorf(control.CodeSetupFailed, "the executor did not confirm START")
	}
	return nil
}

// SendError tells the executor a delegation is over.
func (c *PeerClient) SendError(ctx context.Context, m *control.Error) error {
	var ok control.StartResponse
	return c.post(ctx, "/awcp", m, &ok)
}

// Continue sends a head executor of the reference's development line the
// next round of a delegation whose last round ended (round_done).
func (c *PeerClient) Continue(ctx context.Context, m *control.Continue) error {
	var ok control.StartResponse
	return c.post(ctx, "/awcp", m, &ok)
}

// Close ends a delegation's rounds on such an executor: done follows.
func (c *PeerClient) Close(ctx context.Context, id string) error {
	var ok control.StartResponse
	return c.post(ctx, "/awcp", &control.Close{BaseMessage: control.BaseMessage{Version: control.Version, Type: control.TypeClose, DelegationID: id}}, &ok)
}

// Cancel asks the executor to cancel a delegation.
func (c *PeerClient) Cancel(ctx context.Context, id string) error {
	var ok control.StartResponse
	return c.post(ctx, "/awcp/cancel/"+id, nil, &ok)
}

// Ack tells a head executor that the result is in: it may drop the
// delegation's events and result (POST /awcp/tasks/{id}/ack).
func (c *PeerClient) Ack(ctx context.Context, id string) error {
	var ok control.StartResponse
	return c.post(ctx, "/awcp/tasks/"+id+"/ack", nil, &ok)
}

// Result asks a head executor for a delegation's outcome (GET
// /awcp/tasks/{id}/result): how its result is had again once the stream
// that carried it is gone. The snapshot, if any, is decoded into
// res.ResultFile in SpoolDir as it is read; the caller removes it.
func (c *PeerClient) Result(ctx context.Context, id string) (*control.TaskResult, error) {
	resp, err := c.do(ctx, http.MethodGet, "/awcp/tasks/"+id+"/result", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, peerError(resp.StatusCode, body)
	}
	var spool *control.SpoolFile
	rest, err := control.Divert(bufio.NewReaderSize(resp.Body, 64<<10), [][]string{{"snapshotBase64"}}, control.MaxEventBytes, func() (io.Writer, error) {
		var err error
		spool, err = control.NewSpoolFile(c.SpoolDir, c.maxResult())
		return spool, err
	})
	var got control.Spooled
	if err == nil && spool != nil {
		got, err = spool.Finish()
	}
	if err != nil {
		spool.Discard()
		return nil, resultTooLarge(fmt.Errorf("read the result of %s: %w", id, err))
	}
	var res control.TaskResult
	if err := json.Unmarshal(rest, &res); err != nil || res.Status == "" {
		spool.Discard()
		return nil, control.Errorf(control.CodeDeclined, "the executor answered with something that is not a task result: %.200s", rest)
	}
	res.ResultFile, res.ResultSum, res.ResultErr = got.File, got.Sum, got.Bad
	return &res, nil
}

// Permit answers a permission request the executor forwarded.
func (c *PeerClient) Permit(ctx context.Context, id, requestID, optionID string) error {
	var ok control.StartResponse
	return c.post(ctx, "/awcp/tasks/"+id+"/permission", control.PermissionAnswer{RequestID: requestID, OptionID: optionID}, &ok)
}

// Events reads id's event stream from after lastID, calling fn for each
// event in order. It returns nil after a terminal event was handled, fn's
// error if it fails, or the reason the stream broke off. A done event's
// resultBase64 reaches fn as ev.ResultFile, a ZIP in SpoolDir that is
// removed when fn returns.
func (c *PeerClient) Events(ctx context.Context, id string, lastID uint64, fn func(seq uint64, ev *control.Event) error) error {
	if err := c.secure(); err != nil {
		return &streamRefused{err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base()+"/awcp/tasks/"+id+"/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(control.KeepAliveHeader, strconv.Itoa(int(streamKeepAlive/time.Second)))
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(lastID, 10))
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.client().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		if uerr := c.untrustedKey(err); uerr != nil {
			return &streamRefused{uerr}
		}
		return &unreachableError{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return &streamRefused{peerError(resp.StatusCode, body)}
	}
	body := io.Reader(resp.Body)
	var silent *silence
	if n, err := strconv.Atoi(resp.Header.Get(control.KeepAliveHeader)); err == nil && n >= 1 {
		silent = watchSilence(resp.Body, 3*time.Duration(n)*time.Second)
		defer silent.stop()
		body = silent
	}
	if c.Opened != nil {
		c.Opened()
	}
	sse := control.SSEReader{SpoolDir: c.SpoolDir, MaxResult: c.maxResult()}
	if c.Transfer != nil {
		sse.Progress = func(n int64) { c.Transfer("result", n, -1) }
	}
	err = sse.Read(body, func(seq uint64, data []byte, result control.Spooled) (bool, error) {
		// A whole event that is not one would come again, the same, on
		// every reconnection: the delegation cannot go on.
		ev, err := control.DecodeEvent(data)
		if err != nil {
			return false, malformedEvent(seq, err.Error())
		}
		if ev.DelegationID != id {
			return false, malformedEvent(seq, "it is for delegation "+ev.DelegationID)
		}
		ev.ResultFile, ev.ResultSum, ev.ResultErr = result.File, result.Sum, result.Bad
		if err := fn(seq, ev); err != nil {
			return false, err
		}
		return ev.Terminal(), nil
	})
	if silent != nil && silent.fired() {
		return &unreachableError{err: fmt.Errorf("the event stream was silent for %s (no keep-alive)", silent.after)}
	}
	return resultTooLarge(err)
}

// streamKeepAlive is the keep-alive interval asked of an executor's event
// stream (control.KeepAliveHeader): a stream lost without a reset (a
// network outage) is noticed within three of them.
const streamKeepAlive = 3 * time.Second

// silence closes a stream that has sent nothing for a while.
type silence struct {
	r     io.ReadCloser
	after time.Duration
	timer *time.Timer
	shut  atomic.Bool
}

func watchSilence(r io.ReadCloser, after time.Duration) *silence {
	s := &silence{r: r, after: after}
	s.timer = time.AfterFunc(after, func() { s.shut.Store(true); r.Close() })
	return s
}

func (s *silence) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.after)
	}
	return n, err
}

func (s *silence) stop()       { s.timer.Stop() }
func (s *silence) fired() bool { return s.shut.Load() }

// streamRefused is an event stream the executor answered with an error
// (unknown delegation, say) instead of events.
type streamRefused struct{ err error }

func (e *streamRefused) Error() string { return e.err.Error() }
func (e *streamRefused) Unwrap() error { return e.err }

// unreachableError is an event stream that could not be opened: the
// executor did not answer at all (refused, reset, timed out).
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return "executor unreachable: " + e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// malformedEvent is the error for event seq of the stream, which the
// delegator cannot read.
func malformedEvent(seq uint64, why string) *control.ProtocolError {
	return control.Errorf(control.CodeTaskFailed, "the executor sent a malformed event (id %d): %s", seq, why).
		WithHint("the executor may speak another version of AWCP; its log may say more")
}

// AgentCard fetches the executor's A2A agent card (spec §8.3): the
// well-known agent-card.json, else the older agent.json. ctx bounds the
// whole look-up; discovery callers give it a short deadline.
func (c *PeerClient) AgentCard(ctx context.Context) (*control.AgentCard, error) {
	var lastErr error
	for _, path := range []string{"/.well-known/agent-card.json", "/.well-known/agent.json"} {
		card, err := c.getCard(ctx, path)
		if err == nil {
			return card, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func (c *PeerClient) getCard(ctx context.Context, path string) (*control.AgentCard, error) {
	var card control.AgentCard
	return &card, c.getJSON(ctx, path, "an agent card", &card)
}

// Manifest fetches the executor's GET /manifest (seed 003, with ours).
func (c *PeerClient) Manifest(ctx context.Context) (*control.Manifest, error) {
	var m control.Manifest
	return &m, c.getJSON(ctx, "/manifest", "a manifest", &m)
}

// getJSON reads path's JSON answer, up to 1 MiB, into out.
func (c *PeerClient) getJSON(ctx context.Context, path, what string, out any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s: not %s: %w", path, what, err)
	}
	return nil
}

// countingReader tells report how much of total it has read.
type countingReader struct {
	r      io.Reader
	n      int64
	total  int64
	report func(n, total int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.report(c.n, c.total)
	return n, err
}

// Renew asks the executor to renew session id's lease (control.RenewPath).
func (c *PeerClient) Renew(ctx context.Context, id string, req control.RenewRequest) (time.Time, error) {
	var resp control.RenewResponse
	if err := c.post(ctx, strings.Replace(control.RenewPath, "{id}", id, 1), req, &resp); err != nil {
		return time.Time{}, err
	}
	at, err := control.ParseTimestamp(resp.ExpiresAt)
	if err != nil {
		return time.Time{}, fmt.Errorf("the executor's renewed lease: %w", err)
	}
	return at, nil
}

// peer is the client of delegation del's executor: pinned to its key,
// with this delegator's identity as its certificate.
func (d *Delegator) peer(del *lease.Delegation) *PeerClient {
	c := &PeerClient{BaseURL: del.Peer, Token: del.Token, HTTP: d.opts.HTTP, SpoolDir: d.opts.SpoolDir,
		MaxResultBytes: d.opts.MaxResultBytes, AgentID: del.PeerAgentID, Key: del.PeerKey, PlainHTTP: del.PlainHTTP, Identity: d.opts.Identity}
	if d.opts.Transfer != nil {
		id := del.ID
		c.Transfer = func(what string, done, total int64) { d.opts.Transfer(id, what, done, total) }
	}
	return c
}
