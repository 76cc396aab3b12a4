package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScopesSplitATask: one directory, two executors, each lent the whole
// of it read-write only under its scope, at once. Each agent writes in its
// scope and tries the other's: its own writes land, the other's scope is
// untouched, and the refusals are counted; the two ran at the same time.
// A later export whose scope overlaps a running one waits with --wait,
// and starts once that one ended.
func TestScopesSplitATask(t *testing.T) {
	slow(t)
	parallel(t)
	agent := func(mine, other string) string {
		return `date +%s.%N > ` + mine + `/start; printf '%s' "$AWCP_PROMPT" > ` + mine + `/prompt.txt; sleep 2; echo "` + mine + `" > ` + mine + `/out.txt; ` +
			`echo intruder > ` + other + `/intrude.txt 2>/dev/null; date +%s.%N > ` + mine + `/end; echo "did ` + mine + `"`
	}
	xa := startExecutor(t, agent("a", "b"))
	xb := startExecutor(t, agent("b", "a"))
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"a/keep.txt": "a\n", "b/keep.txt": "b\n", "top.txt": "top\n"})
	r := c.run("export", ws, "--prompt", "split", "--scope", "a="+xa.url, "--scope", "b="+xb.url, "--scope-prompt", "a=do the a part",
		"--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("export with two scopes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("export with two scopes:\n%s", r.stdout)
	for _, s := range []string{"a", "b"} {
		if b, _ := os.ReadFile(filepath.Join(ws, s, "out.txt")); string(b) != s+"\n" {
			t.Errorf("%s/out.txt: %q", s, b)
		}
		if _, err := os.Stat(filepath.Join(ws, s, "intrude.txt")); err == nil {
			t.Errorf("the other scope's agent wrote %s/intrude.txt", s)
		}
	}
	if strings.Count(r.stdout, "refused: ") != 2 || strings.Count(r.stdout, " completed") != 2 {
		t.Errorf("the report does not show both completed with their refusals:\n%s", r.stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a", "prompt.txt")); !strings.Contains(string(b), "split\n\ndo the a part") || !strings.Contains(string(b), "Change only files under a/") {
		t.Errorf("a's agent's prompt: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "b", "prompt.txt")); strings.Contains(string(b), "do the a part") {
		t.Errorf("b's agent got a's prompt: %q", b)
	}
	// At once: each started before the other ended.
	at := func(p string) float64 {
		b, _ := os.ReadFile(filepath.Join(ws, p))
		f, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		return f
	}
	if !(at("a/start") < at("b/end") && at("b/start") < at("a/end")) {
		t.Errorf("the two scopes did not run at once: a %v–%v, b %v–%v", at("a/start"), at("a/end"), at("b/start"), at("b/end"))
	}

	// --wait: a scope held by a running delegation.
	holder := startExecutor(t, `while [ ! -e release ]; do sleep 0.1; done; echo held`)
	r = c.run("export", ws, "--prompt", "hold a", "--peer", holder.url, "--scope", "a", "--background", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("the holding export: exit %d\n%s", r.code, r.stderr)
	}
	first := strings.TrimSpace(r.stdout)
	c.waitState(first, "running")
	os.MkdirAll(filepath.Join(ws, "a", "sub"), 0o755)
	if r := c.run("export", ws, "--prompt", "also a", "--peer", xa.url, "--scope", "a/sub"); r.code == 0 || !strings.Contains(r.stderr, first) {
		t.Fatalf("an overlapping scope went through while a holds it, or the refusal does not name the holder: exit %d\n%s", r.code, r.stderr)
	}
	waiter := c.start("export", ws, "--prompt", "also a", "--peer", xa.url, "--scope", "a/sub", "--wait", "--ssh-listen", "127.0.0.1:0")
	time.Sleep(time.Second)
	os.WriteFile(filepath.Join(ws, "release"), nil, 0o644)
	if err := waiter.Wait(); err != nil {
		t.Fatalf("the waiting export: %v\n%s", err, waiter.stderr.String())
	}
	if !strings.Contains(waiter.stderr.String(), "waiting: delegation "+first) {
		t.Errorf("the waiting export did not say what it waited for:\n%s", waiter.stderr.String())
	}

	// --wait with one command's scopes (PATH=PEER), one of them held:
	// the group waits too, then runs (spec §6.5), rather than failing.
	os.Remove(filepath.Join(ws, "release"))
	r = c.run("export", ws, "--prompt", "hold a again", "--peer", holder.url, "--scope", "a", "--background", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("the second holding export: exit %d\n%s", r.code, r.stderr)
	}
	second := strings.TrimSpace(r.stdout)
	c.waitState(second, "running")
	group := c.start("export", ws, "--prompt", "both", "--scope", "a/sub="+xa.url, "--scope", "b="+xb.url, "--wait", "--ssh-listen", "127.0.0.1:0")
	groupDone := make(chan error, 1)
	go func() { groupDone <- group.Wait() }()
	select {
	case err := <-groupDone:
		t.Fatalf("the group did not wait for a/, held: %v\n%s", err, group.stderr.String())
	case <-time.After(time.Second):
	}
	os.WriteFile(filepath.Join(ws, "release"), nil, 0o644)
	if err := <-groupDone; err != nil {
		t.Fatalf("the waiting group: %v\n%s", err, group.stderr.String())
	}
	if !strings.Contains(group.stderr.String(), "waiting: delegation "+second) {
		t.Errorf("the waiting group did not say what it waited for:\n%s", group.stderr.String())
	}
}

// TestOverlappingScopesStartNothing: scopes of one command that overlap
// (a and a/sub), or one that is no directory, refuse the whole command
// before anything starts: no delegation, no agent run, the directory
// byte-identical.
func TestOverlappingScopesStartNothing(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `echo ran > ran.txt`)
	c := newCtl(t)
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"a/sub/keep.txt": "k\n", "b/keep.txt": "b\n"})
	before := tree(t, ws)
	for _, scopes := range [][]string{{"a=" + x.url, "a/sub=" + x.url}, {"a/sub=" + x.url, "a/=" + x.url}, {"b=" + x.url, "missing=" + x.url}} {
		args := []string{"export", ws, "--prompt", "split", "--transport", "archive"}
		for _, s := range scopes {
			args = append(args, "--scope", s)
		}
		r := c.run(args...)
		if r.code == 0 || !strings.Contains(r.stderr, "WORKSPACE_INVALID") {
			t.Errorf("export --scope %v: exit %d, want a refusal\n%s%s", scopes, r.code, r.stdout, r.stderr)
		}
		if ds := c.status(); len(ds) != 0 {
			t.Fatalf("export --scope %v started %d delegations before refusing", scopes, len(ds))
		}
	}
	sameTree(t, ws, before)
}
