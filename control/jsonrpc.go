package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/awcp/awcp/internal/untrusted"
)

// The JSON-RPC 2.0 of ACP (NDJSON: one message a line), as the two relays
// of a session see it — the executor's between the channel and the agent
// (control/executor/acp), the delegator's gateway between the editor and
// the channels (control/delegator/gateway): each reads only what it
// routes by and passes the rest on as it came.

// RPCMessage is one JSON-RPC message: a request (id and method), a
// notification (method only) or a response (id, result or error).
type RPCMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

// IsRequest, IsNotification and IsResponse tell the three kinds apart.
func (m *RPCMessage) IsRequest() bool      { return m.Method != "" && len(m.ID) > 0 }
func (m *RPCMessage) IsNotification() bool { return m.Method != "" && len(m.ID) == 0 }
func (m *RPCMessage) IsResponse() bool     { return m.Method == "" && len(m.ID) > 0 }

// ErrNotRPC is Read's error for a line that is no JSON-RPC message; the
// line is consumed, and the next Read goes on after it. Where the line was
// JSON but ambiguous (untrusted.JSONKeys) or held a member JSON-RPC does
// not have, Read returns the message too, so that a request can be
// answered with its refusal.
var ErrNotRPC = errors.New("a line that is not JSON-RPC")

// rpcMembers are the members a JSON-RPC 2.0 message may have.
var rpcMembers = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// MaxRPCMessage bounds one message read (an NDJSON line).
const MaxRPCMessage = 32 << 20

// RPCConn is one end of a relay: NDJSON messages, read one at a time,
// written whole under a lock.
type RPCConn struct {
	r   *bufio.Reader
	wmu sync.Mutex
	w   io.Writer
}

// NewRPCConn reads messages from r and writes them to w.
func NewRPCConn(r io.Reader, w io.Writer) *RPCConn {
	return &RPCConn{r: bufio.NewReaderSize(r, 64<<10), w: w}
}

// Read returns the next message; io.EOF at a clean end.
func (c *RPCConn) Read() (*RPCMessage, error) {
	for {
		line, err := readLine(c.r, MaxRPCMessage)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(string(line)) == "" {
			continue
		}
		var m RPCMessage
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotRPC, err)
		}
		// Every hop reads a message as the next one will: one that two
		// parsers read two ways (a key twice, keys differing in case) is
		// refused here, whoever sent it.
		if err := untrusted.CheckJSONObject(line, rpcMembers...); err != nil {
			return &m, fmt.Errorf("%w: %v", ErrNotRPC, err)
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

// Write sends m, whole, as one line.
func (c *RPCConn) Write(m *RPCMessage) error {
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

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// RPCErrorResponse is the error answer to request id.
func RPCErrorResponse(id json.RawMessage, code int, msg string, data any) *RPCMessage {
	raw, _ := json.Marshal(RPCError{Code: code, Message: msg, Data: data})
	return &RPCMessage{ID: id, Error: raw}
}
