package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
)

// floodingExecutor answers initialize, then floods session/update
// notifications, 64 KiB each, and never answers session/new:
// for as long as the gateway reads them, up to 2000.
type floodingExecutor struct {
	fakeExecutor
	sent atomic.Int64
}

func (f *floodingExecutor) AttachSession(ctx context.Context, id string, link *control.SessionLink, first bool) error {
	gw, ex := net.Pipe()
	rc := control.NewRPCConn(ex, ex)
	update := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` +
		strings.Repeat("x", 64<<10) + `"}}}}` + "\n"
	go func() {
		io.WriteString(ex, `{"jsonrpc":"2.0","method":"$/awcp/resume","params":{"received":0}}`+"\n")
		for {
			m, err := rc.Read()
			if errors.Is(err, control.ErrNotRPC) {
				continue
			}
			if err != nil {
				return
			}
			switch m.Method {
			case "initialize":
				io.WriteString(ex, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"protocolVersion":1}}`+"\n")
			case "session/new":
				go func() { // reading on: the link acknowledges what it got
					defer ex.Close()
					for f.sent.Load() < 2000 {
						if _, err := io.WriteString(ex, update); err != nil {
							return
						}
						f.sent.Add(1)
					}
				}()
			}
		}
	}()
	received, grc, err := control.ReadResume(gw)
	if err != nil {
		return err
	}
	return link.Attach(gw, grc, received, false)
}

// An executor that floods the gateway with session/update before it
// answers session/new (nothing of which the editor may hear yet) costs
// the gateway a bounded hold: past it, the session fails for the editor
// with a reason, and the gateway reads no more of the flood.
func TestFloodBeforeAnswerIsBounded(t *testing.T) {
	f := &floodingExecutor{}
	g := &Gateway{Delegator: f, Request: delegator.ExportRequest{Peer: "http://x"}}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go g.Serve(context.Background(), inR, outW)
	defer inW.Close()
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(60 * time.Second):
			t.Fatalf("the editor heard nothing; the executor sent %d notifications", f.sent.Load())
		}
		return ""
	}
	io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`+"\n")
	next()
	io.WriteString(inW, `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"`+t.TempDir()+`","mcpServers":[]}}`+"\n")
	answer := next()
	if !strings.Contains(answer, `"error"`) || !strings.Contains(answer, "before answering session/new") {
		t.Fatalf("session/new during the flood: %s", answer)
	}
	time.Sleep(100 * time.Millisecond)
	if n := f.sent.Load(); n > maxEarly+2 {
		t.Errorf("the gateway read %d notifications before giving up; it holds %d at most", n, maxEarly)
	}
}

// A line from the editor that is no JSON gets JSON-RPC's parse error, and
// the gateway reads on: the editor's next request is answered.
func TestMalformedLineIsAnsweredAndSurvived(t *testing.T) {
	g := &Gateway{Delegator: &fakeExecutor{}, Request: delegator.ExportRequest{Peer: "http://x"}}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go g.Serve(context.Background(), inR, outW)
	defer inW.Close()
	sc := bufio.NewScanner(outR)
	go io.WriteString(inW, "{not json\n"+`{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`+"\n")
	var got []string
	for len(got) < 2 && sc.Scan() {
		got = append(got, sc.Text())
	}
	if len(got) != 2 || !strings.Contains(got[0], `"code":-32700`) || !strings.Contains(got[0], `"id":null`) || !strings.Contains(got[1], `"id":7`) {
		t.Errorf("the gateway answered %q", got)
	}
}
