package sshd

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/internal/gitrun"
)

// The git transport's subsystems, tried with OpenSSH's client and git as
// an executor holding a delegation's certificate would: its repository
// clones and takes a push to refs/heads/result (of what is new: the lent
// tree is not sent back), and nothing else does —
// not a push to the base branch or a delete, not a push past the
// delegation's bound, not SFTP beside it, not another delegation's
// repository, not a read-only delegation's push.
func TestGitSubsystemsAsAnAttacker(t *testing.T) {
	slow(t)
	need(t, "ssh", "git")
	f := newFixture(t)
	repo := filepath.Join(t.TempDir(), "lent.git")
	git := func(dir string, args ...string) (string, error) {
		out, err := gitrun.Run(t.Context(), dir, []string{"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x"}, nil, args...)
		return strings.TrimSpace(string(out)), err
	}
	must := func(dir string, args ...string) string {
		t.Helper()
		out, err := git(dir, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	seed := t.TempDir()
	must(seed, "init", "-q", "-b", "awcp")
	os.WriteFile(filepath.Join(seed, "a.txt"), []byte("lent\n"), 0o644)
	// The lent tree is larger than the delegation's bound: a push sends
	// only what is new, not the tree it was lent (GitHaveRef).
	lent := make([]byte, 200<<10)
	rand.Read(lent)
	os.WriteFile(filepath.Join(seed, "lent.bin"), lent, 0o644)
	must(seed, "add", "a.txt", "lent.bin")
	must(seed, "commit", "-qm", "view")
	must("", "clone", "-q", "--bare", seed, repo)
	base := must(seed, "rev-parse", "HEAD")
	must("", "--git-dir="+repo, "update-ref", GitHaveRef, base) // as the delegator lends it

	grant := func(id string, exp Export) (key, kh, host, port string) {
		f.srv.Grant(id, exp, time.Now().Add(time.Hour))
		cred, err := f.auth.Issue(id, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return openSSHFiles(t, f, cred)
	}
	key, kh, host, port := grant("dlg_gitlent", Export{Git: &GitExport{Repo: repo, MaxReceive: 64 << 10}})
	// What git runs as its upload-pack or receive-pack: ssh -s, asking
	// for the subsystem by name (git's path argument is dropped).
	via := func(key, kh, id, subsystem string) string {
		args := append(sshOptions(key, kh), "-p", port, "-s", id+"@"+host, subsystem)
		return "sh -c 'exec ssh " + strings.Join(args, " ") + "' --"
	}
	work := filepath.Join(t.TempDir(), "clone")
	if _, err := git("", "clone", "-q", "-u", via(key, kh, "dlg_gitlent", SubsystemGitUpload), "file:///awcp", work); err != nil {
		t.Fatalf("the delegation's own clone: %v", err)
	}
	os.WriteFile(filepath.Join(work, "a.txt"), []byte("changed\n"), 0o644)
	must(work, "commit", "-qam", "work")
	push := func(key, kh, id, refspec string) error {
		_, err := git(work, "push", "-q", "--receive-pack="+via(key, kh, id, SubsystemGitReceive), "file:///awcp", refspec)
		return err
	}
	if err := push(key, kh, "dlg_gitlent", "HEAD:refs/heads/result"); err != nil {
		t.Fatalf("the push of a one-line change to refs/heads/result, within a bound smaller than the lent tree: %v", err)
	}
	if err := push(key, kh, "dlg_gitlent", "HEAD:refs/heads/awcp"); err == nil {
		t.Error("a push moved the base branch")
	}
	if err := push(key, kh, "dlg_gitlent", ":refs/heads/result"); err == nil {
		t.Error("a push deleted the result")
	}
	if got := must("", "--git-dir="+repo, "rev-parse", "refs/heads/awcp"); got != base {
		t.Errorf("the base branch moved to %s", got)
	}
	// Past the bound: 300 KB of noise in one push, refused whole.
	noise := make([]byte, 300<<10)
	rand.Read(noise) // incompressible
	os.WriteFile(filepath.Join(work, "noise.bin"), noise, 0o644)
	must(work, "add", "noise.bin")
	must(work, "commit", "-qm", "noise")
	was := must("", "--git-dir="+repo, "rev-parse", "refs/heads/result")
	if err := push(key, kh, "dlg_gitlent", "HEAD:refs/heads/result"); err == nil {
		t.Error("a push past --max-write-bytes was taken")
	}
	if got := must("", "--git-dir="+repo, "rev-parse", "refs/heads/result"); got != was {
		t.Error("the result moved to a push past the bound")
	}

	// SFTP beside the repository: refused.
	sftp := exec.Command("ssh", append(sshOptions(key, kh), "-p", port, "-s", "dlg_gitlent@"+host, "sftp")...)
	sftp.Stdin = strings.NewReader("")
	if out, err := sftp.CombinedOutput(); err == nil {
		t.Errorf("SFTP served to a git delegation: %s", out)
	}
	// Another delegation, lent a directory: no repository for it.
	dkey, dkh, _, _ := grant("dlg_gitdir", Export{Dir: t.TempDir()})
	if _, err := git("", "clone", "-q", "-u", via(dkey, dkh, "dlg_gitdir", SubsystemGitUpload), "file:///awcp", filepath.Join(t.TempDir(), "x")); err == nil {
		t.Error("a directory's delegation cloned a repository")
	}
	// Its certificate naming the other delegation's user: refused.
	if _, err := git("", "clone", "-q", "-u", via(dkey, dkh, "dlg_gitlent", SubsystemGitUpload), "file:///awcp", filepath.Join(t.TempDir(), "y")); err == nil {
		t.Error("another delegation's certificate cloned the repository")
	}
	// Read-only: nothing may be pushed.
	rkey, rkh, _, _ := grant("dlg_gitro", Export{Git: &GitExport{Repo: repo}, ReadOnly: true})
	if err := push(rkey, rkh, "dlg_gitro", "HEAD:refs/heads/result"); err == nil {
		t.Error("a read-only delegation pushed")
	}
}
