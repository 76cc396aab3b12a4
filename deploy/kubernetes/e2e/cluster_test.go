package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cluster is the one cluster.sh started: where its kubectl, its kubeconfig
// and the binaries built from this tree are (cluster.sh writes them in its
// env file, and `make k8s-e2e` exports them).
type cluster struct {
	kubectlBin string
	bin        string // awcp-ctl, awcp-fs, built static from this tree
	dnsServer  string // CoreDNS, at the node's address
	pvDir      string // where the test's persistent volumes live
	image      string // the executor's image, imported into the node's containerd
	logs       string
}

func clusterFromEnv(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{
		kubectlBin: os.Getenv("AWCP_K8S_KUBECTL"),
		bin:        os.Getenv("AWCP_K8S_BIN"),
		dnsServer:  os.Getenv("AWCP_K8S_DNS"),
		pvDir:      os.Getenv("AWCP_K8S_PV_DIR"),
		image:      os.Getenv("AWCP_K8S_IMAGE"),
		logs:       os.Getenv("AWCP_K8S_LOGS"),
	}
	if c.kubectlBin == "" || c.bin == "" || c.dnsServer == "" || c.pvDir == "" || c.image == "" || os.Getenv("KUBECONFIG") == "" {
		t.Fatal("no cluster: this test runs against the cluster deploy/kubernetes/e2e/cluster.sh starts; run `make k8s-e2e`")
	}
	return c
}

// kubectl runs kubectl against the cluster, bounded by a minute.
func (c *cluster) kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.kubectlBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func (c *cluster) mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.kubectl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitFor polls cond every half second until it holds or limit passes.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		last = state
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v; last seen: %s", what, limit, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readyReplicas is the StatefulSet's count of Ready pods.
func (c *cluster) readyReplicas() (bool, string) {
	out, err := c.kubectl("-n", "awcp", "get", "statefulset", "awcp-executor", "-o", "jsonpath={.status.readyReplicas}")
	if err != nil {
		return false, err.Error()
	}
	return strings.TrimSpace(out) == "3", "readyReplicas " + out
}

// executor is one pod's identity, as `awcp-fs id` prints it in the pod.
type executor struct {
	pod, key, agentID string
}

func (c *cluster) identity(t *testing.T, pod string) executor {
	t.Helper()
	out := c.mustKubectl(t, "-n", "awcp", "exec", pod, "-c", "awcp-fs", "--", "awcp-fs", "id", "--state-dir", "/var/lib/awcp")
	e := executor{pod: pod}
	e.key, e.agentID = parseIdentity(out)
	if e.key == "" || e.agentID == "" {
		t.Fatalf("awcp-fs id in %s printed no key or agent id:\n%s", pod, out)
	}
	return e
}

// parseIdentity reads `awcp-fs id`'s key and agent id lines.
func parseIdentity(out string) (key, agentID string) {
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "ssh-ed25519 "):
			key = strings.TrimSpace(line)
		case strings.HasPrefix(line, "agent id "):
			agentID = strings.TrimSpace(strings.TrimPrefix(line, "agent id "))
		}
	}
	return key, agentID
}

// dumpOnFailure writes what explains a failure — the pods as the cluster
// sees them, their logs, and the delegator daemon's — to files beside the
// cluster's own logs, and names them: printed here, they would push the
// failure itself out of the tail a CI log shows.
func (c *cluster) dumpOnFailure(t *testing.T, daemonLog *lockedBuffer) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dir := filepath.Join(c.logs, "failure-"+time.Now().UTC().Format("20060102T150405"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Logf("keeping what explains the failure: %v", err)
			return
		}
		var b strings.Builder
		for _, args := range [][]string{
			{"-n", "awcp", "get", "pods,pvc,endpointslices", "-o", "wide"},
			{"-n", "awcp", "describe", "pods"},
			{"-n", "awcp", "logs", "-l", "app.kubernetes.io/name=awcp-executor", "--tail", "200", "--prefix"},
		} {
			out, err := c.kubectl(args...)
			fmt.Fprintf(&b, "$ kubectl %s\n%s%v\n\n", strings.Join(args, " "), out, err)
		}
		for name, text := range map[string]string{"cluster.txt": b.String(), "delegator-daemon.log": daemonLog.String()} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Logf("keeping %s: %v", name, err)
			}
		}
		t.Logf("the pods, their logs and the delegator daemon's are in %s; the cluster's own logs in %s", dir, c.logs)
	})
}

// lockedBuffer is a daemon's stderr, read while it writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// delegator is awcp-ctl on this machine, outside the cluster, with a state
// directory of the test's own.
type delegator struct {
	bin, state string
	browse     []string // --dns-server: the cluster's DNS
}

type result struct {
	code           int
	stdout, stderr string
}

func (d *delegator) ctl(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(d.bin, "awcp-ctl"), args...)
	cmd.Env = append(os.Environ(), "AWCP_STATE_DIR="+d.state)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("awcp-ctl %v: %v", args, err)
	}
	return r
}

// serve runs the delegator's daemon (which holds the --background
// delegations) until the test ends.
func (d *delegator) serve(t *testing.T) *lockedBuffer {
	t.Helper()
	cmd := exec.Command(filepath.Join(d.bin, "awcp-ctl"), "serve")
	cmd.Env = append(os.Environ(), "AWCP_STATE_DIR="+d.state)
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	waitFor(t, "the delegator's daemon", 10*time.Second, func() (bool, string) {
		_, err := os.Stat(filepath.Join(d.state, "ctl.sock"))
		return err == nil, fmt.Sprint(err)
	})
	return log
}

// delegation is a row of `awcp-ctl status --json`.
type delegation struct {
	ID          string    `json:"id"`
	State       string    `json:"state"`
	Transport   string    `json:"transport"`
	PeerAgentID string    `json:"peerAgentId"`
	LocalDir    string    `json:"localDir"`
	CreatedAt   time.Time `json:"createdAt"`
	Notes       []string  `json:"notes"`
	Failure     *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"failure"`
	Transitions []struct {
		To string    `json:"to"`
		At time.Time `json:"at"`
	} `json:"transitions"`
}

func (x delegation) ended() bool {
	switch x.State {
	case "completed", "error", "cancelled", "expired":
		return true
	}
	return false
}

// reached is when x first entered state (zero if it never did).
func (x delegation) reached(state string) time.Time {
	for _, tr := range x.Transitions {
		if tr.To == state {
			return tr.At
		}
	}
	return time.Time{}
}

func (d *delegator) status(t *testing.T) map[string]delegation {
	t.Helper()
	r := d.ctl(t, "status", "--json")
	var rows []delegation
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("status --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	byID := map[string]delegation{}
	for _, x := range rows {
		byID[x.ID] = x
	}
	return byID
}

// waitEnded waits for each of ids to end and returns their rows.
func (d *delegator) waitEnded(t *testing.T, limit time.Duration, ids ...string) []delegation {
	t.Helper()
	var rows []delegation
	waitFor(t, fmt.Sprintf("%d delegations ending", len(ids)), limit, func() (bool, string) {
		all := d.status(t)
		rows = rows[:0]
		for _, id := range ids {
			x, ok := all[id]
			if !ok || !x.ended() {
				return false, fmt.Sprintf("%s: %+v", id, x)
			}
			rows = append(rows, x)
		}
		return true, ""
	})
	return rows
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// loopbackExecutor is awcp-fs serving on this machine's loopback, with the
// pods' agent, authorizing delegatorKey: the baseline a delegation into a
// pod is compared with.
type loopbackExecutor struct {
	url, key string
}

func localExecutor(t *testing.T, c *cluster, delegatorKey string) loopbackExecutor {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	state, work := t.TempDir(), t.TempDir()
	id := exec.Command(filepath.Join(c.bin, "awcp-fs"), "id", "--state-dir", state)
	out, err := id.Output()
	if err != nil {
		t.Fatalf("awcp-fs id: %v", err)
	}
	e := loopbackExecutor{url: "https://" + addr}
	e.key, _ = parseIdentity(string(out))
	auth := filepath.Join(t.TempDir(), "authorized-delegators")
	if err := os.WriteFile(auth, []byte(delegatorKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := exec.Command(filepath.Join(c.bin, "awcp-fs"), "serve", "--listen", addr, "--state-dir", state, "--work-root", work,
		"--authorized-delegators", auth, "--agent-cmd", agentScript, "--advertise=false")
	log := &lockedBuffer{}
	serve.Stdout, serve.Stderr = log, log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
		if t.Failed() {
			f := filepath.Join(c.logs, "loopback-executor.log")
			if err := os.WriteFile(f, []byte(log.String()), 0o644); err != nil {
				t.Logf("keeping the loopback executor's log: %v", err)
			} else {
				t.Logf("the loopback executor's log is %s", f)
			}
		}
	})
	waitFor(t, "the loopback executor", 15*time.Second, func() (bool, string) {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
	return e
}
