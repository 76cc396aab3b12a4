package acp

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// message is one JSON-RPC 2.0 message as a relay sees it: a request (id
// and method), a notification (method only) or a response (id, result or
// error). The relay reads only what it routes by and passes the rest on
// as it came.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

func (m *message) isRequest() bool      { return m.Method != "" && len(m.ID) > 0 }
func (m *message) isNotification() bool { return m.Method != "" && len(m.ID) == 0 }
func (m *message) isResponse() bool     { return m.Method == "" && len(m.ID) > 0 }

// maxMessage bounds one message read from either end (NDJSON line).
const maxMessage = 32 << 20

// rpcConn is one end of a relay: NDJSON messages, read one at a time,
// written whole under a lock.
type rpcConn struct {
	r   *bufio.Reader
	wmu sync.Mutex
	w   io.Writer
}

func newRPCConn(r io.Reader, w io.Writer) *rpcConn {
	return &rpcConn{r: bufio.NewReaderSize(r, 64<<10), w: w}
}

// read returns the next message; io.EOF at a clean end.
func (c *rpcConn) read() (*message, error) {
	for {
		line, err := readLine(c.r, maxMessage)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(string(line)) == "" {
			continue
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("not JSON-RPC: %w", err)
		}
		return &m, nil
	}
}

// readLine reads one line of at most max bytes, without its newline.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("a message longer than %d bytes", max)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}

func (c *rpcConn) write(m *message) error {
	m.JSONRPC = "2.0"
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.w.Write(append(data, '\n'))
	return err
}

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func errorResponse(id json.RawMessage, code int, msg string, data any) *message {
	raw, _ := json.Marshal(rpcError{Code: code, Message: msg, Data: data})
	return &message{ID: id, Error: raw}
}

// rewritePaths returns v with every string that is from, or a path
// beneath it, made the same path beneath to: how a relay translates
// between the agent's work directory and the editor's project
// directory. Anything that is not valid JSON is returned unchanged.
func rewritePaths(v json.RawMessage, from, to string) json.RawMessage {
	if len(v) == 0 || from == to || !strings.Contains(string(v), from) {
		return v
	}
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return v
	}
	out, err := json.Marshal(rewriteValue(x, from, to))
	if err != nil {
		return v
	}
	return out
}

func rewriteValue(x any, from, to string) any {
	switch x := x.(type) {
	case string:
		return rewritePath(x, from, to)
	case []any:
		for i := range x {
			x[i] = rewriteValue(x[i], from, to)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = rewriteValue(e, from, to)
		}
	}
	return x
}

// rewritePath is s beneath to if s is from or beneath it (as a path, or
// as a file URI), else s.
func rewritePath(s, from, to string) string {
	for _, prefix := range []string{"", "file://"} {
		p := prefix + from
		if s == p || strings.HasPrefix(s, p+"/") {
			return prefix + to + s[len(p):]
		}
	}
	return s
}
