//go:build linux

package delegator

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/lease"
)

// outage is a TCP proxy in front of an executor: its connections can be
// cut and new ones refused, as a network outage would, and it can be
// pointed at another executor.
type outage struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	down   bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newOutage(t *testing.T, target string) *outage {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &outage{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	o.wg.Add(1)
	go o.accept()
	t.Cleanup(func() { ln.Close(); o.cut(); o.wg.Wait() })
	return o
}

func (o *outage) url() string { return "http://" + o.ln.Addr().String() }

func (o *outage) accept() {
	defer o.wg.Done()
	for {
		c, err := o.ln.Accept()
		if err != nil {
			return
		}
		o.mu.Lock()
		down, target := o.down, o.target
		o.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		o.mu.Lock()
		o.conns[c], o.conns[up] = struct{}{}, struct{}{}
		o.mu.Unlock()
		o.wg.Add(2)
		go func() { defer o.wg.Done(); io.Copy(up, c); up.Close() }()
		go func() { defer o.wg.Done(); io.Copy(c, up); c.Close() }()
	}
}

// cut closes every connection and refuses new ones until restore.
func (o *outage) cut() {
	o.mu.Lock()
	o.down = true
	for c := range o.conns {
		c.Close()
		delete(o.conns, c)
	}
	o.mu.Unlock()
}

// restore lets connections through again, to target if it is set.
func (o *outage) restore(target string) {
	o.mu.Lock()
	o.down = false
	if target != "" {
		o.target = target
	}
	o.mu.Unlock()
}

// TestChannelStates: the delegator tells apart, records and reports what
// the executor's side is doing — running, idle, unreachable since when,
// missing — without failing the delegation; a reconnection resumes after
// the last event seen and records the events the executor no longer had.
func TestChannelStates(t *testing.T) {
	slow(t)
	gates := t.TempDir()
	agent := `echo start; sleep 1; echo after-quiet; ` +
		`while [ ! -e ` + gates + `/lines ]; do sleep 0.05; done; i=0; while [ $i -lt 30 ]; do echo line$i; i=$((i+1)); done; ` +
		`while [ ! -e ` + gates + `/end ]; do sleep 0.05; done; echo end`
	x := executortest.New(t, agent, func(o *executor.Options) { o.ProgressKept = 5 })
	other := executortest.New(t, "true", nil) // knows nothing of the delegation
	net := newOutage(t, strings.TrimPrefix(x.URL(), "http://"))

	var mu sync.Mutex
	var said []string // the channel events given to Progress
	dlg, store := newArchiveDelegator(t, nil, func(o *Options) {
		o.IdleAfter = 400 * time.Millisecond
		o.Progress = func(_ string, ev *control.Event) {
			if ev.Type == control.EventChannel {
				mu.Lock()
				said = append(said, ev.Status+": "+ev.Message)
				mu.Unlock()
			}
		}
	})
	dir := t.TempDir()
	d, done := runExport(t, dlg, ExportRequest{Dir: dir, Peer: net.url(), PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive})
	channel := func(want string, within time.Duration) *lease.Delegation {
		t.Helper()
		for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
			cur, err := store.Delegation(d.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cur.Channel != nil && cur.Channel.State == want {
				if cur.State != lease.Running {
					t.Fatalf("channel %s with the lease %s", want, cur.State)
				}
				return cur
			}
			if time.Now().After(deadline) {
				t.Fatalf("channel %+v, want %s within %s", cur.Channel, want, within)
			}
		}
	}
	channel(lease.ChannelRunning, 10*time.Second)
	channel(lease.ChannelIdle, 3*time.Second)    // the agent's second of silence
	channel(lease.ChannelRunning, 3*time.Second) // after-quiet

	// An outage: unreachable, since when, and not failed.
	cutAt := time.Now()
	net.cut()
	cur := channel(lease.ChannelUnreachable, 5*time.Second)
	if cur.Channel.Since.Before(cutAt.Add(-time.Second)) || cur.Channel.Detail == "" {
		t.Fatalf("unreachable %+v (cut at %s)", cur.Channel, cutAt)
	}
	// Meanwhile the agent prints 30 lines; the executor keeps 5.
	os.WriteFile(filepath.Join(gates, "lines"), nil, 0o644)
	x.WaitEvents(d.ID, func(evs []string) bool { return strings.Contains(strings.Join(evs, " "), "line29") })
	net.restore("")
	cur = channel(lease.ChannelRunning, 10*time.Second)
	for deadline := time.Now().Add(5 * time.Second); len(cur.Gaps) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no gap recorded; log %+v", cur.ChannelLog)
		}
		cur, _ = store.Delegation(d.ID)
	}
	if g := cur.Gaps[0]; g.From != 4 || g.To != 28 {
		t.Fatalf("gap %+v, want events 4–28 (start, after-quiet and the first 25 lines were seen or dropped)", g)
	}

	// Pointed at an executor that does not know it: missing, not failed.
	net.cut()
	net.restore(strings.TrimPrefix(other.URL(), "http://"))
	channel(lease.ChannelMissing, 10*time.Second)
	net.cut()
	net.restore(strings.TrimPrefix(x.URL(), "http://"))
	channel(lease.ChannelRunning, 10*time.Second)

	os.WriteFile(filepath.Join(gates, "end"), nil, 0o644)
	end := <-done
	if end.State != lease.Completed {
		t.Fatalf("ended %s: %+v", end.State, end.Failure)
	}
	var log []string
	for _, c := range end.ChannelLog {
		log = append(log, c.State)
	}
	want := "running idle running unreachable running running missing running finished-not-applied"
	if got := strings.Join(log, " "); got != want {
		t.Errorf("channel log %q, want %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(said, "\n"), "resumed after event 3; events 4–28 were lost") {
		t.Errorf("the gap was not reported:\n%s", strings.Join(said, "\n"))
	}
}
