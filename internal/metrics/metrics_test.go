package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// recordOneOfEach puts a sample in every family, so that each is gathered.
func recordOneOfEach(r *Registry) {
	r.CountDelegations("test", func() (map[[2]string]int, error) {
		return map[[2]string]int{{"running", "sshfs"}: 2, {"completed", "archive"}: 1}, nil
	})
	r.SFTPHandling()
	r.SFTPRequest("open", time.Millisecond)
	r.SFTPBytes("write", 10)
	r.SFTPError("no_such_file")
	r.FUSEOp("lookup", syscall.ENOENT)
	r.MountLost()
	r.MountBack(time.Second)
	r.Refused("DECLINED")
	r.AgentExited("completed")
	r.LeaseExpired()
	r.Archive("workspace_sent", 1<<20)
	r.CountSlots(5, func() (int, error) { return 2, nil })
}

// The dashboard in docs/ asks only for metrics the daemons have: a
// renamed metric would otherwise leave a panel silently empty.
func TestDashboardMetricsExist(t *testing.T) {
	r := New()
	recordOneOfEach(r)
	names, err := names(r)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if len(dash.Panels) < 10 {
		t.Fatalf("%d panels", len(dash.Panels))
	}
	metric := regexp.MustCompile(`\b(?:awcp|process|go)_[a-z_]+\b`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, name := range metric.FindAllString(tg.Expr, -1) {
				family := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if f, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(names, f) {
						family = f
					}
				}
				if !slices.Contains(names, family) {
					t.Errorf("panel %q asks for %s, which no daemon exports", p.Title, name)
				}
				used[family] = true
			}
		}
	}
	for _, name := range names {
		if strings.HasPrefix(name, "awcp_") && !used[name] {
			t.Errorf("%s is on no panel of the dashboard", name)
		}
	}
}

// GET /metrics answers in the Prometheus text format; nothing else is
// served, and the listener stops with its context.
func TestServe(t *testing.T) {
	r := New()
	recordOneOfEach(r)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, ln, slog.New(slog.DiscardHandler)) }()
	url := "http://" + ln.Addr().String()

	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`awcp_delegations{state="running",transport="sshfs"} 2`,
		`awcp_fuse_errors_total{errno="ENOENT",op="lookup"} 1`,
		`awcp_archive_bytes_count{direction="workspace_sent"} 1`,
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %q in\n%s", want, body)
		}
	}
	for _, req := range [][2]string{{"POST", "/metrics"}, {"GET", "/"}, {"GET", "/debug/pprof/"}} {
		rq, _ := http.NewRequest(req[0], url+req[1], nil)
		resp, err := http.DefaultClient.Do(rq)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("%s %s: %d", req[0], req[1], resp.StatusCode)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop with its context")
	}
	if _, err := http.Get(url + "/metrics"); err == nil {
		t.Fatal("still answering after the stop")
	}
}

// A census that cannot read the store makes the scrape say so, and the
// other metrics are still served.
func TestCensusError(t *testing.T) {
	r := New()
	r.CountDelegations("test", func() (map[[2]string]int, error) { return nil, errors.New("store closed") })
	r.LeaseExpired()
	if n := r.Sum("awcp_lease_expiries_total", nil); n != 1 {
		t.Fatalf("expiries = %v", n)
	}
	if _, err := names(r); err == nil || !strings.Contains(err.Error(), "store closed") {
		t.Fatalf("gather: %v", err)
	}
}

// names lists the metric families r gathers, sorted.
func names(r *Registry) ([]string, error) {
	mfs, err := r.reg.Gather()
	out := make([]string, 0, len(mfs))
	for _, mf := range mfs {
		out = append(out, mf.GetName())
	}
	sort.Strings(out)
	return out, err
}
