// Package a2apeer is the delegator's side of an A2A agent as a peer
// (--peer a2a:URL; delegator.A2APeer): the task and the lent directory,
// packed as the archive transport packs it, go in one message (a text
// part and a ZIP file part) by the official Go SDK's client
// (github.com/a2aproject/a2a-go/v2: A2A 1.0, and 0.3 through its
// compatibility layer; JSON-RPC first, HTTP+JSON where that is all an
// agent offers — the newest version both speak); the task's states
// become the delegation's events; its artifacts become a result ZIP,
// built on what was sent, that the archive transport's review applies or
// stages as it would an executor's. Nothing the agent sends touches the
// directory except through that path.
//
// Everything the agent sends is hostile: its card may name another host
// (refused: the token would go there), its words are bounded, its file
// parts' names are checked here and again by the result's apply (hidden
// paths, git's control files, links out), a file by URI is named and not
// fetched, and what it sends at all is bounded (maxResult).
package a2apeer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/untrusted"
	"github.com/awcp/awcp/lease"
)

// Peer speaks to A2A agents for a delegator.
type Peer struct {
	// Dir keeps each delegation's workspace ZIP while it runs.
	Dir    string
	Logger *slog.Logger
}

const (
	// maxResult bounds what an agent may send back: its answers' bodies
	// (base64 and all), its files decoded.
	maxResult = 256 << 20
	// poll is how often a task is asked for once its stream has ended
	// (an agent waiting on input, or one that does not stream).
	poll = time.Second
)

func (p *Peer) log() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

func (p *Peer) sentFile(id string) string { return filepath.Join(p.Dir, id+".zip") }

// Keep is delegator.A2APeer's: the packed workspace moves into Dir.
func (p *Peer) Keep(del *lease.Delegation, ws string) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	return os.Rename(ws, p.sentFile(del.ID))
}

// Forget is delegator.A2APeer's.
func (p *Peer) Forget(id string) {
	os.Remove(p.sentFile(id))
	os.Remove(p.sentFile(id) + ".result")
}

// client is an A2A client for del's agent, from its card, and the spools
// its answers' files go to: the caller's to close.
func (p *Peer) client(ctx context.Context, del *lease.Delegation) (_ *a2aclient.Client, _ *spools, err error) {
	sp := newSpools(p.Dir)
	defer func() {
		if err != nil {
			sp.close()
		}
	}()
	hc := &http.Client{Transport: &bounded{next: transportFor(del), token: del.Token, max: maxResult*4/3 + 1<<20,
		workspace: p.sentFile(del.ID), spools: sp},
		CheckRedirect: control.SameServerRedirects}
	resolver := agentcard.NewResolver(hc)
	resolver.CardParser = parseCard
	card, err := resolver.Resolve(ctx, del.Peer)
	if err != nil {
		return nil, nil, fmt.Errorf("the agent card at %s: %w", del.Peer, err)
	}
	// Every way the card offers must be the agent's own server: the
	// token and the workspace go wherever the client chooses.
	peer, _ := url.Parse(del.Peer)
	for _, iface := range card.SupportedInterfaces {
		where := ""
		if iface != nil {
			where = iface.URL
		}
		if at, err := url.Parse(where); iface == nil || err != nil || !sameServer(peer, at) {
			return nil, nil, control.Errorf(control.CodeTaskFailed, "the agent card at %s sends tasks to %q, another place than the agent: refused (the token and the workspace would go there)", del.Peer, untrusted.Clip(where, 200)).
				WithHint("name the agent by the URL its card gives")
		}
	}
	c, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc),
		a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: hc}),
		a2av0.WithRESTTransport(a2av0.RESTTransportConfig{Client: hc}))
	if err != nil {
		return nil, nil, control.Errorf(control.CodeTaskFailed, "the agent at %s speaks no A2A version and binding this delegator does (1.0 or 0.3; JSON-RPC or HTTP+JSON): %s", del.Peer, untrusted.Clip(err.Error(), 300))
	}
	return c, sp, nil
}

// parseCard reads an agent card of either generation: 1.0's interfaces,
// else 0.3's url — by JSON-RPC where the card names no transport (A2A
// 0.3's default; Gemini CLI's card names none).
func parseCard(body []byte) (*a2a.AgentCard, error) {
	var legacy struct {
		Interfaces []json.RawMessage `json:"supportedInterfaces"`
		URL        string            `json:"url"`
		Preferred  string            `json:"preferredTransport"`
	}
	if err := json.Unmarshal(body, &legacy); err != nil {
		return nil, err
	}
	card, err := a2av0.NewAgentCardParser()(body)
	if err != nil {
		return nil, err
	}
	if len(legacy.Interfaces) == 0 && legacy.URL != "" && legacy.Preferred == "" {
		card.SupportedInterfaces = append([]*a2a.AgentInterface{{URL: legacy.URL,
			ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version}}, card.SupportedInterfaces...)
	}
	if len(card.SupportedInterfaces) == 0 {
		return nil, errors.New("the card names no interface (1.0's supportedInterfaces) and no url (0.3's)")
	}
	return card, nil
}

// transportFor is how del's agent is reached: pinned to its key where one
// is given or trusted for its URL (--peer-key, `awcp-ctl peers trust`),
// as an executor is — awcp's own A2A face shows its identity key, not a
// certificate a CA signed; else the system's certificate authorities.
func transportFor(del *lease.Delegation) http.RoundTripper {
	if del.PeerKey == "" {
		return http.DefaultTransport
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = control.PinnedClientConfig(del.PeerKey, nil)
	tr.ForceAttemptHTTP2 = false
	return tr
}

// sameServer says whether b is the server a is: the same scheme, port
// and host — or, for an agent on this machine, a loopback name for a
// loopback address (a card says localhost where the user said 127.0.0.1).
func sameServer(a, b *url.URL) bool {
	if a.Scheme != b.Scheme || a.Port() != b.Port() {
		return false
	}
	if strings.EqualFold(a.Hostname(), b.Hostname()) {
		return true
	}
	return loopback(a.Hostname()) && loopback(b.Hostname())
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bounded carries an agent's requests with the delegation's token and,
// in a task's message, the workspace streamed from its file; it cuts any
// answer past max bytes, and takes the files of a JSON answer apart into
// spools (spool.go).
type bounded struct {
	next      http.RoundTripper
	token     string
	max       int64
	workspace string // the ZIP sent with the task
	spools    *spools
}

func (b *bounded) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	r, err := spliceWorkspace(r, b.workspace)
	if err != nil {
		return nil, err
	}
	resp, err := b.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		return nil, &refusedError{status: resp.Status, body: strings.TrimSpace(string(body))}
	}
	body := &limitedBody{r: resp.Body, left: b.max, max: b.max}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || strings.HasPrefix(ct, "text/event-stream") {
		// A stream's events the SDK reads a line at a time, each at
		// most 64 KiB (bufio.Scanner's bound): nothing large is held.
		resp.Body = body
		return resp, nil
	}
	rest, err := b.spools.divert(body, maxResult*4/3+4)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("the agent's answer: %w", err)
	}
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(rest)), int64(len(rest))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// refusedError is an agent's refusal of the request's credential.
type refusedError struct{ status, body string }

func (e *refusedError) Error() string {
	return fmt.Sprintf("the agent refused the request (%s): %s", e.status, untrusted.Clip(e.body, 500))
}

type limitedBody struct {
	r         io.ReadCloser
	left, max int64
}

func (l *limitedBody) Read(b []byte) (int, error) {
	if l.left <= 0 {
		return 0, fmt.Errorf("the agent's answer is past the %d bytes it may be", l.max)
	}
	if int64(len(b)) > l.left {
		b = b[:l.left]
	}
	n, err := l.r.Read(b)
	l.left -= int64(n)
	return n, err
}

func (l *limitedBody) Close() error { return l.r.Close() }

// fatal makes err one that ends the delegation, in the agent's words.
func fatal(err error) error {
	var pe *control.ProtocolError
	if errors.As(err, &pe) {
		return pe
	}
	var unpinned *control.UnpinnedError
	if errors.As(err, &unpinned) {
		// The key to trust is the user's to settle: nothing was sent.
		return control.Errorf(control.CodeUsage, "the agent shows key %s, not the one trusted for it (%s); nothing was sent to it",
			control.Fingerprint(unpinned.Seen), control.Fingerprint(unpinned.Pinned)).
			WithHint("compare with what `awcp-fs id` prints there; if it is the agent's, run again with --peer-key '" + unpinned.Seen + "'")
	}
	var refused *refusedError
	if errors.As(err, &refused) {
		return control.Errorf(control.CodeAuthFailed, "%s", refused.Error()).WithHint("give the agent's token with --token-file FILE")
	}
	return control.Errorf(control.CodeTaskFailed, "the A2A agent: %s", untrusted.Clip(err.Error(), 1000))
}

// message is del's task: its prompt as text, the workspace as a ZIP —
// its bytes a mark the transport replaces with them as it sends
// (spliceWorkspace).
func (p *Peer) message(del *lease.Delegation) (*a2a.Message, error) {
	f, err := os.Open(p.sentFile(del.ID))
	if err != nil {
		return nil, fmt.Errorf("the workspace kept for the task: %w", err)
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return nil, fmt.Errorf("the workspace kept for the task: %w", err)
	}
	return a2a.NewMessage(a2a.MessageRoleUser,
		a2a.NewTextPart(del.Prompt),
		&a2a.Part{Content: a2a.Raw(workspaceMarkRaw), Filename: "workspace.zip", MediaType: "application/zip",
			Metadata: map[string]any{"sha256": hex.EncodeToString(sum.Sum(nil))}}), nil
}

// Permit is delegator.A2APeer's: the answer is the task's next message,
// sent without waiting; the follower sees the task go on.
func (p *Peer) Permit(ctx context.Context, del *lease.Delegation, requestID, optionID string) error {
	if del.PeerTaskID == "" {
		return control.Errorf(control.CodeDeclined, "the A2A task has not been named yet")
	}
	c, sp, err := p.client(ctx, del)
	if err != nil {
		return fatal(err)
	}
	defer sp.close()
	defer c.Destroy()
	m := a2a.NewMessage(a2a.MessageRoleUser, answerParts(requestID, optionID)...)
	m.TaskID, m.ContextID = a2a.TaskID(del.PeerTaskID), del.PeerContextID
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: m, Config: &a2a.SendMessageConfig{ReturnImmediately: true}}); err != nil {
		return fatal(err)
	}
	return nil
}

// Cancel is delegator.A2APeer's.
func (p *Peer) Cancel(ctx context.Context, del *lease.Delegation) error {
	c, sp, err := p.client(ctx, del)
	if err != nil {
		return err
	}
	defer sp.close()
	defer c.Destroy()
	_, err = c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(del.PeerTaskID)})
	return err
}

// requestIDs an agent's permission request may have, as kept in the
// delegation's record and named on `awcp-ctl permit`'s line.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// contextIDPattern is what an agent's context id may be: it is kept in
// the record and shown to the user, so it is an id, nothing a terminal
// would act on.
var contextIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// resultName is name, a file part's name, as a path of the result, or ""
// if it cannot be one: absolute, climbing out, empty, or holding a
// control character or a backslash.
func resultName(name string) string {
	if name == "" || len(name) > 4096 || strings.ContainsAny(name, "\\\x00") || path.IsAbs(name) {
		return ""
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return ""
		}
	}
	clean := path.Clean(name)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return ""
	}
	return clean
}
