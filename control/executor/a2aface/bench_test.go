package a2aface_test

import (
	"crypto/rand"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/awcp/awcp/control/executor/a2aface"
	"github.com/awcp/awcp/internal/heappeak"
)

// BenchmarkBodiesHeld is what the face holds while clients send it the
// largest messages it takes, more of them at once than it reads at once
// (Options.Bodies): the peak of the heap's growth, beside what was sent.
// A workspace's bytes go to a file as they arrive, so the heap grows with
// the rest of the messages (at most control.MaxMessageBytes each), not
// with their workspaces. Before they were diverted, 12 messages of 16 MiB
// grew it by 1,291 MiB here.
func BenchmarkBodiesHeld(b *testing.B) {
	const maxBody, clients = 16 << 20, 12
	srv, _ := serveFace(b, "true", a2aface.Options{MaxBody: maxBody})
	raw := make([]byte, (maxBody-64<<10)*3/4) // its base64 all but fills the bound
	rand.Read(raw)
	ws, sum := zipB64(b, map[string]string{"blob.bin": string(raw)})
	msg := send("hold", filePart(ws, "application/zip", sum))
	if len(msg) > maxBody {
		b.Fatalf("the message is %d bytes, past the bound", len(msg))
	}
	stop := heappeak.Start()
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, srv.URL+a2aface.Path, strings.NewReader(msg))
				req.Header.Set("Authorization", "Bearer "+token)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	b.ReportMetric(stop(), "peak-heap-growth-MiB")
	b.ReportMetric(float64(clients*len(msg))/(1<<20), "sent-MiB")
}
