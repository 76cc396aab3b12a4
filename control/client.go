package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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
	var full *spoolFullError
	if !errors.As(err, &full) {
		return err
	}
	return Errorf(CodeTaskFailed, "the executor sent %s, over this delegator's limit: nothing was applied", full).
		WithHint("lend a smaller directory, or have the agent leave build output out of it")
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
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, rd)
	if err != nil {
		return nil, Errorf(CodeDeclined, "invalid executor URL %q: %v", c.BaseURL, err)
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
		return nil, &ProtocolError{Code: CodeDeclined, Message: fmt.Sprintf("cannot reach the executor at %s", c.base()),
			Hint: "check --peer and that `awcp-fs serve` runs there", Err: err}
	}
	return resp, nil
}

// workspacePlaceholder stands for workspaceBase64 in a marshalled START
// until the file's base64 takes its place; no other START field can hold
// it.
const workspacePlaceholder = "awcp:workspace-file"

// requestBody is msg as an HTTP body and its length. A START whose
// workspace is a file carries the file's base64 as workspaceBase64, read
// from the file as the body is sent. done releases the file.
func requestBody(msg any) (body io.Reader, size int64, done func(), err error) {
	st, ok := msg.(*Start)
	if !ok || st.WorkDir.WorkspaceFile == "" {
		data, err := Marshal(msg)
		return bytes.NewReader(data), int64(len(data)), func() {}, err
	}
	cp := *st
	cp.WorkDir.WorkspaceBase64 = workspacePlaceholder
	data, err := Marshal(&cp)
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
	body = io.MultiReader(bytes.NewReader(prefix), newBase64Reader(f), bytes.NewReader(suffix))
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
		return &ProtocolError{Code: CodeDeclined, Message: "the executor's answer was cut off", Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return peerError(resp.StatusCode, body)
	}
	// An ERROR is an ERROR whatever the HTTP status: the reference
	// implementation answers some (a TTL above its cap) with 200.
	if m, ok := errorMessage(body); ok {
		return &ProtocolError{Code: m.Code, Message: m.Message, Hint: m.Hint}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return Errorf(CodeDeclined, "the executor answered with something that is not AWCP: %.200s", body)
	}
	return nil
}

// errorMessage is body as an AWCP ERROR, if it is one.
func errorMessage(body []byte) (*Error, bool) {
	var m Error
	if json.Unmarshal(body, &m) != nil || m.Type != TypeError || m.Code == "" {
		return nil, false
	}
	return &m, true
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

// Ack tells a head executor that the result is in: it may drop the
// delegation's events and result (POST /awcp/tasks/{id}/ack).
func (c *PeerClient) Ack(ctx context.Context, id string) error {
	var ok StartResponse
	return c.post(ctx, "/awcp/tasks/"+id+"/ack", nil, &ok)
}

// Result asks a head executor for a delegation's outcome (GET
// /awcp/tasks/{id}/result): how its result is had again once the stream
// that carried it is gone. The snapshot, if any, is decoded into
// res.ResultFile in SpoolDir as it is read; the caller removes it.
func (c *PeerClient) Result(ctx context.Context, id string) (*TaskResult, error) {
	resp, err := c.do(ctx, http.MethodGet, "/awcp/tasks/"+id+"/result", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, peerError(resp.StatusCode, body)
	}
	var spool *spoolFile
	rest, err := divert(bufio.NewReaderSize(resp.Body, 64<<10), [][]string{{"snapshotBase64"}}, maxEventBytes, func() (io.Writer, error) {
		var err error
		spool, err = newSpoolFile(c.SpoolDir, c.maxResult())
		return spool, err
	})
	var got spooled
	if err == nil && spool != nil {
		got, err = spool.finish()
	}
	if err != nil {
		spool.discard()
		return nil, resultTooLarge(fmt.Errorf("read the result of %s: %w", id, err))
	}
	var res TaskResult
	if err := json.Unmarshal(rest, &res); err != nil || res.Status == "" {
		spool.discard()
		return nil, Errorf(CodeDeclined, "the executor answered with something that is not a task result: %.200s", rest)
	}
	res.ResultFile, res.resultSum, res.resultErr = got.file, got.sum, got.bad
	return &res, nil
}

// Permit answers a permission request the executor forwarded.
func (c *PeerClient) Permit(ctx context.Context, id, requestID, optionID string) error {
	var ok StartResponse
	return c.post(ctx, "/awcp/tasks/"+id+"/permission", PermissionAnswer{RequestID: requestID, OptionID: optionID}, &ok)
}

// Events reads id's event stream from after lastID, calling fn for each
// event in order. It returns nil after a terminal event was handled, fn's
// error if it fails, or the reason the stream broke off. A done event's
// resultBase64 reaches fn as ev.ResultFile, a ZIP in SpoolDir that is
// removed when fn returns.
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
		if ctx.Err() != nil {
			return err
		}
		return &unreachableError{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return &streamRefused{peerError(resp.StatusCode, body)}
	}
	err = readSSE(resp.Body, c.SpoolDir, c.maxResult(), func(seq uint64, data []byte, result spooled) (bool, error) {
		// A whole event that is not one would come again, the same, on
		// every reconnection: the delegation cannot go on.
		ev, err := DecodeEvent(data)
		if err != nil {
			return false, malformedEvent(seq, err.Error())
		}
		if ev.DelegationID != id {
			return false, malformedEvent(seq, "it is for delegation "+ev.DelegationID)
		}
		ev.ResultFile, ev.resultSum, ev.resultErr = result.file, result.sum, result.bad
		if err := fn(seq, ev); err != nil {
			return false, err
		}
		return ev.Terminal(), nil
	})
	return resultTooLarge(err)
}

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
func malformedEvent(seq uint64, why string) *ProtocolError {
	return Errorf(CodeTaskFailed, "the executor sent a malformed event (id %d): %s", seq, why).
		WithHint("the executor may speak another version of AWCP; its log may say more")
}

// errStreamEnded is returned when the stream ends before a terminal event.
var errStreamEnded = errors.New("event stream ended before the task did")

// maxEventBytes bounds an event's data apart from a diverted result.
const maxEventBytes = 16 << 20

// readSSE parses a text/event-stream, calling fn with each event's id and
// data until fn reports the end. An event's top-level resultBase64 (or
// snapshotBase64) is not kept in data: it is decoded into a file in
// spoolDir as it is read — maxResult bytes of base64 at most, 0 for no
// limit — given to fn (with bad set if it was not base64), and removed
// when fn returns.
func readSSE(r io.Reader, spoolDir string, maxResult int64, fn func(seq uint64, data []byte, result spooled) (bool, error)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		ev := &sseEvent{br: br}
		data := bufio.NewReader(ev)
		if _, err := data.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				continue // an event without data, or a comment
			}
			return err
		}
		var spool *spoolFile
		rest, err := divert(data, [][]string{{"resultBase64", "snapshotBase64"}}, maxEventBytes, func() (io.Writer, error) {
			var err error
			spool, err = newSpoolFile(spoolDir, maxResult)
			return spool, err
		})
		if err == nil {
			_, err = io.Copy(io.Discard, data) // to the event's end, past a late id
		}
		var result spooled
		if err == nil && spool != nil {
			result, err = spool.finish()
		}
		if err != nil {
			spool.discard()
			if errors.Is(err, errStreamEnded) {
				return err
			}
			return fmt.Errorf("bad event after %d: %w", ev.seq, err)
		}
		end, err := fn(ev.seq, rest, result)
		spool.discard()
		if err != nil || end {
			return err
		}
	}
}

// sseEvent reads the data of one server-sent event: its data lines joined
// by newlines, then io.EOF at the blank line that ends the event. Other
// fields are read on the way (id) or skipped.
type sseEvent struct {
	br      *bufio.Reader
	seq     uint64
	left    []byte // data not read yet; may point into br's buffer
	inData  bool   // within a data line
	hasData bool   // a data line was read
	end     bool
}

func (e *sseEvent) Read(p []byte) (int, error) {
	for len(e.left) == 0 {
		if e.end {
			return 0, io.EOF
		}
		if err := e.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, e.left)
	e.left = e.left[n:]
	return n, nil
}

// next reads on to the next piece of data, or to the event's end. A line
// is read in chunks of br's buffer: only a data line can be longer.
func (e *sseEvent) next() error {
	chunk, err := e.br.ReadSlice('\n')
	full := errors.Is(err, bufio.ErrBufferFull)
	switch {
	case full:
	case errors.Is(err, io.EOF):
		return errStreamEnded
	case err != nil:
		return err
	}
	if !full {
		chunk = bytes.TrimRight(chunk, "\r\n")
	}
	if e.inData { // the rest of a long data line
		e.left, e.inData = chunk, full
		return nil
	}
	switch {
	case bytes.HasPrefix(chunk, []byte("data:")):
		chunk = bytes.TrimPrefix(chunk[5:], []byte(" "))
		if e.hasData {
			// Lines of one event's data are joined by newlines; the
			// chunk stays valid until br is read again.
			e.left = append([]byte{'\n'}, chunk...)
		} else {
			e.left = chunk
		}
		e.inData, e.hasData = full, true
	case full: // a long line of another field: skipped
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = e.br.ReadSlice('\n')
		}
		if errors.Is(err, io.EOF) {
			return errStreamEnded
		}
		return err
	case len(chunk) == 0:
		e.end = true
	case bytes.HasPrefix(chunk, []byte("id:")):
		e.seq, _ = strconv.ParseUint(strings.TrimSpace(string(chunk[3:])), 10, 64)
	}
	return nil
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
