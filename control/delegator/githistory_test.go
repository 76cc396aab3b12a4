//go:build linux

package delegator_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
)

// An .env committed once, then removed, is hidden as a file but its
// content is in .git/objects. The agent on the live mount reads every
// object git has (`git cat-file --batch-all-objects`) and every file, and
// counts the secret: admission refuses such a repository, naming the path
// and how to lend without it; lent with --hide .git, the agent finds the
// secret nowhere; lent with --lend-hidden-history (the owner's choice),
// it does — which is what the refusal spared.
func TestHiddenPathInGitHistoryIsNotLent(t *testing.T) {
	const secret = "SECRET-VALUE-4242"
	f := newLiveFixture(t, `n=$( { git -c safe.directory='*' cat-file --batch-all-objects --batch 2>/dev/null; cat $(find . -type f) 2>/dev/null; } | grep -c `+secret+`); echo "$n" > found.txt; echo ok`)
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", f.dir, "-c", "user.email=o@x", "-c", "user.name=owner"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.WriteFile(filepath.Join(f.dir, ".env"), []byte("TOKEN="+secret+"\n"), 0o600)
	git("init", "-q", "-b", "main")
	git("add", "-A")
	git("commit", "-q", "-m", "with the secret")
	git("rm", "-q", "--cached", ".env")
	git("commit", "-q", "-m", "secret removed from the index")

	_, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "look", Transport: "sshfs"})
	if err == nil || !strings.Contains(err.Error(), ".env") {
		t.Fatalf("a repository whose history holds the hidden .env was admitted: %v", err)
	}
	if !strings.Contains(err.Error(), "--hide .git") {
		t.Errorf("the refusal does not say how to lend without the history: %v", err)
	}

	found := func(req delegator.ExportRequest) string {
		t.Helper()
		req.Dir, req.Peer, req.PeerKey, req.Prompt, req.Transport = f.dir, f.exec.URL(), f.exec.Key(), "look", "sshfs"
		d, err := f.dlg.Create(req)
		if err != nil {
			t.Fatal(err)
		}
		end, err := f.dlg.Run(context.Background(), d.ID)
		if err != nil || end.State != lease.Completed {
			t.Fatalf("%+v %v", end, err)
		}
		b, _ := os.ReadFile(filepath.Join(f.dir, "found.txt"))
		os.Remove(filepath.Join(f.dir, "found.txt"))
		return strings.TrimSpace(string(b))
	}
	if n := found(delegator.ExportRequest{Hide: []string{".git"}}); n != "0" {
		t.Errorf("lent with --hide .git, the agent found the secret %s time(s)", n)
	}
	if n := found(delegator.ExportRequest{LendHiddenHistory: true}); n == "0" || n == "" {
		t.Errorf("lent with --lend-hidden-history, the agent found the secret %q times: the probe sees nothing", n)
	}

	// A history that cannot be looked through in time is not lent either
	// (a look that ran out is no look).
	delegator.SetGitHistoryTimeout(t, time.Millisecond)
	_, err = f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "look", Transport: "sshfs"})
	if err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("a history not looked through in time was admitted: %v", err)
	}
}
