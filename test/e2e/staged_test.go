package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// stagedAgent changes the directory as a task would: a file the owner
// will also edit (a.txt), one only it changes (c.txt), one it creates and
// one it deletes; then it reads back its own write. With wait, it first
// waits until the owner's new file go.flag shows through the mount.
func stagedAgent(wait bool) string {
	script := `set -e
printf 'agent edit\n' >> a.txt
printf 'c by the agent\n' > c.txt
printf 'new\n' > created.txt
rm gone.txt
`
	if wait {
		script += "while [ ! -e go.flag ]; do sleep 0.05; done\n"
	}
	return script + `cat a.txt > readback.txt
echo "staged work" > "$AWCP_SUMMARY_FILE"`
}

func stagedWorkspace(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "project")
	writeFiles(t, dir, map[string]string{"a.txt": "a1\n", "b.txt": "b1\n", "c.txt": "c1\n", "gone.txt": "gone\n"})
	return dir
}

// On both transports, with --snapshot staged: the owner's directory is
// untouched while the agent works and after; the agent reads its own
// writes (and, on the live mount, the owner's new file, live); diff shows
// the change while it runs and after; apply lands it three-way — the
// owner's edit of another file kept, the file both changed kept as the
// owner's with the agent's beside it, named, exit 4 — and cannot be done
// twice; a second delegation's discard leaves its directory as it was and
// refuses a later apply.
func TestStagedResult(t *testing.T) {
	slow(t)
	parallel(t)
	for _, transport := range []string{"sshfs", "archive"} {
		t.Run(transport, func(t *testing.T) {
			live := transport == "sshfs"
			x := startExecutor(t, stagedAgent(live))
			c := newCtl(t)
			dir := stagedWorkspace(t)
			before := tree(t, dir)
			exp := c.start("export", dir, "--peer", x.url, "--prompt", "work", "--transport", transport,
				"--snapshot", "staged", "--ssh-listen", "127.0.0.1:0")
			var id string
			if live {
				// The agent has made its changes when diff shows the
				// last of them, gone.txt's removal; it waits for the
				// owner then.
				deadline := time.Now().Add(20 * time.Second)
				for {
					if ds := c.status(); len(ds) == 1 {
						id = ds[0].ID
						if r := c.run("diff", id, "--name-status"); strings.Contains(r.stdout, "D\tgone.txt") {
							if !strings.Contains(r.stdout, "A\tcreated.txt") || !strings.Contains(r.stdout, "M\ta.txt") {
								t.Errorf("diff --name-status while running:\n%s", r.stdout)
							}
							break
						}
					}
					if time.Now().After(deadline) {
						t.Fatalf("the agent's changes never showed in diff; executor log:\n%s", x.log)
					}
					time.Sleep(100 * time.Millisecond)
				}
				sameTree(t, dir, before) // while it works
				os.WriteFile(filepath.Join(dir, "go.flag"), []byte("go\n"), 0o644)
			}
			if err := exp.Wait(); err != nil {
				t.Fatalf("export: %v\n%s%s", err, exp.stdout.String(), exp.stderr.String())
			}
			out := exp.stdout.String()
			if id == "" {
				id = strings.Fields(out)[1]
			}
			if live {
				before["go.flag"] = tree(t, dir)["go.flag"]
			}
			sameTree(t, dir, before) // after it ended
			if !strings.Contains(out, "staged, pending review") {
				t.Errorf("the outcome does not say the result is staged:\n%s", out)
			}

			// The owner edits a file the agent changed too, and another.
			os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a1\nowner edit\n"), 0o644)
			os.WriteFile(filepath.Join(dir, "b.txt"), []byte("b1\nowner edit\n"), 0o644)

			r := c.run("diff", id)
			for _, want := range []string{"--- a/a.txt\n+++ b/a.txt\n", " a1\n+agent edit\n", "new file mode 100644\n--- /dev/null\n+++ b/created.txt\n@@ -0,0 +1 @@\n+new\n",
				"deleted file mode 100644\n--- a/gone.txt\n+++ /dev/null\n", "-c1\n+c by the agent\n", "+a1\n+agent edit\n"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("diff lacks %q:\n%s%s", want, r.stdout, r.stderr)
				}
			}
			if r := c.run("diff", id, "--stat"); !strings.Contains(r.stdout, "5 file(s) changed") {
				t.Errorf("diff --stat:\n%s%s", r.stdout, r.stderr)
			}

			r = c.run("apply", id)
			if r.code != 4 || !strings.Contains(r.stdout, "a.txt: changed on both sides") {
				t.Fatalf("apply: exit %d, want 4 with a.txt's conflict named:\n%s%s", r.code, r.stdout, r.stderr)
			}
			want := map[string]string{"a.txt": "a1\nowner edit\n", "b.txt": "b1\nowner edit\n", "c.txt": "c by the agent\n",
				"created.txt": "new\n", "readback.txt": "a1\nagent edit\n"}
			for name, content := range want {
				if b, err := os.ReadFile(filepath.Join(dir, name)); string(b) != content {
					t.Errorf("%s after apply: %q, %v; want %q", name, b, err, content)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "gone.txt")); !os.IsNotExist(err) {
				t.Errorf("gone.txt after apply: %v", err)
			}
			side, _ := filepath.Glob(filepath.Join(dir, "a.txt.awcp-*"))
			side = slices.DeleteFunc(side, func(p string) bool { return strings.HasSuffix(p, ".base") })
			if len(side) != 1 {
				t.Fatalf("the agent's a.txt was not saved beside the owner's: %v", side)
			}
			if b, _ := os.ReadFile(side[0]); string(b) != "a1\nagent edit\n" {
				t.Errorf("the agent's a.txt beside: %q", b)
			}
			if b, _ := os.ReadFile(side[0] + ".base"); string(b) != "a1\n" {
				t.Errorf("the lent a.txt beside: %q", b)
			}
			if r := c.run("apply", id); r.code == 0 {
				t.Errorf("a second apply went through:\n%s", r.stdout)
			}
			// Applied but for a conflict: not listed as applied.
			if r := c.run("status", id); !strings.Contains(r.stdout, "staged result applied but for 1 conflict") {
				t.Errorf("status after apply:\n%s", r.stdout)
			}

			// exportStaged runs a staged export of dir to its end (on the
			// live mount the agent waits for go.flag: made first) and
			// returns its id.
			exportStaged := func(dir string) string {
				t.Helper()
				if live {
					os.WriteFile(filepath.Join(dir, "go.flag"), []byte("go\n"), 0o644)
				}
				r := c.run("export", dir, "--peer", x.url, "--prompt", "work", "--transport", transport,
					"--snapshot", "staged", "--ssh-listen", "127.0.0.1:0")
				if r.code != 0 {
					t.Fatalf("export: %d\n%s%s", r.code, r.stdout, r.stderr)
				}
				return strings.Fields(r.stdout)[1]
			}

			// A second delegation, discarded.
			dir2 := stagedWorkspace(t)
			before2 := tree(t, dir2)
			id2 := exportStaged(dir2)
			if r := c.run("status"); !strings.Contains(r.stdout, "pending review") {
				t.Errorf("the list does not show the staged result:\n%s", r.stdout)
			}
			if r := c.run("discard", id2); r.code != 0 {
				t.Fatalf("discard: %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if live {
				before2["go.flag"] = tree(t, dir2)["go.flag"]
			}
			sameTree(t, dir2, before2)
			if r := c.run("apply", id2); r.code == 0 || !strings.Contains(r.stderr, "discarded") {
				t.Errorf("apply after discard: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			// A third, in a git work tree, recorded on a branch.
			dir3 := stagedWorkspace(t)
			gitIn := func(args ...string) string {
				cmd := exec.Command("git", append([]string{"-C", dir3, "-c", "user.name=o", "-c", "user.email=o@o"}, args...)...)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("git %v: %v\n%s", args, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			gitIn("init", "-q", "-b", "main")
			gitIn("add", ".")
			gitIn("commit", "-qm", "base")
			head := gitIn("rev-parse", "HEAD")
			id3 := exportStaged(dir3)
			status := gitIn("status", "--porcelain")
			if r := c.run("apply", id3, "--branch", "agent/work"); r.code != 0 || !strings.Contains(r.stdout, "recorded on branch agent/work") {
				t.Fatalf("apply --branch: %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if got := gitIn("show", "agent/work:c.txt"); got != "c by the agent" {
				t.Errorf("the branch's c.txt: %q", got)
			}
			if got := gitIn("rev-parse", "agent/work^"); got != head {
				t.Errorf("the branch's parent is %s, want HEAD %s", got, head)
			}
			if got := gitIn("ls-tree", "--name-only", "agent/work"); strings.Contains(got, "gone.txt") || !strings.Contains(got, "created.txt") {
				t.Errorf("the branch's files: %s", got)
			}
			if gitIn("rev-parse", "HEAD") != head || gitIn("status", "--porcelain") != status {
				t.Errorf("apply --branch moved HEAD or changed the work tree")
			}
			if b, _ := os.ReadFile(filepath.Join(dir3, "c.txt")); string(b) != "c1\n" {
				t.Errorf("apply --branch wrote c.txt in the work tree: %q", b)
			}

			if ents, _ := os.ReadDir(filepath.Join(c.state, "staged")); len(ents) != 0 {
				t.Errorf("staged results left after apply and discard: %v", ents)
			}
		})
	}
}

// snapshotsTranscript is what mcp_snapshots_client.mjs prints.
type snapshotsTranscript struct {
	Exception string          `json:"exception"`
	Stderr    string          `json:"stderr"`
	Tools     []string        `json:"tools"`
	Delegate  mcpResult       `json:"delegate"`
	Recover   mcpResult       `json:"recover"`
	WrongPeer mcpResult       `json:"wrongPeer"`
	Output    mcpResult       `json:"output"`
	Snapshots json.RawMessage `json:"snapshots"`
	Apply     mcpResult       `json:"apply"`
	Again     mcpResult       `json:"applyAgain"`
	Second    mcpResult       `json:"second"`
	Discard   mcpResult       `json:"discard"`
	Discarded mcpResult       `json:"applyDiscarded"`
}

// The reference's snapshot tools through the official MCP TypeScript SDK,
// across a restart of the MCP server: the first server starts a staged
// delegation in the background and goes away while the agent works; the
// second recovers it (delegate_recover; a wrong peer_url is refused),
// waits for its end, lists its snapshot with the files it changes, applies
// it (once: a second apply is refused), and discards another delegation's
// result, which then cannot be applied. The workspaces change only by the
// apply.
func TestSnapshotToolsOverMCP(t *testing.T) {
	slow(t)
	parallel(t)
	modules := nodeModules(t, mcpSDK)
	release := filepath.Join(t.TempDir(), "release")
	x := startExecutor(t, `case "$AWCP_PROMPT" in *wait*) while [ ! -e `+release+` ]; do sleep 0.1; done;; esac
printf 'by the agent\n' > agent.txt
printf 'a2\n' > a.txt
echo "did the work" > "$AWCP_SUMMARY_FILE"`)
	c := newCtl(t)
	ws, ws2 := stagedWorkspace(t), stagedWorkspace(t)
	before, before2 := tree(t, ws), tree(t, ws2)
	env := []string{"AWCP_CTL=" + filepath.Join(binDir, "awcp-ctl"), "STATE=" + c.state, "PEER=" + x.url, "WS=" + ws, "WS2=" + ws2}

	var first snapshotsTranscript
	runNode(t, modules, "mcp_snapshots_client.mjs", append(env, "PHASE=first"), &first)
	if first.Exception != "" || first.Delegate.IsError {
		t.Fatalf("first run: %s\n%s\n%s", first.Exception, first.Delegate.text(), first.Stderr)
	}
	for _, tool := range []string{"delegate_snapshots", "delegate_apply_snapshot", "delegate_discard_snapshot", "delegate_recover"} {
		if !slices.Contains(first.Tools, tool) {
			t.Errorf("the server offers no %s: %v", tool, first.Tools)
		}
	}
	id := first.Delegate.Structured.DelegationID
	os.WriteFile(release, nil, 0o644) // the agent goes on, with nobody following

	var second snapshotsTranscript
	runNode(t, modules, "mcp_snapshots_client.mjs", append(env, "PHASE=second", "ID="+id), &second)
	if second.Exception != "" {
		t.Fatalf("second run: %s\n%s", second.Exception, second.Stderr)
	}
	if second.Recover.IsError || !strings.Contains(second.Recover.text(), "re-attached") {
		t.Errorf("delegate_recover:\n%s", second.Recover.text())
	}
	if !second.WrongPeer.IsError {
		t.Errorf("delegate_recover with another executor's URL went through:\n%s", second.WrongPeer.text())
	}
	if second.Output.Structured.State != "completed" || !strings.Contains(second.Output.text(), "staged") {
		t.Fatalf("delegate_output after the recovery:\n%s\n%s", second.Output.text(), second.Stderr)
	}
	snaps := string(second.Snapshots)
	for _, want := range []string{`"status":"pending"`, `"recommended":true`, "A agent.txt +1 -0", "M a.txt +1 -1"} {
		if !strings.Contains(snaps, want) {
			t.Errorf("delegate_snapshots lacks %s:\n%s", want, snaps)
		}
	}
	if second.Apply.IsError {
		t.Fatalf("delegate_apply_snapshot:\n%s", second.Apply.text())
	}
	if !second.Again.IsError {
		t.Errorf("a second delegate_apply_snapshot went through:\n%s", second.Again.text())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "agent.txt")); string(b) != "by the agent\n" {
		t.Errorf("agent.txt after the apply: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "a2\n" {
		t.Errorf("a.txt after the apply: %q", b)
	}
	delete(before, "a.txt")
	after := tree(t, ws)
	delete(after, "a.txt")
	delete(after, "agent.txt")
	for p, d := range before {
		if after[p] != d {
			t.Errorf("%s changed by the apply: %q -> %q", p, d, after[p])
		}
	}
	if second.Second.IsError || second.Discard.IsError {
		t.Fatalf("the second delegation, discarded:\n%s\n%s", second.Second.text(), second.Discard.text())
	}
	if !second.Discarded.IsError {
		t.Errorf("applying a discarded snapshot went through:\n%s", second.Discarded.text())
	}
	sameTree(t, ws2, before2)
}

// --snapshot discard over the live mount: the agent works (and reads its
// own writes) on a staging area that is removed at the end; the owner's
// directory is as it was.
func TestDiscardModeLive(t *testing.T) {
	parallel(t)
	x := startExecutor(t, stagedAgent(false))
	c := newCtl(t)
	dir := stagedWorkspace(t)
	before := tree(t, dir)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "work", "--transport", "sshfs", "--snapshot", "discard", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 || !strings.Contains(r.stdout, "discarded") {
		t.Fatalf("export: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameTree(t, dir, before)
	if ents, _ := os.ReadDir(filepath.Join(c.state, "staged")); len(ents) != 0 {
		t.Errorf("kept after the discard: %v", ents)
	}
}
