package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// skillsRef is the Agent Skills reference validator, from the npm registry.
const skillsRef = "skills-ref@0.1.5"

// validateSkill runs `skills-ref validate` on a skill folder.
func validateSkill(t *testing.T, modules, folder string) {
	t.Helper()
	out, err := exec.Command("node", filepath.Join(modules, "node_modules", "skills-ref", "dist", "cli.js"), "validate", folder).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Valid skill") {
		t.Errorf("skills-ref validate %s: %v\n%s", filepath.Base(folder), err, out)
	}
}

// skillFolders are the awcp- folders of dir, by the agent id each names.
func skillFolders(t *testing.T, dir string) map[string]string {
	t.Helper()
	byID := map[string]string{}
	ents, _ := os.ReadDir(dir)
	id := regexp.MustCompile(`(?m)^  awcp-agent-id: "([^"]+)"$`)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "awcp-") {
			continue
		}
		text, err := os.ReadFile(filepath.Join(dir, e.Name(), "SKILL.md"))
		if err != nil {
			continue
		}
		if m := id.FindSubmatch(text); m != nil {
			byID[string(m[1])] = filepath.Join(dir, e.Name())
		}
	}
	return byID
}

// TestSkillsForTrustedExecutors: `awcp-ctl skills sync` writes a skill per
// trusted executor that the reference validator accepts and whose command
// works as written; a new version of one executor rewrites its skill
// alone; one gone offline is marked, not removed; one no longer trusted
// loses its skill; the user's own skills are never touched; and `peers
// --watch --skills` does the same as executors come and go.
func TestSkillsForTrustedExecutors(t *testing.T) {
	slow(t)
	parallel(t)
	modules := nodeModules(t, skillsRef)
	names := []string{"Build Box", "gpu-runner", "docs"}
	var xs []*executor
	for _, n := range names {
		xs = append(xs, startTLSExecutor(t, `echo "done by `+n+`" > ran.txt`, "--name", n, "--description", "runs tasks on "+n))
	}
	c := newCtl(t)
	c.tls = true
	ids := make([]string, len(xs))
	for i, x := range xs {
		if r := c.run("peers", "trust", "https://"+x.addr, "--key", x.key(t)); r.code != 0 {
			t.Fatalf("peers trust: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		ids[i] = agentIDOf(t, x)
	}
	dir := filepath.Join(t.TempDir(), "skills")
	mine := filepath.Join(dir, "my-notes", "SKILL.md")
	if err := os.MkdirAll(filepath.Dir(mine), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mine, []byte("---\nname: my-notes\ndescription: the user's own\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sync := func() result {
		t.Helper()
		r := c.run("skills", "sync", "--dir", dir, "--browse-window", "200ms")
		if r.code != 0 {
			t.Fatalf("skills sync: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		return r
	}
	r := sync()
	got := skillFolders(t, dir)
	for i, id := range ids {
		folder, ok := got[id]
		if !ok {
			t.Fatalf("no skill for %s (%s):\n%s", names[i], id, r.stdout)
		}
		validateSkill(t, modules, folder)
	}
	if len(got) != 3 || strings.Count(r.stdout, "wrote ") != 3 {
		t.Fatalf("skills: %v\n%s", got, r.stdout)
	}

	// The skill's command, as written, delegates to its executor.
	text, _ := os.ReadFile(filepath.Join(got[ids[0]], "SKILL.md"))
	cmdLine := regexp.MustCompile(`(?m)^awcp-ctl export DIR .*$`).Find(text)
	if cmdLine == nil || !bytes.Contains(cmdLine, []byte("--peer "+ids[0])) {
		t.Fatalf("the skill gives no export command naming its executor:\n%s", text)
	}
	work := t.TempDir()
	args := strings.Fields(strings.Replace(string(cmdLine), `"THE TASK, IN FULL"`, "TASK", 1))[1:]
	for i, a := range args {
		switch a {
		case "DIR":
			args[i] = work
		case "TASK":
			args[i] = "say who you are"
		}
	}
	followSkill(t, c, text, args)
	if r := c.run("apply", c.only().ID); r.code != 0 {
		t.Fatalf("apply the staged result: exit %d\n%s", r.code, r.stderr)
	}
	if ran, _ := os.ReadFile(filepath.Join(work, "ran.txt")); string(ran) != "done by Build Box\n" {
		t.Errorf("the skill's command ran on %q, want Build Box", ran)
	}

	read := func(id string) ([]byte, time.Time) {
		f := filepath.Join(got[id], "SKILL.md")
		b, _ := os.ReadFile(f)
		fi, err := os.Stat(f)
		if err != nil {
			return nil, time.Time{}
		}
		return b, fi.ModTime()
	}
	before1, _ := read(ids[1])
	before2, at2 := read(ids[2])

	// A new version of Build Box: its skill alone is rewritten.
	next := filepath.Join(t.TempDir(), "awcp-fs")
	build := exec.Command("go", "build", "-ldflags", "-X github.com/awcp/awcp/cmd/internal/clikit.Version=skills-e2e-next", "-o", next, "../../cmd/awcp-fs")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the next awcp-fs: %v\n%s", err, out)
	}
	restart(t, xs[0], next)
	time.Sleep(20 * time.Millisecond) // a rewrite would show in the mtime
	r = sync()
	if !strings.Contains(r.stdout, "wrote    "+filepath.Join(got[ids[0]], "SKILL.md")) || strings.Count(r.stdout, "wrote ") != 1 {
		t.Errorf("after a new version of one executor:\n%s", r.stdout)
	}
	if b, _ := read(ids[0]); !bytes.Contains(b, []byte(`awcp-executor-version: "skills-e2e-next"`)) {
		t.Errorf("the skill does not show the new version:\n%s", b)
	}
	if b, at := read(ids[2]); !bytes.Equal(b, before2) || !at.Equal(at2) {
		t.Errorf("another executor's skill changed with it")
	}

	// gpu-runner stops: its skill says it is offline, and still validates.
	xs[1].stop(t)
	sync()
	off, _ := read(ids[1])
	if !bytes.Contains(off, []byte(`awcp-status: "offline"`)) || !bytes.Contains(off, []byte("**This executor is offline**")) || bytes.Equal(off, before1) {
		t.Errorf("an offline executor's skill:\n%s", off)
	}
	validateSkill(t, modules, got[ids[1]])
	xs[1].start(t, xs[1].addr) // back, for the watch below and the cleanup

	// docs is no longer trusted: its skill goes.
	if r := c.run("peers", "untrust", ids[2]); r.code != 0 {
		t.Fatalf("peers untrust: exit %d\n%s", r.code, r.stderr)
	}
	r = sync()
	if _, err := os.Stat(filepath.Join(got[ids[2]], "SKILL.md")); err == nil || !strings.Contains(r.stdout, "removed") {
		t.Errorf("an untrusted executor's skill is still there:\n%s", r.stdout)
	}
	if b, err := os.ReadFile(mine); err != nil || !bytes.Contains(b, []byte("the user's own")) {
		t.Errorf("the user's own skill changed: %v %s", err, b)
	}

	// peers --watch --skills: the skills follow while it runs, including a
	// trust taken back by another awcp-ctl.
	watched := filepath.Join(t.TempDir(), "watched")
	w := c.start("peers", "--watch", "--skills", watched, "--browse-window", "200ms", "--browse-interval", "300ms")
	defer func() {
		w.Process.Signal(syscall.SIGTERM)
		w.Wait()
	}()
	waitUntil(t, 15*time.Second, "the watch writes the two trusted executors' skills", func() bool {
		got := skillFolders(t, watched)
		return len(got) == 2 && got[ids[0]] != "" && got[ids[1]] != ""
	})
	if r := c.run("peers", "untrust", ids[1]); r.code != 0 {
		t.Fatalf("peers untrust: exit %d\n%s", r.code, r.stderr)
	}
	waitUntil(t, 15*time.Second, "the watch removes the skill of the executor no longer trusted", func() bool {
		got := skillFolders(t, watched)
		return len(got) == 1 && got[ids[0]] != ""
	})
	for _, f := range skillFolders(t, watched) {
		validateSkill(t, modules, f)
	}
	if slices.Contains(c.peersTrusted(t), ids[1]) {
		t.Errorf("the watch wrote back the trust taken from %s", ids[1])
	}

	// An A2A agent the user names (here an executor's A2A face): its skill
	// validates and gives `export --peer a2a:URL`, which works as written;
	// offline it says so; forgotten, it goes.
	agent := startExecutor(t, `echo "by the a2a agent" > a2a.txt`, "--name", "a2a-box", "--transports", "archive")
	a2aDir := filepath.Join(t.TempDir(), "a2a-skills")
	r = c.run("skills", "sync", "--dir", a2aDir, "--a2a", agent.url, "--browse-window", "200ms")
	var folder string
	for id, f := range skillFolders(t, a2aDir) {
		if id == "a2a:"+agent.url {
			folder = f
		}
	}
	if r.code != 0 || folder == "" {
		t.Fatalf("skills sync --a2a: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	validateSkill(t, modules, folder)
	text, _ = os.ReadFile(filepath.Join(folder, "SKILL.md"))
	line := regexp.MustCompile(`(?m)^awcp-ctl export DIR .*$`).Find(text)
	if line == nil || !bytes.Contains(line, []byte("--peer a2a:"+agent.url+" --plain-http")) {
		t.Fatalf("the A2A skill's command: %q", line)
	}
	args = strings.Fields(strings.Replace(string(line), `"THE TASK, IN FULL"`, "TASK", 1))[1:]
	work = t.TempDir()
	for i, a := range args {
		switch a {
		case "DIR":
			args[i] = work
		case "TASK":
			args[i] = "note it"
		case "staged":
			args[i] = "auto"
		}
	}
	followSkill(t, c, text, args)
	if b, _ := os.ReadFile(filepath.Join(work, "a2a.txt")); string(b) != "by the a2a agent\n" {
		t.Errorf("the A2A agent's work: %q", b)
	}
	agent.stop(t)
	c.run("skills", "sync", "--dir", a2aDir, "--browse-window", "200ms")
	if b, _ := os.ReadFile(filepath.Join(folder, "SKILL.md")); !bytes.Contains(b, []byte(`awcp-status: "offline"`)) {
		t.Errorf("the A2A agent stopped; its skill:\n%s", b)
	}
	validateSkill(t, modules, folder)
	agent.start(t, agent.addr) // for the cleanup's stop
	c.run("skills", "sync", "--dir", a2aDir, "--drop-a2a", agent.url, "--browse-window", "200ms")
	if _, err := os.Stat(filepath.Join(folder, "SKILL.md")); err == nil {
		t.Errorf("a forgotten A2A agent's skill is still there")
	}
}

// restart stops x and starts it again, at the same address and state,
// running bin.
func restart(t *testing.T, x *executor, bin string) {
	t.Helper()
	x.stop(t)
	x.bin = bin
	x.start(t, x.addr)
}

// peersTrusted are the agent ids `awcp-ctl peers --json` shows trusted.
func (c *ctl) peersTrusted(t *testing.T) []string {
	t.Helper()
	var peers []struct {
		AgentID    string `json:"agentId"`
		TrustedKey string `json:"trustedKey"`
	}
	r := c.run("peers", "--json", "--browse-window", "200ms")
	if err := json.Unmarshal([]byte(r.stdout), &peers); err != nil {
		t.Fatalf("peers --json: %v\n%s", err, r.stdout)
	}
	var ids []string
	for _, p := range peers {
		if p.TrustedKey != "" {
			ids = append(ids, p.AgentID)
		}
	}
	return ids
}

// agentIDOf is x's agent id, from its state dir.
func agentIDOf(t *testing.T, x *executor) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(x.state, "agent-id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// waitUntil polls ok until it holds, failing the test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
	}
}

// followSkill runs a skill's two commands as a model following it would:
// the export (args, its first), which prints the delegation's ID at once,
// then the skill's wait for the result with that ID, until it says the
// delegation completed.
func followSkill(t *testing.T, c *ctl, text []byte, args []string) {
	t.Helper()
	r := c.run(args...)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("the skill's export %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	wait := regexp.MustCompile(`(?m)^awcp-ctl output ID .*$`).Find(text)
	if wait == nil {
		t.Fatalf("the skill gives no command to wait for the result:\n%s", text)
	}
	waitArgs := strings.Fields(strings.Replace(string(wait), " ID ", " "+id+" ", 1))[1:]
	for tries := 0; ; tries++ {
		r := c.run(waitArgs...)
		if r.code == 0 {
			return
		}
		if r.code != 3 || tries == 5 {
			t.Fatalf("the skill's wait %v: exit %d\n%s%s", waitArgs, r.code, r.stdout, r.stderr)
		}
	}
}
