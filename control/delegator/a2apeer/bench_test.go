package a2apeer

import (
	"archive/zip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/heappeak"
	"github.com/awcp/awcp/lease"
)

// bigAgent is an A2A agent (JSON-RPC, no streaming) of version 1.0 or
// 0.3 that reads what it is sent to its end, counting its bytes, and
// answers every call with a completed task whose artifact holds files file
// parts of each bytes, written as they are encoded (the agent holds none
// of it).
func bigAgent(b *testing.B, version string, files, each int, got *atomic.Int64) *httptest.Server {
	chunk := make([]byte, 48<<10)
	rand.Read(chunk)
	var self string
	v1 := version == "1.0"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			if v1 {
				fmt.Fprintf(w, `{"name":"big","description":"d","version":"1","supportedInterfaces":[{"url":%q,"protocolBinding":"JSONRPC","protocolVersion":"1.0"}],`+
					`"capabilities":{},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[]}`, self+"/a2a")
				return
			}
			fmt.Fprintf(w, `{"name":"big","description":"d","url":%q,"version":"1","protocolVersion":"0.3.0",`+
				`"preferredTransport":"JSONRPC","capabilities":{},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[]}`, self+"/a2a")
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
		if v1 {
			io.WriteString(w, `{"jsonrpc":"2.0","id":null,"result":{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_COMPLETED"},"artifacts":[{"artifactId":"a","name":"changes","parts":[`)
		} else {
			io.WriteString(w, `{"jsonrpc":"2.0","id":null,"result":{"kind":"task","id":"t1","contextId":"c1","status":{"state":"completed"},"artifacts":[{"artifactId":"a","name":"changes","parts":[`)
		}
		for i := range files {
			if i > 0 {
				io.WriteString(w, ",")
			}
			if v1 {
				fmt.Fprintf(w, `{"filename":"out/f%d.bin","raw":"`, i)
			} else {
				fmt.Fprintf(w, `{"kind":"file","file":{"name":"out/f%d.bin","bytes":"`, i)
			}
			enc := base64.NewEncoder(base64.StdEncoding, w)
			for left := each; left > 0; left -= len(chunk) {
				enc.Write(chunk[:min(left, len(chunk))])
			}
			enc.Close()
			if v1 {
				io.WriteString(w, `"}`)
			} else {
				io.WriteString(w, `"}}`)
			}
		}
		if v1 {
			io.WriteString(w, `]}]}}}`)
		} else {
			io.WriteString(w, `]}]}}`)
		}
	}))
	self = srv.URL
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkA2AHeld is what the delegator holds while it sends an A2A
// agent a workspace of 100 MiB and takes back an answer of 250 MiB of
// files (10 of 25 MiB), building the result from them: the peak of the
// heap's growth. Both go through files as they are read and written;
// before, the workspace was read whole, base64'd and marshalled again,
// and the answer decoded whole, then every file into a map: the heap grew
// 2,061 MiB here (27 s an operation), now 2.4 MiB (6 s). Both versions:
// 1.0's parts carry a file's bytes as "raw", 0.3's in "file".
func BenchmarkA2AHeld(b *testing.B) {
	for _, version := range []string{"1.0", "0.3"} {
		b.Run(version, func(b *testing.B) { benchmarkA2AHeld(b, version) })
	}
}

func benchmarkA2AHeld(b *testing.B, version string) {
	const wsMiB, files, eachMiB = 100, 10, 25
	var got atomic.Int64
	agent := bigAgent(b, version, files, eachMiB<<20, &got)
	dir := b.TempDir()
	src := filepath.Join(dir, "ws.zip")
	zf, _ := os.Create(src)
	zw := zip.NewWriter(zf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "blob.bin", Method: zip.Store})
	chunk := make([]byte, 1<<20)
	for range wsMiB {
		rand.Read(chunk)
		w.Write(chunk)
	}
	zw.Close()
	zf.Close()
	p := &Peer{Dir: filepath.Join(dir, "peer")}
	var grew float64
	b.ResetTimer()
	for i := range b.N {
		del := &lease.Delegation{Lease: lease.Lease{ID: fmt.Sprintf("bench-%d", i), AccessMode: control.AccessRW},
			Peer: agent.URL, Prompt: "work"}
		ws := filepath.Join(dir, "ws-copy.zip")
		copyZip(b, src, ws)
		if err := p.Keep(del, ws); err != nil {
			b.Fatal(err)
		}
		stop := heappeak.Start()
		var done *control.Event
		err := p.Follow(context.Background(), del, 0, func(string, string) error { return nil }, func(_ uint64, ev *control.Event) error {
			if ev.Type == control.EventDone || ev.Type == control.EventError {
				done = ev
				if ev.ResultFile != "" {
					fi, err := os.Stat(ev.ResultFile)
					if err != nil || fi.Size() < files*eachMiB<<20 {
						return fmt.Errorf("the result: %v %v", fi, err)
					}
				}
			}
			return nil
		})
		grew = max(grew, stop())
		if err != nil || done == nil || done.Type != control.EventDone {
			b.Fatalf("follow: %v %+v", err, done)
		}
		p.Forget(del.ID)
	}
	b.StopTimer()
	b.ReportMetric(grew, "peak-heap-growth-MiB")
	b.ReportMetric(float64(got.Load())/float64(b.N)/(1<<20), "sent-MiB")
	b.ReportMetric(files*eachMiB, "answer-MiB")
	if left, _ := os.ReadDir(p.Dir); len(left) > 0 {
		b.Errorf("left in the peer's dir: %v", left)
	}
}

func copyZip(b *testing.B, from, to string) {
	in, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	io.Copy(out, in)
}
