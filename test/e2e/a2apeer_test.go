package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// geminiA2A is Gemini CLI's A2A server, from the npm registry.
const geminiA2A = "@google/gemini-cli-a2a-server@0.25.2"

// startNode runs testdata/script with node in modules (through prefix,
// e.g. `ip netns exec NS`), with env, and returns the port it says it
// listens on. It is killed at the test's end.
func startNode(t *testing.T, modules, script string, env []string, prefix ...string) string {
	t.Helper()
	return startListening(t, append(prefix, "node", placeScript(t, modules, script)), env)
}

// startListening runs argv with env and waits for its "listening on
// PORT" line; it is killed at the test's end.
func startListening(t *testing.T, argv, env []string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr lockedLog
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s's stderr (its end):\n%s", filepath.Base(argv[len(argv)-1]), tail(stderr.String(), 3000))
		}
	})
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				port <- strings.TrimSpace(p)
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case p := <-port:
		return p
	case <-time.After(60 * time.Second):
		t.Fatalf("%v never said it listens:\n%s", argv, tail(stderr.String(), 3000))
	}
	return ""
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestExportToAnA2AExecutor: `awcp-ctl export --peer a2a:URL` to an awcp
// executor's A2A face: the task and the directory go as one message, the
// artifacts come back through the same review (applied; or staged, shown
// by diff, then applied), both ids are kept in the record; a permission
// the agent asks is answered with `awcp-ctl permit`, as for an AWCP peer.
func TestExportToAnA2AExecutor(t *testing.T) {
	parallel(t)
	const token = "a2a-peer-token-1f3e"
	x := startExecutor(t, a2aAgent, "--token-file", tokenFile(t, token), "--transports", "archive")
	c := newCtl(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("old a\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "gone.txt"), []byte("bye\n"), 0o644)
	peer := "a2a:" + x.url
	r := c.run("export", dir, "--peer", peer, "--token-file", tokenFile(t, token), "--prompt", "tidy", "--json")
	if r.code != 0 {
		t.Fatalf("export to the A2A face: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "changed by the agent\n" {
		t.Errorf("a.txt: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "made.txt")); string(b) != "made\n" {
		t.Errorf("made.txt: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "gone.txt")); err == nil {
		t.Errorf("gone.txt was not removed")
	}
	var out struct {
		PeerProtocol  string `json:"peerProtocol"`
		PeerTaskID    string `json:"peerTaskId"`
		PeerContextID string `json:"peerContextId"`
		State         string `json:"state"`
	}
	d := c.only()
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("export --json: %v\n%s", err, r.stdout)
	}
	if out.State != "completed" || out.PeerProtocol != "a2a" || out.PeerTaskID == "" || out.PeerContextID == "" || out.PeerTaskID == d.ID {
		t.Errorf("the record: %+v (delegation %s)", out, d.ID)
	}
	if !strings.Contains(x.log.String(), out.PeerTaskID) {
		t.Errorf("the executor's log does not name the A2A task %s", out.PeerTaskID)
	}

	// Staged: the directory is untouched until apply.
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("old again\n"), 0o644)
	r = c.run("export", dir, "--peer", peer, "--token-file", tokenFile(t, token), "--prompt", "tidy", "--snapshot", "staged", "--json")
	if r.code != 0 {
		t.Fatalf("staged export: exit %d\n%s", r.code, r.stderr)
	}
	var staged struct {
		ID string `json:"id"`
	}
	json.Unmarshal([]byte(r.stdout), &staged)
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "old again\n" {
		t.Fatalf("a staged result changed the directory: %q", b)
	}
	if r := c.run("diff", staged.ID); !strings.Contains(r.stdout, "-old again") || !strings.Contains(r.stdout, "+changed by the agent") {
		t.Errorf("diff of the staged result:\n%s%s", r.stdout, r.stderr)
	}
	if r := c.run("apply", staged.ID); r.code != 0 {
		t.Fatalf("apply: %s", r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "changed by the agent\n" {
		t.Errorf("after apply, a.txt: %q", b)
	}

	// A wrong token: refused, in the face's words.
	r = c.run("export", t.TempDir(), "--peer", peer, "--token", "wrong", "--prompt", "tidy")
	if r.code == 0 || !strings.Contains(r.stderr, "AUTH_FAILED") {
		t.Errorf("a wrong token: exit %d\n%s", r.code, r.stderr)
	}
}

// TestExportToAnA2AExecutorAsksPermission: an agent's permission request,
// through the executor's A2A face to this delegator, answered with
// `awcp-ctl permit` from another process.
func TestExportToAnA2AExecutorAsksPermission(t *testing.T) {
	slow(t)
	parallel(t)
	x := acpExecutor(t, "--permission", "forward", "--transports", "archive")
	c := newCtl(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# Sample\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "docs"), 0o755)
	r := c.run("export", dir, "--peer", "a2a:"+x.url, "--prompt", "work", "--background")
	if r.code != 0 {
		t.Fatalf("export --background: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	var req string
	waitUntil(t, 30*time.Second, "the permission request", func() bool {
		for _, p := range c.only().Permissions {
			if p.Outcome == "pending" {
				req = p.RequestID
			}
		}
		return req != ""
	})
	if r := c.run("permit", id, req, "allow"); r.code != 0 {
		t.Fatalf("permit: exit %d\n%s", r.code, r.stderr)
	}
	d := c.waitState(id, "completed")
	if b, _ := os.ReadFile(filepath.Join(dir, "docs", "notes.md")); string(b) != "notes from # Sample\n" {
		t.Errorf("what the permission allowed: %q (%+v)", b, d)
	}
}

// TestExportToAnA2AAgentOnTheJSSDK: an A2A agent served by the official
// JavaScript SDK's own server classes, with a scripted agent, as a peer —
// as that SDK makes them by default (A2A 1.0 alone: a card with no url)
// and with only its 0.3 layer on: the delegator speaks each its version;
// a wrong token is refused in its words; its files are applied, the one it
// names out of the directory and the one by URI are not, and what it says
// it removed goes; its failure reaches the user in its own words.
func TestExportToAnA2AAgentOnTheJSSDK(t *testing.T) {
	parallel(t)
	modules := nodeModules(t, a2aJS, "express@5.1.0")
	for _, version := range []string{"1.0", "0.3"} {
		t.Run(version, func(t *testing.T) {
			const token = "js-agent-token-33a1"
			port := startNode(t, modules, "a2a_agent.mjs", []string{"A2A_TOKEN=" + token, "A2A_VERSIONS=" + version})
			peer := "a2a:http://127.0.0.1:" + port
			c := newCtl(t)
			parent := t.TempDir()
			dir := filepath.Join(parent, "ws")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "README.md"), []byte("# Hello\n"), 0o644)
			os.WriteFile(filepath.Join(dir, "old.txt"), []byte("old\n"), 0o644)

			r := c.run("export", dir, "--peer", peer, "--plain-http", "--token", "wrong", "--prompt", "write notes")
			if r.code == 0 || !strings.Contains(r.stderr, "the scripted agent wants its token") {
				t.Errorf("a wrong token: exit %d\n%s", r.code, r.stderr)
			}
			r = c.run("export", dir, "--peer", peer, "--plain-http", "--token-file", tokenFile(t, token), "--prompt", "write notes")
			if r.code != 0 {
				t.Fatalf("export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			// 0.3's header is optional: the SDK's 0.3 client may send
			// "0.3" or none; 1.0's is required.
			if want := "(A2A-Version " + version + ")"; !strings.Contains(r.stdout, want) &&
				!(version == "0.3" && strings.Contains(r.stdout, "(A2A-Version none)")) {
				t.Errorf("the delegator did not speak %s to an agent that speaks only it:\n%s", version, r.stdout)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "notes.md")); string(b) != "notes on: # Hello\n" {
				t.Errorf("notes.md: %q", b)
			}
			if _, err := os.Stat(filepath.Join(dir, "old.txt")); err == nil {
				t.Errorf("old.txt, which the agent removed, is still there")
			}
			for _, p := range []string{filepath.Join(parent, "escape.txt"), filepath.Join(dir, "big.bin")} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
			if !strings.Contains(r.stdout, `"../escape.txt": not a path in the directory`) || !strings.Contains(r.stdout, "not fetched") {
				t.Errorf("the summary does not say what was left out:\n%s", r.stdout)
			}
			r = c.run("export", t.TempDir(), "--peer", peer, "--plain-http", "--token-file", tokenFile(t, token), "--prompt", "fail now")
			if r.code == 0 || !strings.Contains(r.stderr, "TASK_FAILED") || !strings.Contains(r.stderr, "quota exceeded") {
				t.Errorf("the agent's failure: exit %d\n%s", r.code, r.stderr)
			}
		})
	}
}

// TestExportToGeminiCLIA2AServer: Gemini CLI's own A2A server, as
// installed from the npm registry, as a peer. It runs in a network
// namespace of its own with the delegator, its model API pointed at this
// machine, which answers as the Gemini API answers a key it does not know:
// the agent's authentication error reaches the user in its words, as a
// failed delegation.
func TestExportToGeminiCLIA2AServer(t *testing.T) {
	slow(t)
	parallel(t)
	modules := nodeModules(t, geminiA2A)
	l := newLAN(t)
	n := l.add("gem", 2)
	ns := []string{"ip", "netns", "exec", n.ns}
	api := startNode(t, modules, "gemini_api_refusal.mjs", nil, ns...)
	home := t.TempDir()
	server := filepath.Join(modules, "node_modules", "@google", "gemini-cli-a2a-server", "dist", "a2a-server.mjs")
	// Its own startup line is not ours: wait for its port instead.
	cmd := exec.Command("ip", "netns", "exec", n.ns, "node", server)
	cmd.Env = append(os.Environ(), "HOME="+home, "CODER_AGENT_PORT=18777", "GEMINI_API_KEY=not-a-real-key",
		"GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:"+api)
	startLogged(t, "gemini-cli-a2a-server", cmd, nil)
	waitUntil(t, 60*time.Second, "Gemini CLI's A2A server to answer", func() bool {
		return exec.Command("ip", "netns", "exec", n.ns, "curl", "-sf", "http://127.0.0.1:18777/.well-known/agent-card.json").Run() == nil
	})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# hi\n"), 0o644)
	r := n.ctl(t, "export", dir, "--peer", "a2a:http://127.0.0.1:18777", "--plain-http", "--prompt", "say hello", "--ttl", "2m")
	if r.code == 0 || !strings.Contains(r.stderr, "TASK_FAILED") || !strings.Contains(r.stderr, "API key not valid") {
		t.Fatalf("a delegation to Gemini CLI without a valid key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "README.md")); string(b) != "# hi\n" {
		t.Errorf("the directory changed: %q", b)
	}
}

// startLogged starts cmd in a process group of its own, killed at the
// test's end; if the test failed, its output is shown (and more's).
func startLogged(t *testing.T, name string, cmd *exec.Cmd, more func() string) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var log lockedLog
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		if t.Failed() {
			extra := ""
			if more != nil {
				extra = "\n" + more()
			}
			t.Logf("%s:\n%s%s", name, tail(log.String(), 6000), extra)
		}
	})
}

// lockedLog is a process's output, read while it writes.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestA2APeerPinnedLikeAnyExecutor: `--peer a2a:https://…` to awcp's own
// A2A face, which shows its identity key and no certificate a CA signed,
// is reached pinned to that key — given with --peer-key, or trusted at the
// URL with `peers trust` — as an executor is; an impostor at that URL with
// another key hears nothing: no task, no workspace, no token.
func TestA2APeerPinnedLikeAnyExecutor(t *testing.T) {
	slow(t)
	parallel(t)
	const token = "a2a-pinned-token-77c1"
	x := startTLSExecutor(t, a2aAgent, "--token-file", tokenFile(t, token), "--transports", "archive")
	key := x.key(t)
	c := newCtl(t)
	c.tls = true
	export := func(dir string, extra ...string) result {
		t.Helper()
		return c.run(append([]string{"export", dir, "--token-file", tokenFile(t, token), "--prompt", "tidy"}, extra...)...)
	}
	workspace := func() string {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "a.txt"), []byte("old a\n"), 0o644)
		return dir
	}
	// By --peer-key.
	dir := workspace()
	if r := export(dir, "--peer", "a2a:"+x.url, "--peer-key", key); r.code != 0 {
		t.Fatalf("export to the A2A face over TLS with --peer-key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "changed by the agent\n" {
		t.Errorf("a.txt after the pinned A2A delegation: %q", b)
	}
	// By the key trusted at its URL.
	if r := c.run("peers", "trust", x.url, "--key", key); r.code != 0 {
		t.Fatalf("peers trust: exit %d\n%s", r.code, r.stderr)
	}
	dir = workspace()
	if r := export(dir, "--peer", "a2a:"+x.url); r.code != 0 {
		t.Fatalf("export to the A2A face trusted at its URL: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "changed by the agent\n" {
		t.Errorf("a.txt after the trusted A2A delegation: %q", b)
	}
	// An impostor: another executor, the real one's key pinned.
	impostor := startTLSExecutor(t, `echo pwned > pwned.txt`, "--transports", "archive")
	dir = workspace()
	r := export(dir, "--peer", "a2a:"+impostor.url, "--peer-key", key)
	if r.code != 2 || !strings.Contains(r.stderr, "error USAGE: the agent shows key") || !strings.Contains(r.stderr, "nothing was sent") {
		t.Fatalf("export to an impostor's A2A face: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(impostor.log.String(), "a2a") && strings.Contains(impostor.log.String(), "task") {
		t.Errorf("the impostor heard a task:\n%s", impostor.log)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned.txt")); err == nil {
		t.Error("the impostor's agent ran on the workspace")
	}
}

// TestGeminiCLIA2AServerConfirmsATool: Gemini CLI's A2A server, its model
// API scripted to make an edit, asks to confirm the tool call (as it does
// by default); the delegator makes that a permission of the delegation,
// with Gemini's own outcomes as its options, and `awcp-ctl permit`'s
// proceed_once lets the edit through: the task goes on and completes
// where it used to end at input-required.
func TestGeminiCLIA2AServerConfirmsATool(t *testing.T) {
	slow(t)
	parallel(t)
	modules := nodeModules(t, geminiA2A)
	work := t.TempDir()
	writeFiles(t, work, map[string]string{"notes.md": "draft notes\n"})
	m := startScriptedModel(t, modelEdit{file: "notes.md", old: "draft notes", new: "reviewed notes", final: "Marked the notes reviewed."})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	home := t.TempDir()
	server := filepath.Join(modules, "node_modules", "@google", "gemini-cli-a2a-server", "dist", "a2a-server.mjs")
	cmd := exec.Command("node", server)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "HOME="+home, "CODER_AGENT_PORT="+port, "CODER_AGENT_WORKSPACE_PATH="+work,
		"GEMINI_API_KEY=scripted-key", "GOOGLE_GEMINI_BASE_URL="+m.url,
		// Its checkpoints are commits of a repository of its own.
		"GIT_AUTHOR_NAME=gemini", "GIT_AUTHOR_EMAIL=gemini@example.invalid", "GIT_COMMITTER_NAME=gemini", "GIT_COMMITTER_EMAIL=gemini@example.invalid")
	startLogged(t, "gemini-cli-a2a-server", cmd, func() string { return fmt.Sprintf("the model was asked: %v", m.requests()) })
	waitUntil(t, 60*time.Second, "Gemini CLI's A2A server to answer", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/.well-known/agent-card.json")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	c := newCtl(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# hi\n"), 0o644)
	r := c.run("export", dir, "--peer", "a2a:http://127.0.0.1:"+port, "--plain-http", "--prompt", "Mark the notes reviewed.", "--ttl", "3m", "--background")
	if r.code != 0 {
		t.Fatalf("export --background: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	var req string
	var options []string
	waitUntil(t, 60*time.Second, "Gemini's tool confirmation as a permission", func() bool {
		d := c.only()
		if d.State == "error" || d.State == "completed" {
			t.Fatalf("the delegation ended (%s) without asking: %+v", d.State, d)
		}
		for _, p := range d.Permissions {
			if p.Outcome == "pending" {
				req = p.RequestID
				options = options[:0]
				for _, o := range p.Options {
					options = append(options, o.OptionID)
				}
			}
		}
		return req != ""
	})
	if !slices.Contains(options, "proceed_once") || !slices.Contains(options, "cancel") {
		t.Errorf("the permission's options: %v", options)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "notes.md")); string(b) != "draft notes\n" {
		t.Fatalf("the edit ran before it was confirmed: %q", b)
	}
	if r := c.run("permit", id, req, "proceed_once"); r.code != 0 {
		t.Fatalf("permit: exit %d\n%s", r.code, r.stderr)
	}
	d := c.waitState(id, "completed")
	if b, _ := os.ReadFile(filepath.Join(work, "notes.md")); string(b) != "reviewed notes\n" {
		t.Errorf("after proceed_once Gemini's notes.md is %q (%+v)", b, d)
	}
	for _, p := range d.Permissions {
		if p.RequestID == req && p.Outcome == "pending" {
			t.Errorf("the confirmation is still pending in the record after the task completed: %+v", p)
		}
	}
}
