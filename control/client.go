package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// PeerClient talks to one executor.
type PeerClient struct {
	// BaseURL is the executor's base, e.g. http://host:10200. A URL ending
	// in /awcp (the message endpoint) is accepted too.
	BaseURL string
	// Token, if set, is sent in INVITE's auth and as a bearer token. Secret.
	Token string
	// HTTP is the client used. Default: one without a timeout (event
	// streams are long); requests are bounded by their contexts.
	HTTP *http.Client
}

func (c *PeerClient) base() string {
	return strings.TrimSuffix(strings.TrimSuffix(c.BaseURL, "/"), "/awcp")
}

func (c *PeerClient) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *PeerClient) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		data, err := Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, rd)
	if err != nil {
		return nil, Errorf(CodeDeclined, "invalid executor URL %q: %v", c.BaseURL, err)
	}
	if body != nil {
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
		return nil, &ProtocolError{Code: CodeDeclined, Message: fmt.Sprintf("cannot reach the executor at %s", c.base()),
			Hint: "check --peer and that `awcp-fs serve` runs there", Err: err}
	}
	return resp, nil
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
		return &ProtocolError{Code: CodeDeclined, Message: "the executor's answer was cut off", Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return peerError(resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return Errorf(CodeDeclined, "the executor answered with something that is not AWCP: %.200s", body)
	}
	return nil
}

func peerError(status int, body []byte) error {
	var m Error
	if json.Unmarshal(body, &m) == nil && m.Code != "" {
		return &ProtocolError{Code: m.Code, Message: m.Message, Hint: m.Hint}
	}
	return Errorf(CodeDeclined, "the executor answered HTTP %d: %.200s", status, body)
}

// Invite sends INVITE and returns the ACCEPT.
func (c *PeerClient) Invite(ctx context.Context, inv *Invite) (*Accept, error) {
	if c.Token != "" {
		inv.Auth = &Auth{Type: "bearer", Credential: c.Token}
	}
	raw := new(json.RawMessage)
	if err := c.post(ctx, "/awcp", inv, raw); err != nil {
		return nil, err
	}
	msg, err := DecodeMessage(*raw)
	if err != nil {
		return nil, Errorf(CodeDeclined, "the executor's answer to INVITE is invalid: %v", err)
	}
	acc, ok := msg.(*Accept)
	if !ok || acc.DelegationID != inv.DelegationID {
		return nil, Errorf(CodeDeclined, "the executor did not answer INVITE with an ACCEPT for this delegation")
	}
	return acc, nil
}

// Start sends START; nil means the workspace is set up.
func (c *PeerClient) Start(ctx context.Context, st *Start) error {
	var ok StartResponse
	if err := c.post(ctx, "/awcp", st, &ok); err != nil {
		return err
	}
	if !ok.OK {
		return Errorf(CodeSetupFailed, "the executor did not confirm START")
	}
	return nil
}

// SendError tells the executor a delegation is over.
func (c *PeerClient) SendError(ctx context.Context, m *Error) error {
	var ok StartResponse
	return c.post(ctx, "/awcp", m, &ok)
}

// Cancel asks the executor to cancel a delegation.
func (c *PeerClient) Cancel(ctx context.Context, id string) error {
	var ok StartResponse
	return c.post(ctx, "/awcp/cancel/"+id, nil, &ok)
}

// Permit answers a permission request the executor forwarded.
func (c *PeerClient) Permit(ctx context.Context, id, requestID, optionID string) error {
	var ok StartResponse
	return c.post(ctx, "/awcp/tasks/"+id+"/permission", PermissionAnswer{RequestID: requestID, OptionID: optionID}, &ok)
}

// Events reads id's event stream from after lastID, calling fn for each
// event in order. It returns nil after a terminal event was handled, fn's
// error if it fails, or the reason the stream broke off.
func (c *PeerClient) Events(ctx context.Context, id string, lastID uint64, fn func(seq uint64, ev *Event) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base()+"/awcp/tasks/"+id+"/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(lastID, 10))
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return peerError(resp.StatusCode, body)
	}
	return readSSE(resp.Body, func(seq uint64, data []byte) (bool, error) {
		ev, err := DecodeEvent(data)
		if err != nil {
			return false, fmt.Errorf("bad event %d: %w", seq, err)
		}
		if ev.DelegationID != id {
			return false, fmt.Errorf("event %d is for another delegation", seq)
		}
		if err := fn(seq, ev); err != nil {
			return false, err
		}
		return ev.Terminal(), nil
	})
}

// errStreamEnded is returned when the stream ends before a terminal event.
var errStreamEnded = errors.New("event stream ended before the task did")

// readSSE parses a text/event-stream, calling fn with each event's id and
// data until fn reports the end.
func readSSE(r io.Reader, fn func(seq uint64, data []byte) (bool, error)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		seq  uint64
		data bytes.Buffer
	)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errStreamEnded
			}
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0: // dispatch
			if data.Len() > 0 {
				end, err := fn(seq, data.Bytes())
				if err != nil || end {
					return err
				}
				data.Reset()
			}
		case line[0] == ':': // comment, keep-alive
		case bytes.HasPrefix(line, []byte("data:")):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" ")))
		case bytes.HasPrefix(line, []byte("id:")):
			seq, _ = strconv.ParseUint(strings.TrimSpace(string(line[3:])), 10, 64)
		}
	}
}

// AgentCard fetches the executor's A2A agent card (spec §8.3): the
// well-known agent-card.json, else the older agent.json. ctx bounds the
// whole look-up; discovery callers give it a short deadline.
func (c *PeerClient) AgentCard(ctx context.Context) (*AgentCard, error) {
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

func (c *PeerClient) getCard(ctx context.Context, path string) (*AgentCard, error) {
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
	}
	var card AgentCard
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&card); err != nil {
		return nil, fmt.Errorf("%s: not an agent card: %w", path, err)
	}
	return &card, nil
}

// AWCP returns the card's AWCP extension (spec §8.3), if it declares one.
func (c *AgentCard) AWCP() (CardExtension, bool) {
	for _, ext := range c.Extensions {
		if ext.URI == ExtensionURI {
			return ext, true
		}
	}
	return CardExtension{}, false
}
