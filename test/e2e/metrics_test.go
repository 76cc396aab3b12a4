package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// freeAddr is a loopback address nothing listens on, for a daemon flag
// that takes a fixed address. It comes from below the kernel's ephemeral
// range (32768 and up here), which bind(:0) and connect(2) take their
// ports from: a port of the range freed a moment ago could be another
// test's connection's by the time the daemon binds it, with tests running
// side by side. Each call takes the next port this process has not handed
// out, from an offset of its pid's, so two runs at once rarely meet.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 2000 {
		port := 20000 + (os.Getpid()*7+int(nextFreePort.Add(1)))%12000
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken, by a daemon of another run
		}
		ln.Close()
		return ln.Addr().String()
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return ""
}

var nextFreePort atomic.Int64

// scrape reads a Prometheus text page into sample → value, the sample as
// written (name{labels}).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape %s: %d\n%s", addr, resp.StatusCode, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape %s: line %q", addr, line)
		}
		out[line[:i]] = v
	}
	return out
}

// sum adds the samples of name whose labels include every one of labels
// (each `key="value"`).
func sum(samples map[string]float64, name string, labels ...string) float64 {
	var total float64
sample:
	for s, v := range samples {
		if s != name && !strings.HasPrefix(s, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(s, l) {
				continue sample
			}
		}
		total += v
	}
	return total
}

// TestMetrics: both daemons, run with --metrics-listen, count what an
// operator watches — delegations by state and transport, refusals by
// code, the live mount's SFTP and FUSE traffic, agent exits and archive
// sizes — and no delegation id or path is in any label.
func TestMetrics(t *testing.T) {
	parallel(t)
	fsMetrics := freeAddr(t)
	x := startExecutor(t, `echo written > out.txt; cat in.txt >> out.txt`, "--token", "secret", "--metrics-listen", fsMetrics)
	c := newCtl(t)
	// Picked just before it is bound: a port picked early can meanwhile
	// be taken as the source port of a connection (the executor's start
	// makes some), and the bind then fails.
	ctlMetrics := freeAddr(t)
	daemonLog, _ := c.serve("--ssh-listen", "127.0.0.1:0", "--metrics-listen", ctlMetrics)
	defer func() {
		if t.Failed() {
			t.Logf("awcp-ctl serve log:\n%s", daemonLog.String())
		}
	}()

	dirs, ids := map[string]string{}, []string{}
	for _, transport := range []string{"sshfs", "archive"} {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"in.txt": "input\n"})
		dirs[transport] = dir
		r := c.run("export", dir, "--peer", x.url, "--token", "secret", "--prompt", "p", "--transport", transport, "--background")
		if r.code != 0 {
			t.Fatalf("export over %s: %d\n%s%s", transport, r.code, r.stdout, r.stderr)
		}
		id := strings.TrimSpace(r.stdout)
		ids = append(ids, id)
		if r := c.run("output", id, "--block", "--timeout", "30s"); r.code != 0 {
			t.Fatalf("output over %s: %d\n%s%s", transport, r.code, r.stdout, r.stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "written\ninput\n" {
			t.Fatalf("out.txt over %s = %q", transport, b)
		}
	}
	// Refused by this side's admission, and by the executor's.
	if r := c.run("export", t.TempDir(), "--peer", x.url, "--token", "secret", "--prompt", "p", "--access", "rwx", "--background"); r.code == 0 {
		t.Fatalf("--access rwx was taken:\n%s", r.stdout)
	}
	if r := c.run("export", t.TempDir(), "--peer", x.url, "--token", "wrong", "--prompt", "p", "--transport", "archive"); r.code == 0 {
		t.Fatalf("a wrong token was taken:\n%s", r.stdout)
	}

	dlg, exe := scrape(t, ctlMetrics), scrape(t, fsMetrics)
	for _, tc := range []struct {
		side    string
		samples map[string]float64
		name    string
		labels  []string
		min     float64
	}{
		{"delegator", dlg, "awcp_delegations", []string{`state="completed"`, `transport="sshfs"`}, 1},
		{"delegator", dlg, "awcp_delegations", []string{`state="completed"`, `transport="archive"`}, 1},
		{"delegator", dlg, "awcp_admissions_refused_total", []string{`code="USAGE"`}, 1},
		{"delegator", dlg, "awcp_sftp_request_seconds_count", []string{`op="open"`}, 1},
		{"delegator", dlg, "awcp_sftp_request_seconds_count", []string{`op="write"`}, 1},
		{"delegator", dlg, "awcp_sftp_bytes_total", []string{`op="write"`}, float64(len("written\ninput\n"))},
		{"delegator", dlg, "awcp_archive_bytes_count", []string{`direction="workspace_sent"`}, 1},
		{"delegator", dlg, "awcp_archive_bytes_count", []string{`direction="result_received"`}, 1},
		{"executor", exe, "awcp_delegations", []string{`state="completed"`, `transport="sshfs"`}, 1},
		{"executor", exe, "awcp_delegations", []string{`state="completed"`, `transport="archive"`}, 1},
		{"executor", exe, "awcp_admissions_refused_total", []string{`code="AUTH_FAILED"`}, 1},
		{"executor", exe, "awcp_executor_slots", []string{`kind="max"`}, 5},
		{"executor", exe, "awcp_executor_slots", []string{`kind="free"`}, 5}, // all ended
		{"executor", exe, "awcp_agent_exits_total", []string{`outcome="completed"`}, 2},
		{"executor", exe, "awcp_fuse_operations_total", []string{`op="create"`}, 1},
		{"executor", exe, "awcp_fuse_operations_total", []string{`op="write"`}, 1},
		{"executor", exe, "awcp_archive_bytes_count", []string{`direction="workspace_received"`}, 1},
		{"executor", exe, "awcp_archive_bytes_count", []string{`direction="result_sent"`}, 1},
	} {
		if got := sum(tc.samples, tc.name, tc.labels...); got < tc.min {
			t.Errorf("%s: %s%v = %v, want at least %v", tc.side, tc.name, tc.labels, got, tc.min)
		}
	}
	if n := sum(exe, "awcp_fuse_errors_total", `op="write"`); n != 0 {
		t.Errorf("executor: %v FUSE write errors", n)
	}
	for side, samples := range map[string]map[string]float64{"delegator": dlg, "executor": exe} {
		for s := range samples {
			for _, secret := range append(ids, dirs["sshfs"], dirs["archive"], "/tmp") {
				if strings.Contains(s, secret) {
					t.Errorf("%s: a delegation id or path in a label: %s", side, s)
				}
			}
		}
	}
}
