package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
)

// rawGateway is a gateway's end of a session channel, line by line.
type rawGateway struct {
	conn  net.Conn
	lines *bufio.Scanner
}

func newRawGateway(t *testing.T, channels chan<- control.SessionChannel, fresh bool) *rawGateway {
	gw, ex := net.Pipe()
	channels <- control.SessionChannel{Conn: ex, Fresh: fresh}
	g := &rawGateway{conn: gw, lines: bufio.NewScanner(gw)}
	g.lines.Buffer(nil, 1<<20)
	if m := g.read(t); m.Method != "$/awcp/resume" {
		t.Fatalf("the channel's first line: %+v", m)
	}
	return g
}

func (g *rawGateway) send(line string) { io.WriteString(g.conn, line+"\n") }

func (g *rawGateway) read(t *testing.T) *control.RPCMessage {
	t.Helper()
	g.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if !g.lines.Scan() {
		t.Fatalf("the channel ended: %v", g.lines.Err())
	}
	var m control.RPCMessage
	if err := json.Unmarshal(g.lines.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// A gateway dies (its connection cut, nothing acknowledged) at every
// point of a turn — after each message of it — and a new gateway takes
// the session over and prompts again. The new gateway is never sent an
// answer the old one's requests got before it came (an old turn's end
// would pass for its prompt's), nor a permission request the old one
// answered; it is sent one the old one left unanswered, once; and its own
// prompt's answer comes after its own turn's output.
func TestTakeOverAtEveryPointOfATurn(t *testing.T) {
	const turnMessages = 7 // 6 updates and a permission request, then the answer
	for kill := 0; kill <= turnMessages+1; kill++ {
		t.Run(fmt.Sprint(kill), func(t *testing.T) {
			wd := workDir(t)
			os.WriteFile(filepath.Join(wd, "notes.txt"), []byte("notes\n"), 0o644)
			channels := make(chan control.SessionChannel, 1)
			w := Worker{Command: sessionAgentEnv + "=1 exec '" + os.Args[0] + "'", KillGrace: time.Second}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				w.Session(ctx, agent.Task{DelegationID: "dlg_t", WorkDir: wd, AccessMode: "rw"}, agent.Hooks{}, channels, 20*time.Second)
			}()
			defer func() { cancel(); <-done }()

			old := newRawGateway(t, channels, false)
			old.send(`{"jsonrpc":"2.0","id":"gw-1","method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`)
			old.read(t)
			old.send(`{"jsonrpc":"2.0","id":"gw-2","method":"session/new","params":{"cwd":"/p","mcpServers":[]}}`)
			old.read(t)
			old.send(`{"jsonrpc":"2.0","id":"gw-3","method":"session/prompt","params":{"sessionId":"sess-1","prompt":[{"type":"text","text":"one"}]}}`)
			answeredPermission := false
			for i := 0; i < kill; i++ {
				m := old.read(t)
				if m.Method == "session/request_permission" {
					old.send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"outcome":{"outcome":"selected","optionId":"yes"}}}`)
					answeredPermission = true
				}
				if string(m.ID) == `"gw-3"` {
					break
				}
			}
			old.conn.Close() // killed: nothing more read, nothing acknowledged
			time.Sleep(200 * time.Millisecond)

			gw := newRawGateway(t, channels, true)
			gw.send(`{"jsonrpc":"2.0","id":"gw2-1","method":"session/prompt","params":{"sessionId":"sess-1","prompt":[{"type":"text","text":"two"}]}}`)
			var permissions int
			var text strings.Builder
			for {
				m := gw.read(t)
				switch {
				case m.Method == "session/request_permission":
					permissions++
					gw.send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"outcome":{"outcome":"selected","optionId":"yes"}}}`)
				case m.Method == "session/update":
					text.Write(m.Params)
				case string(m.ID) == `"gw-3"` && answeredPermission:
					t.Fatalf("the new gateway was sent the old turn's answer, which came before it did")
				}
				if string(m.ID) == `"gw2-1"` {
					if !strings.Contains(text.String(), "turns so far: 2") {
						t.Errorf("the new prompt was answered before its turn's output:\n%s", text.String())
					}
					break
				}
			}
			if want := map[bool]int{true: 1, false: 2}[answeredPermission]; permissions != want {
				t.Errorf("the new gateway was asked %d permissions, want %d (the old one answered its own: %v)", permissions, want, answeredPermission)
			}
			gw.send(`{"jsonrpc":"2.0","method":"$/awcp/bye"}`)
			gw.conn.Close()
		})
	}
}
