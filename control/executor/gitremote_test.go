package executor_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
)

// The reference's git transport, as its delegator drives it (its INVITE
// asks for git; its START's transportHandle names a remote, a branch and a
// commit): our executor clones the remote only when its operator allows
// it, runs the agent on the clone, pushes a branch awcp/{id} to the remote
// with the agent's commit and what it left uncommitted, and names them in
// its snapshot as the reference's executor does (the JSON itself in
// snapshotBase64, which the reference's delegator parses).
func TestExecutorTakesTheReferencesGitStart(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("needs git")
	}
	remote := filepath.Join(t.TempDir(), "remote.git")
	seed := t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=d", "GIT_AUTHOR_EMAIL=d@x", "GIT_COMMITTER_NAME=d", "GIT_COMMITTER_EMAIL=d@x")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git(seed, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(seed, "hello.txt"), []byte("hello\n"), 0o644)
	git(seed, "add", "hello.txt")
	git(seed, "commit", "-qm", "base")
	base := git(seed, "rev-parse", "HEAD")
	git(t.TempDir(), "clone", "-q", "--bare", seed, remote)

	agent := `echo changed >> hello.txt && git -c user.name=a -c user.email=a@x commit -qam "the agent's" && echo new > new.txt`
	gitTransport := func(allow ...string) func(*executor.Options) {
		return func(o *executor.Options) {
			o.Transports = append(o.Transports, &executor.GitExecutor{Live: &executor.SSHFSExecutor{Disabled: true}, AllowRemotes: allow})
		}
	}
	invite := func(id string) string {
		return strings.Replace(captured(t, "invite-head.json", id), `"transport": "archive"`, `"transport": "git"`, 1)
	}
	start := func(id string) string {
		h, _ := json.Marshal(map[string]any{"version": "1", "type": "START", "delegationId": id,
			"lease":           map[string]any{"expiresAt": "2099-01-01T00:00:00Z", "accessMode": "rw"},
			"transportHandle": map[string]any{"transport": "git", "repoUrl": "file://" + remote, "baseBranch": "main", "baseCommit": base, "auth": map[string]any{"type": "none"}}})
		return string(h)
	}
	run := func(x *executortest.Fixture, id string) []map[string]any {
		post := func(body string) map[string]any {
			resp, err := http.Post(x.Srv.URL+"/awcp", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var m map[string]any
			json.NewDecoder(resp.Body).Decode(&m)
			return m
		}
		if acc := post(invite(id)); acc["type"] != control.TypeAccept {
			t.Fatalf("INVITE for git answered %v", acc)
		}
		stream, err := http.Get(x.Srv.URL + "/awcp/tasks/" + id + "/events")
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Body.Close()
		if ok := post(start(id)); ok["ok"] != true {
			return []map[string]any{ok}
		}
		var events []map[string]any
		sc := bufio.NewScanner(stream.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m map[string]any
			json.Unmarshal([]byte(data), &m)
			events = append(events, m)
			if m["type"] == control.EventDone || m["type"] == control.EventError {
				break
			}
		}
		return events
	}

	// Not allowed: refused before anything is fetched.
	x := executortest.New(t, agent, gitTransport("https://git.example.com/"))
	evs := run(x, "dlg_gitref0001")
	if last := evs[len(evs)-1]; last["code"] != control.CodeSetupFailed || !strings.Contains(last["message"].(string), "is not one this executor takes") {
		t.Fatalf("a remote not allowed: %v", evs)
	}

	// Allowed.
	x = executortest.New(t, agent, gitTransport("file://"+filepath.Dir(remote)+"/"))
	id := "dlg_gitref0002"
	evs = run(x, id)
	var snap map[string]any
	for _, ev := range evs {
		if ev["type"] == control.EventSnapshot {
			snap = ev
		}
	}
	if snap == nil || evs[len(evs)-1]["type"] != control.EventDone {
		t.Fatalf("events %v, want a snapshot and done", evs)
	}
	var info struct {
		Branch, CommitHash, BaseCommit string
		ChangedFiles                   []string
	}
	if err := json.Unmarshal([]byte(snap["snapshotBase64"].(string)), &info); err != nil {
		t.Fatalf("snapshotBase64 is not the reference's JSON: %v: %q", err, snap["snapshotBase64"])
	}
	if info.Branch != "awcp/"+id || info.BaseCommit != base || strings.Join(info.ChangedFiles, ",") != "hello.txt,new.txt" {
		t.Fatalf("snapshot %+v", info)
	}
	if got := git(remote, "rev-parse", "refs/heads/awcp/"+id); got != info.CommitHash {
		t.Fatalf("the remote's branch is at %s, the snapshot names %s", got, info.CommitHash)
	}
	if got := git(remote, "log", "--format=%s", base+".."+info.CommitHash); !strings.Contains(got, "the agent's") {
		t.Errorf("the pushed branch lacks the agent's commit:\n%s", got)
	}
	if got := git(remote, "show", info.CommitHash+":new.txt"); got != "new" {
		t.Errorf("the pushed branch lacks the uncommitted new.txt: %q", got)
	}
}
