package control

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// A peer's line is read up to MaxRPCMessage and no further: one that
// never ends is refused there, not held whole; a line that is not
// JSON-RPC is skipped with ErrNotRPC and the next one read.
func TestRPCConnBoundsALine(t *testing.T) {
	r := &repeat{b: 'x'}
	endless := io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","method":"m","params":"`), r)
	if _, err := NewRPCConn(endless, io.Discard).Read(); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("an endless line: %v", err)
	}
	if r.read > MaxRPCMessage+1<<20 {
		t.Fatalf("read %d bytes of an endless line, bound %d", r.read, MaxRPCMessage)
	}
	rc := NewRPCConn(strings.NewReader("not json\n{\"jsonrpc\":\"2.0\",\"method\":\"ok\"}\n"), io.Discard)
	if _, err := rc.Read(); !errors.Is(err, ErrNotRPC) {
		t.Fatalf("a line that is not JSON-RPC: %v", err)
	}
	if m, err := rc.Read(); err != nil || m.Method != "ok" {
		t.Fatalf("the line after it: %+v %v", m, err)
	}
	var out bytes.Buffer
	NewRPCConn(nil, &out).Write(&RPCMessage{Method: "x"})
	if out.String() != `{"jsonrpc":"2.0","method":"x"}`+"\n" {
		t.Fatalf("written: %q", out.String())
	}
}

// repeat is an endless reader of one byte, counting what was read.
type repeat struct {
	b    byte
	read int64
}

func (r *repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.b
	}
	r.read += int64(len(p))
	return len(p), nil
}
