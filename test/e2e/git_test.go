package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gitAgent reports how many files its clone's index holds stat data of
// that does not match (git diff-files compares it and reads nothing: each
// one a file its first git status would read whole), commits twice,
// leaves a change uncommitted, and reports how many of the objects its
// clone received hold the owner's hidden secret (every object: git
// cat-file --batch-all-objects), and its work dir.
const gitAgent = `set -e
echo "stale index entries: $(git diff-files --name-only | wc -l)"
echo "line one" >> notes.txt; git add notes.txt; git commit -qm "first"
echo "line two" >> notes.txt; git commit -qam "second"
echo "left uncommitted" > loose.txt
echo "secret objects: $(git cat-file --batch-all-objects --batch | grep -c hunter2 || true)"
echo "hidden file: $(ls -a | grep -c '^.env$' || true)"
echo "workdir: $PWD"`

// TestGitTransport: --transport git. The agent works on a clone on the
// executor's disk, whose index matches its work tree as handed to the
// agent (its first git status reads no file), commits twice and leaves a change uncommitted; the
// owner gets all three applied; the hidden .env is in no object the
// executor received; the clone is gone at the end; a result over
// --max-write-bytes is refused whole.
func TestGitTransport(t *testing.T) {
	slow(t)
	parallel(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("the git transport's test needs git")
	}
	x := startExecutor(t, gitAgent, "--transports", "git")
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"notes.txt": "line zero\n", ".env": "PASSWORD=hunter2\n", "src/main.c": "int main(void) { return 0; }\n"})

	r := c.run("export", ws, "--peer", x.url, "--prompt", "work", "--transport", "git", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("export --transport git: exit %d\n%s%s\nexecutor:\n%s", r.code, r.stdout, r.stderr, x.log)
	}
	for _, want := range []string{"stale index entries: 0", "secret objects: 0", "hidden file: 0"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("the agent's report lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes.txt")); string(b) != "line zero\nline one\nline two\n" {
		t.Errorf("notes.txt = %q: the agent's two commits are not applied", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "loose.txt")); string(b) != "left uncommitted\n" {
		t.Errorf("loose.txt = %q: the uncommitted change is not applied", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".env")); string(b) != "PASSWORD=hunter2\n" {
		t.Errorf(".env = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "src/main.c")); string(b) != "int main(void) { return 0; }\n" {
		t.Errorf("src/main.c = %q", b)
	}
	waitWorkRootEmpty(t, x)
	storesAgree(t, c, x)
	noLentRepos(t, c)

	// The scan can see the secret: lent without the hide defaults, the
	// agent finds it in the objects it received.
	ws1 := t.TempDir()
	writeFiles(t, ws1, map[string]string{"notes.txt": "line zero\n", ".env": "PASSWORD=hunter2\n"})
	r = c.run("export", ws1, "--peer", x.url, "--prompt", "work", "--transport", "git", "--ssh-listen", "127.0.0.1:0", "--no-hide-defaults")
	if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "secret objects: 1") {
		t.Errorf("lent with .env, the agent's scan does not find it: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A result past --max-write-bytes is refused whole: nothing applied.
	big := startExecutor(t, `head -c 300000 /dev/urandom > blob.bin; echo "small" > small.txt`, "--transports", "git")
	ws2 := t.TempDir()
	writeFiles(t, ws2, map[string]string{"keep.txt": "as it was\n"})
	r = c.run("export", ws2, "--peer", big.url, "--prompt", "write a lot", "--transport", "git", "--ssh-listen", "127.0.0.1:0", "--max-write-bytes", "64K")
	if r.code == 0 {
		t.Fatalf("a result over --max-write-bytes was taken:\n%s%s", r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(ws2, "small.txt")); err == nil {
		t.Errorf("part of a refused result was applied")
	}
	if _, err := os.Stat(filepath.Join(ws2, "blob.bin")); err == nil {
		t.Errorf("a result over --max-write-bytes was applied")
	}
	waitWorkRootEmpty(t, big)
}

// The agent's clone is its own: whatever it sets in its repository —
// hooks, an fsmonitor, a clean filter for every path, a FIFO among its
// objects, links to a file it cannot read as a pack and as HEAD — after
// its last commit runs nothing, blocks nothing and reads nothing outside
// when the executor takes its result, and nothing of its .git comes back;
// its work tree is taken all the same.
func TestGitTransportAgentRepoRunsNothing(t *testing.T) {
	parallel(t)
	markers := t.TempDir()
	agent := `set -e
echo "work" > work.txt; git add work.txt; git commit -qm work
git config core.fsmonitor "touch ` + markers + `/fsmonitor-ran"
git config filter.evil.clean "touch ` + markers + `/filter-ran; cat"
git config core.hooksPath .git/hooks
echo "* filter=evil" > .gitattributes
for h in pre-commit post-commit pre-push reference-transaction post-index-change; do
  printf '#!/bin/sh\ntouch ` + markers + `/hook-%s-ran\n' $h > .git/hooks/$h; chmod +x .git/hooks/$h
done
echo "after" > after.txt
mkfifo .git/objects/fifo
secret=/etc/$(echo shadow) # not a word of the command: the sandbox grants the files a command names
ln -s "$secret" .git/objects/pack/pack-0000000000000000000000000000000000000000.pack
rm -f .git/HEAD; ln -s "$secret" .git/HEAD`
	x := startExecutor(t, agent, "--transports", "git")
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"readme.txt": "hello\n"})
	r := c.run("export", ws, "--peer", x.url, "--prompt", "work", "--transport", "git", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if ran, _ := os.ReadDir(markers); len(ran) > 0 {
		var names []string
		for _, e := range ran {
			names = append(names, e.Name())
		}
		t.Errorf("the agent's repository ran commands as the executor: %v", names)
	}
	for f, want := range map[string]string{"work.txt": "work\n", "after.txt": "after\n", ".gitattributes": "* filter=evil\n"} {
		if b, _ := os.ReadFile(filepath.Join(ws, f)); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, ".git")); err == nil {
		t.Errorf("the agent's .git came back")
	}
}

// Cancelled mid-run and expired mid-run, a git delegation leaves nothing
// on either side: no clone, no lent repository, nothing applied.
func TestGitTransportEndsCleanly(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `echo "half" > half.txt; git add half.txt; git commit -qm half; sleep 60`, "--transports", "git")
	c := newCtl(t)
	c.serve()
	for _, how := range []string{"cancel", "expiry"} {
		ws := t.TempDir()
		writeFiles(t, ws, map[string]string{"readme.txt": "hello\n"})
		args := []string{"export", ws, "--peer", x.url, "--prompt", "work", "--transport", "git", "--background"}
		if how == "expiry" {
			args = append(args, "--ttl", "3s")
		}
		r := c.run(args...)
		if r.code != 0 {
			t.Fatalf("%s: export: exit %d\n%s", how, r.code, r.stderr)
		}
		id := strings.TrimSpace(r.stdout)
		c.waitState(id, "running")
		if how == "cancel" {
			if r := c.run("cancel", id); r.code != 0 {
				t.Fatalf("cancel: exit %d\n%s", r.code, r.stderr)
			}
			c.waitState(id, "cancelled")
		} else {
			c.waitState(id, "expired")
		}
		waitWorkRootEmpty(t, x)
		if _, err := os.Stat(filepath.Join(ws, "half.txt")); err == nil {
			t.Errorf("%s: the agent's commit was applied", how)
		}
		noLentRepos(t, c)
	}
}

// --snapshot staged with git: the result waits for review; diff shows the
// agent's committed and uncommitted lines, and apply brings them in.
func TestGitTransportStaged(t *testing.T) {
	parallel(t)
	x := startExecutor(t, gitAgent, "--transports", "git")
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"notes.txt": "line zero\n", ".env": "PASSWORD=hunter2\n"})
	r := c.run("export", ws, "--peer", x.url, "--prompt", "work", "--transport", "git", "--snapshot", "staged", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("export --snapshot staged: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes.txt")); string(b) != "line zero\n" {
		t.Fatalf("a staged result changed the directory: notes.txt = %q", b)
	}
	id := c.only().ID
	d := c.run("diff", id)
	for _, want := range []string{"+line one", "+line two", "+left uncommitted"} {
		if !strings.Contains(d.stdout, want) {
			t.Errorf("diff lacks %q:\n%s%s", want, d.stdout, d.stderr)
		}
	}
	if strings.Contains(d.stdout, "hunter2") || strings.Contains(d.stdout, ".env") {
		t.Errorf("the diff shows the hidden .env:\n%s", d.stdout)
	}
	if a := c.run("apply", id); a.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", a.code, a.stdout, a.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes.txt")); string(b) != "line zero\nline one\nline two\n" {
		t.Errorf("after apply notes.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "loose.txt")); string(b) != "left uncommitted\n" {
		t.Errorf("after apply loose.txt = %q", b)
	}
}

// apply --branch of a git result keeps the agent's own commits: its two,
// then the one of what it left uncommitted, replayed on top of the owner's
// HEAD with their messages; the working tree stays as it was, and a path
// the export hides is in none of them.
func TestGitTransportBranchKeepsCommits(t *testing.T) {
	slow(t)
	parallel(t)
	agent := `set -e
echo "history: $(git rev-list --count HEAD)"
echo "line one" >> notes.txt; echo "PASSWORD=the-agents" > .env; git add notes.txt .env; git commit -qm "first: one line"
echo "line two" >> notes.txt; git commit -qam "second: another"
echo "left uncommitted" > loose.txt`
	x := startExecutor(t, agent, "--transports", "git")
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"notes.txt": "line zero\n", ".env": "PASSWORD=hunter2\n"})
	gitIn := ownerGit(t, ws)
	gitIn("init", "-q")
	gitIn("add", "notes.txt")
	gitIn("commit", "-qm", "the owner's")
	head := gitIn("rev-parse", "HEAD")
	r := c.run("export", ws, "--peer", x.url, "--prompt", "work", "--transport", "git", "--snapshot", "staged", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout+r.stderr, "history: 1") {
		t.Errorf("the agent's clone holds more than the export view's commit (the owner's history?):\n%s%s", r.stdout, r.stderr)
	}
	id := c.only().ID
	a := c.run("apply", id, "--branch", "agent-work")
	if a.code != 0 || !strings.Contains(a.stdout, "the agent's 3 commit(s) on top of your HEAD") {
		t.Fatalf("apply --branch: exit %d\n%s%s", a.code, a.stdout, a.stderr)
	}
	if got := gitIn("log", "--format=%s", head+"..agent-work"); got != "awcp: what the agent left uncommitted at the end of delegation "+id+"\nsecond: another\nfirst: one line" {
		t.Errorf("the branch's commits:\n%s", got)
	}
	if got := gitIn("show", "agent-work:notes.txt"); got != "line zero\nline one\nline two" {
		t.Errorf("notes.txt on the branch: %q", got)
	}
	if got := gitIn("show", "agent-work:loose.txt"); got != "left uncommitted" {
		t.Errorf("loose.txt on the branch: %q", got)
	}
	if got := gitIn("log", "--format=%H", "agent-work", "--", ".env"); got != "" {
		t.Errorf("a commit of the branch touches the hidden .env: %s", got)
	}
	if gitIn("rev-parse", "HEAD") != head || gitIn("status", "--porcelain", "notes.txt") != "" {
		t.Errorf("HEAD or the working tree moved")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".env")); string(b) != "PASSWORD=hunter2\n" {
		t.Errorf(".env = %q", b)
	}
}

// --git-history N lends the branch's last N commits beneath the export
// view, and nothing older; a hidden path in any of them refuses it, naming
// the path and the commit.
func TestGitTransportHistory(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `echo "commits: $(git rev-list --count HEAD)"; echo "log: $(git log --format=%s | tr '\n' ,)"; git cat-file -e $(cat first.sha) 2>/dev/null && echo "first: present" || echo "first: absent"`, "--transports", "git")
	c := newCtl(t)
	ws := t.TempDir()
	gitIn := ownerGit(t, ws)
	gitIn("init", "-q")
	writeFiles(t, ws, map[string]string{"a.txt": "1\n", ".env": "PASSWORD=hunter2\n"})
	gitIn("add", "a.txt", ".env")
	gitIn("commit", "-qm", "c1 with the secret")
	first := gitIn("rev-parse", "HEAD")
	gitIn("rm", "-q", "--cached", ".env")
	gitIn("commit", "-qm", "c2 without it")
	writeFiles(t, ws, map[string]string{"a.txt": "3\n", "first.sha": first + "\n"})
	gitIn("add", "a.txt", "first.sha")
	gitIn("commit", "-qm", "c3")
	writeFiles(t, ws, map[string]string{"a.txt": "uncommitted\n"})

	r := c.run("export", ws, "--peer", x.url, "--prompt", "look", "--transport", "git", "--git-history", "3", "--ssh-listen", "127.0.0.1:0")
	if r.code == 0 || !strings.Contains(r.stderr, "holds .env, which the export hides") || !strings.Contains(r.stderr, first[:12]) {
		t.Fatalf("--git-history 3 over a commit holding .env: exit %d\n%s", r.code, r.stderr)
	}
	r = c.run("export", ws, "--peer", x.url, "--prompt", "look", "--transport", "git", "--git-history", "2", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("--git-history 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	out := r.stdout + r.stderr
	for _, want := range []string{"commits: 3", "log: the lent directory (awcp export view),c3,c2 without it,", "first: absent"} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent's clone: lacks %q\n%s", want, out)
		}
	}
}

// Attempts over git: each attempt its own lent repository and result
// branch; compare counts each one's lines, and applying one (with its
// agent's commit) discards the other.
func TestGitTransportAttempts(t *testing.T) {
	slow(t)
	parallel(t)
	var peers []string
	for _, v := range []string{"2", "3"} {
		x := startExecutor(t, `sed -i 's/^x = 1$/x = `+v+`/' calc.txt; git commit -qam "x is `+v+`"; echo "x is `+v+`"`, "--transports", "git")
		peers = append(peers, "--peer", x.url)
	}
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"calc.txt": "a\nx = 1\nz\n"})
	r := c.run(append([]string{"export", ws, "--prompt", "set x", "--transport", "git", "--ssh-listen", "127.0.0.1:0"}, peers...)...)
	if r.code != 0 {
		t.Fatalf("export to two peers over git: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Count(r.stdout, "+1 -1") != 2 {
		t.Errorf("the comparison does not show two one-line changes:\n%s", r.stdout)
	}
	var chosen string
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.Contains(line, "x is 3") {
			chosen = strings.Fields(line)[0]
		}
	}
	if chosen == "" {
		t.Fatalf("no attempt says x is 3:\n%s", r.stdout)
	}
	if a := c.run("apply", chosen); a.code != 0 {
		t.Fatalf("apply %s: exit %d\n%s%s", chosen, a.code, a.stdout, a.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "calc.txt")); string(b) != "a\nx = 3\nz\n" {
		t.Errorf("calc.txt after apply: %q", b)
	}
	noLentRepos(t, c)
}

// ownerGit runs git in the owner's directory ws, as the owner, and
// returns its output.
func ownerGit(t *testing.T, ws string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=owner", "GIT_AUTHOR_EMAIL=o@x", "GIT_COMMITTER_NAME=owner", "GIT_COMMITTER_EMAIL=o@x")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
}

// Scopes over git: each executor's clone holds the whole directory, and
// what it changes outside its scope does not come in.
func TestGitTransportScopes(t *testing.T) {
	slow(t)
	parallel(t)
	agent := func(mine, other string) string {
		return `echo "` + mine + `" > ` + mine + `/out.txt; echo intruder > ` + other + `/intrude.txt; git add -A; git commit -qm "both"`
	}
	xa := startExecutor(t, agent("a", "b"), "--transports", "git")
	xb := startExecutor(t, agent("b", "a"), "--transports", "git")
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"a/keep.txt": "a\n", "b/keep.txt": "b\n"})
	r := c.run("export", ws, "--prompt", "split", "--transport", "git", "--scope", "a="+xa.url, "--scope", "b="+xb.url, "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("export with two scopes over git: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, s := range []string{"a", "b"} {
		if b, _ := os.ReadFile(filepath.Join(ws, s, "out.txt")); string(b) != s+"\n" {
			t.Errorf("%s/out.txt: %q", s, b)
		}
		if _, err := os.Stat(filepath.Join(ws, s, "intrude.txt")); err == nil {
			t.Errorf("the other scope's agent wrote %s/intrude.txt", s)
		}
	}
}

// The daemon holding a git delegation is restarted while the agent works,
// on the same SSH port: the repository is lent again, and the push at the
// end comes in.
func TestGitTransportSurvivesADaemonRestart(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `sleep 4; echo "after the restart" > late.txt`, "--transports", "git")
	c := newCtl(t)
	sshAddr := freeAddr(t)
	_, stop := c.serve("--ssh-listen", sshAddr)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"readme.txt": "hello\n"})
	r := c.run("export", ws, "--peer", x.url, "--prompt", "work", "--transport", "git", "--background")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	c.waitState(id, "running")
	stop()
	log, _ := c.serve("--ssh-listen", sshAddr)
	d := c.waitStateWithin(id, "completed", 30*time.Second)
	if b, _ := os.ReadFile(filepath.Join(ws, "late.txt")); string(b) != "after the restart\n" {
		t.Fatalf("late.txt = %q (state %s)\ndaemon:\n%s", b, d.State, log.String())
	}
}

// noLentRepos waits (10 s at most) until c's delegator keeps no lent
// repository: its clean-up may follow the delegation's end.
func noLentRepos(t *testing.T, c *ctl) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left, _ := filepath.Glob(filepath.Join(c.state, "git", "*"))
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delegator kept %v", left)
		}
	}
}
