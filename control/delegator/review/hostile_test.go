package review

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A staged result is the executor's: its names and its lines reach the
// owner's terminal, and its .git changes the owner's git. diff, --stat
// and --name-status print no control byte of the executor's (a window
// title, a cleared screen, a carriage return hiding a line) — names
// quoted as git quotes them, content escaped — and show every change to
// what git runs or obeys in full; apply writes those only when asked.
func TestHostileResultReviewedSafely(t *testing.T) {
	evilName := "ok.txt\x1b]0;owned\x07\r\x1b[2Jreal.txt"
	owner := t.TempDir()
	write(t, filepath.Join(owner, "a.txt"), "one\n")
	for _, d := range []string{".git/objects/ab", ".git/hooks"} { // the owner's repository
		os.MkdirAll(filepath.Join(owner, d), 0o755)
	}
	dir := area(t, map[string]string{"a.txt": "one\n"}, map[string]string{
		"a.txt":                    "one\n\x1b[8mhidden by the terminal\x1b[0m\rtwo\n",
		evilName:                   "x\n",
		".git/config":              "[core]\n\tfsmonitor = touch /tmp/pwned\n",
		".git/hooks/post-checkout": "#!/bin/sh\ntouch /tmp/pwned\n",
		".git/objects/ab/cdef":     "blob",
	})
	r, err := FromArea(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, show := range map[string]func(*bytes.Buffer) error{
		"diff": func(b *bytes.Buffer) error { return r.Diff(b) }, "stat": func(b *bytes.Buffer) error { return r.Stat(b) },
		"name-status": func(b *bytes.Buffer) error { return r.NameStatus(b) },
	} {
		var b bytes.Buffer
		if err := show(&b); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.ContainsAny(out, "\x1b\x07\r") {
			t.Errorf("%s prints the executor's control bytes:\n%q", name, out)
		}
		if !strings.Contains(out, `ok.txt\x1b]0;owned\areal.txt`) && !strings.Contains(out, `ok.txt\x1b]0;owned\a\r\x1b[2Jreal.txt`) {
			t.Errorf("%s does not name the file quoted:\n%s", name, out)
		}
		if !strings.Contains(out, ".git/hooks/post-checkout") || !strings.Contains(out, ".git/config") {
			t.Errorf("%s hides the .git changes git would run:\n%s", name, out)
		}
		if name == "diff" && (!strings.Contains(out, "+\tfsmonitor = touch /tmp/pwned") || !strings.Contains(out, `\x1b[8mhidden`)) {
			t.Errorf("diff does not show the config line or the escaped content:\n%s", out)
		}
	}
	rep, err := r.Apply(owner, ".awcp-x", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".git/config", ".git/hooks/post-checkout"} {
		if _, err := os.Stat(filepath.Join(owner, p)); err == nil {
			t.Errorf("apply wrote %s without --allow-git-control", p)
		}
	}
	if !strings.Contains(strings.Join(rep.Ignored, "\n"), ".git/hooks/post-checkout") {
		t.Errorf("apply does not say what it left out: %v", rep.Ignored)
	}
	if _, err := os.Stat(filepath.Join(owner, ".git/objects/ab/cdef")); err != nil {
		t.Errorf("the agent's objects were not applied: %v", err)
	}
	if _, err := r.Apply(owner, ".awcp-x", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(owner, ".git/hooks/post-checkout")); err != nil {
		t.Errorf("apply --allow-git-control did not write the hook: %v", err)
	}
}

// apply --branch with the executor's names and summary: a name holding a
// newline and a tab cannot add an entry of its own making to the commit
// (here, one that would put the owner's blob at a path of its choosing),
// it is committed under its own name; and the summary's control bytes
// never reach the commit message, which git log prints raw.
func TestHostileResultBranchesSafely(t *testing.T) {
	work := t.TempDir()
	write(t, filepath.Join(work, "a.txt"), "one\n")
	git(t, work, "init", "-q", "-b", "main")
	git(t, work, "add", ".")
	git(t, work, "commit", "-qm", "base")
	blob := git(t, work, "rev-parse", "HEAD:a.txt")
	evil := "x\n100755 " + blob + "\tinjected.sh"
	res, err := FromArea(area(t, map[string]string{"a.txt": "one\n"}, map[string]string{"a.txt": "one\n", evil: "payload\n"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	commit, err := res.Branch(context.Background(), work, "awcp/hostile", "done\x1b]0;owned\x07\x1b[2J\rfine")
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Split(strings.TrimSuffix(git(t, work, "ls-tree", "-r", "-z", "--name-only", commit), "\x00"), "\x00")
	if want := []string{"a.txt", evil}; !slices.Equal(files, want) {
		t.Errorf("the commit holds %q, want %q: the name made an entry of its own, or was not committed under it", files, want)
	}
	if msg := git(t, work, "log", "-1", "--format=%B", commit); strings.ContainsAny(msg, "\x1b\x07\r") {
		t.Errorf("the commit message carries the executor's control bytes: %q", msg)
	}
}

// apply --branch of the git transport's commits: the agent commits
// symlinks leading out of the lent directory — absolute, climbing, through
// a directory of its own, beside links that stay inside — which a checkout
// of the branch would make in the owner's repository. Those leading out
// are left out of the replayed commits; those inside are kept.
func TestBranchFromCommitsLeavesLinksOut(t *testing.T) {
	owner := t.TempDir()
	work := filepath.Join(owner, "repo")
	write(t, filepath.Join(work, "a.txt"), "one\n")
	git(t, work, "init", "-q", "-b", "main")
	git(t, work, "add", ".")
	git(t, work, "commit", "-qm", "base")
	base := git(t, work, "rev-parse", "HEAD")

	agent := filepath.Join(t.TempDir(), "lent")
	git(t, owner, "clone", "-q", work, agent)
	links := map[string]string{
		"abs":        "/etc/passwd",
		"up":         "../outside",
		"sub/climb":  "../../outside",
		"sub/deeper": "../sub/../../x",
		"in":         "a.txt",
		"sub/back":   "../a.txt",
	}
	for name, target := range links {
		os.MkdirAll(filepath.Dir(filepath.Join(agent, name)), 0o755)
		if err := os.Symlink(target, filepath.Join(agent, name)); err != nil {
			t.Fatal(err)
		}
	}
	git(t, agent, "add", "-A")
	git(t, agent, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", "links")
	result := git(t, agent, "rev-parse", "HEAD")

	tip, n, err := BranchFromCommits(context.Background(), filepath.Join(agent, ".git"), base, result, work, "awcp/links", nil)
	if err != nil || n != 1 {
		t.Fatalf("BranchFromCommits: %v (%d commits)", err, n)
	}
	files := strings.Split(strings.TrimSuffix(git(t, work, "ls-tree", "-r", "-z", "--name-only", tip), "\x00"), "\x00")
	if want := []string{"a.txt", "in", "sub/back"}; !slices.Equal(files, want) {
		t.Errorf("the branch holds %q, want %q: a link leading out was replayed", files, want)
	}
}
