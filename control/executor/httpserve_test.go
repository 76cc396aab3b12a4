package executor_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
)

// countingBody is a request body of n bytes that counts what was taken.
type countingBody struct {
	left, taken int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.left))
	copy(p, strings.Repeat("x", n))
	b.left -= int64(n)
	atomic.AddInt64(&b.taken, int64(n))
	return n, nil
}

// bigInvite is the start of an INVITE whose prompt goes on for n bytes.
func bigInvite(n int64) io.Reader {
	return io.MultiReader(strings.NewReader(`{"version":"1","type":"INVITE","delegationId":"dlg_big","task":{"description":"d","prompt":"`),
		&countingBody{left: n})
}

// A client without a valid token cannot make the executor read more than
// MaxMessageBytes; with a wrong token, nothing is read at all. Each is
// refused with AUTH_FAILED, and the executor does not hold the body.
func TestExecutorReadsLittleBeforeAuthentication(t *testing.T) {
	f := executortest.New(t, "true", func(o *executor.Options) { o.Tokens = []string{"s3cret"} })
	for _, tt := range []struct {
		name, auth string
	}{
		{name: "no token"},
		{name: "wrong token", auth: "Bearer nope"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := &countingBody{left: 64 << 20}
			req, _ := http.NewRequest(http.MethodPost, f.Srv.URL+"/awcp", io.MultiReader(
				strings.NewReader(`{"version":"1","type":"INVITE","delegationId":"dlg_big","task":{"description":"d","prompt":"`), body))
			req.ContentLength = -1
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				var m control.Error
				json.NewDecoder(resp.Body).Decode(&m)
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized || m.Code != control.CodeAuthFailed {
					t.Errorf("answer %d %+v, want 401 AUTH_FAILED", resp.StatusCode, m)
				}
			}
			// What the client managed to send is at most the server's
			// limit plus the sockets' buffers; the old executor read 64 MiB.
			if taken := atomic.LoadInt64(&body.taken); taken > 8<<20 {
				t.Errorf("the executor read %d MiB of an unauthenticated body", taken>>20)
			}
		})
	}
}

// A body that trickles in is cut off: its first MiB has bodyGrace.
func TestExecutorCutsSlowBodies(t *testing.T) {
	slow(t)
	executor.SetBodyGrace(t, time.Second)
	f := executortest.New(t, "true", nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(f.Srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	io.WriteString(c, "POST /awcp HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
	answered := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(c).ReadString('\n')
		answered <- line
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case line := <-answered:
			if took := time.Since(start); took > 3*time.Second {
				t.Fatalf("a trickling body was cut after %s (grace 1 s)", took)
			}
			if line != "" && !strings.Contains(line, "408") {
				t.Fatalf("answer %q, want 408 or a closed connection", line)
			}
			return
		case <-tick.C:
			if time.Since(start) > 10*time.Second {
				t.Fatal("a trickling body is still read after 10 s")
			}
			io.WriteString(c, " ") // a byte at a time
		}
	}
}

// BenchmarkUnauthenticatedBodies posts three 250 MB INVITEs at once to an
// executor that requires a token, without one, and reports how much the
// process's heap grew meanwhile (target: 64 MiB at most; the old executor
// read up to 256 MiB of each).
func BenchmarkUnauthenticatedBodies(b *testing.B) {
	f := executortest.New(b, "true", func(o *executor.Options) { o.Tokens = []string{"s3cret"} }).URL()
	var peak uint64
	for b.Loop() {
		before := liveHeap()
		stop := make(chan struct{})
		sampled := make(chan uint64)
		go func() {
			var top uint64
			for {
				select {
				case <-stop:
					sampled <- top
					return
				case <-time.After(20 * time.Millisecond):
					top = max(top, liveHeap()-min(before, liveHeap()))
				}
			}
		}()
		done := make(chan struct{}, 3)
		for range 3 {
			go func() {
				defer func() { done <- struct{}{} }()
				req, _ := http.NewRequest(http.MethodPost, f+"/awcp", bigInvite(250<<20))
				req.ContentLength = -1
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		for range 3 {
			<-done
		}
		close(stop)
		peak = max(peak, <-sampled)
	}
	b.ReportMetric(float64(peak)/(1<<20), "MiB-growth")
}

// liveHeap is the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// The attacker of issue 41: 300 clients send a request with a wrong (or
// no) bearer token, a Content-Length of 100 and one body byte every
// 200 ms. Each is answered at once — AUTH_FAILED for a wrong token — and
// its connection closed; the no-token ones are cut by the body's grace.
// Meanwhile the owner, with the right token, is served. Without
// httpserve's closeUnread the wrong-token answers wait for the body and
// the 256 held connections lock the owner out.
func TestRefusedTricklersAreCutAtOnce(t *testing.T) {
	slow(t)
	executor.SetBodyGrace(t, 2*time.Second)
	f := executortest.New(t, "true", func(o *executor.Options) { o.Tokens = []string{"s3cret"} })
	addr := strings.TrimPrefix(f.Srv.URL, "http://")
	const clients = 300
	type outcome struct {
		auth   string
		line   string
		closed time.Duration // from the headers to the connection's end
	}
	results := make(chan outcome, clients)
	stop := make(chan struct{})
	defer close(stop)
	for i := range clients {
		auth := "Authorization: Bearer wrong\r\n"
		if i%10 == 0 {
			auth = "" // no token: the body is read under its grace
		}
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				results <- outcome{auth: auth, line: "dial: " + err.Error()}
				return
			}
			defer c.Close()
			start := time.Now()
			io.WriteString(c, "POST /awcp HTTP/1.1\r\nHost: x\r\n"+auth+"Content-Length: 100\r\n\r\n{")
			got := make(chan outcome, 1)
			go func() {
				br := bufio.NewReader(c)
				line, _ := br.ReadString('\n')
				io.Copy(io.Discard, br) // until the server closes
				got <- outcome{auth: auth, line: line, closed: time.Since(start)}
			}()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case o := <-got:
					results <- o
					return
				case <-stop:
					return
				case <-tick.C:
					io.WriteString(c, " ")
				}
			}
		}()
	}
	// The owner, while the tricklers are at it.
	time.Sleep(300 * time.Millisecond)
	ownerStart := time.Now()
	req, _ := http.NewRequest(http.MethodGet, f.URL()+"/awcp/probe", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the owner was not served beside 300 tricklers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		t.Fatal("the owner's token was refused")
	}
	if took := time.Since(ownerStart); took > 3*time.Second {
		t.Errorf("the owner waited %s beside 300 tricklers", took)
	}
	for range clients {
		select {
		case o := <-results:
			switch {
			case o.auth != "" && !strings.Contains(o.line, "401"):
				t.Fatalf("a wrong token got %q, want 401", o.line)
			case o.auth != "" && o.closed > 3*time.Second:
				t.Fatalf("a wrong token's connection was held %s after its answer", o.closed)
			case o.auth == "" && o.closed > 6*time.Second:
				t.Fatalf("a trickler without a token was held %s (grace 2 s)", o.closed)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("tricklers still connected after 20 s")
		}
	}
}
