package control

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkRPCRead is what every JSON-RPC hop pays to read one message, the
// strict check of its keys included (untrusted.JSONKeys): a file write of
// 1 MiB of text, as an agent's fs/write_text_file carries it, and a small
// session/update.
func BenchmarkRPCRead(b *testing.B) {
	for _, tc := range []struct {
		name    string
		content string
	}{{"write-1MiB", strings.Repeat("some source text\n", 1<<16)}, {"update-small", "a line of the agent's output"}} {
		params, _ := json.Marshal(map[string]any{"sessionId": "s1", "path": "/p/a.go", "content": tc.content})
		line, _ := json.Marshal(RPCMessage{JSONRPC: "2.0", ID: json.RawMessage(`7`), Method: "fs/write_text_file", Params: params})
		line = append(line, '\n')
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				c := NewRPCConn(bytes.NewReader(line), nil)
				if _, err := c.Read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
