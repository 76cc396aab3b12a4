package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// orphanAgent waits when told to, and otherwise leaves a note.
const orphanAgent = `case "$AWCP_PROMPT" in wait) echo waiting; sleep 60;; *) echo "$AWCP_PROMPT" > note.txt;; esac`

// An export that dies with its delegation running — killed, or its
// terminal gone — must not keep the directory lent for the rest of the
// lease. With no daemon, the next command ends it (the executor's agent
// stops, the directory is free); a running daemon takes over what it can
// serve (an archive delegation runs to its end, its result applied) and
// ends the rest (a live mount whose SSH server died with the export).
func TestDeadExportDoesNotKeepItsDirectory(t *testing.T) {
	slow(t)
	parallel(t)
	t.Run("no daemon: the next export ends it", func(t *testing.T) {
		// The dead export's SSH server went with it: what the mount still
		// owes it waits for it only this long.
		x := startExecutor(t, orphanAgent, "--reconnect-bound", "3s")
		c := newCtl(t)
		ws := sampleWorkspace(t)
		first := c.start("export", ws, "--peer", x.url, "--prompt", "wait", "--ssh-listen", "127.0.0.1:0")
		d := c.waitState("", "running")
		first.Process.Kill()
		first.Wait()

		r := c.run("export", ws, "--peer", x.url, "--prompt", "second", "--ssh-listen", "127.0.0.1:0")
		if r.code != 0 {
			t.Fatalf("export of the directory the dead export held: exit %d\n%s", r.code, r.stderr)
		}
		if note, _ := os.ReadFile(filepath.Join(ws, "note.txt")); string(note) != "second\n" {
			t.Fatalf("the second delegation's note: %q", note)
		}
		r = c.run("status", d.ID)
		if out := r.stdout + r.stderr; !strings.Contains(out, " cancelled\n") || !strings.Contains(out, "CANCELLED: the process that followed it (pid ") {
			t.Fatalf("status of the dead export's delegation:\n%s%s", r.stdout, r.stderr)
		}
		waitWorkRootEmptyWithin(t, x, 20*time.Second) // the waiting agent was stopped, its mount gone
	})

	t.Run("a daemon takes over an archive delegation", func(t *testing.T) {
		x := startExecutor(t, `sleep 2; `+orphanAgent)
		c := newCtl(t)
		c.serve("--ssh-listen", "127.0.0.1:0")
		ws := sampleWorkspace(t)
		first := c.start("export", ws, "--peer", x.url, "--prompt", "adopted", "--transport", "archive")
		d := c.waitState("", "running")
		first.Process.Kill()
		first.Wait()
		c.waitStateWithin(d.ID, "completed", 30*time.Second)
		if note, _ := os.ReadFile(filepath.Join(ws, "note.txt")); string(note) != "adopted\n" {
			t.Fatalf("the adopted delegation's result was not applied: note %q", note)
		}
	})

	// A live mount or a git transport the executor dials names the dead
	// export's SSH port: the daemon cannot serve it, and ends it.
	for _, over := range []struct{ transport, agent, flag, value string }{
		{"sshfs", orphanAgent, "--reconnect-bound", "3s"},
		{"git", `sleep 3; echo late > late.txt`, "--transports", "git"},
	} {
		t.Run("a daemon ends a "+over.transport+" delegation it cannot serve", func(t *testing.T) {
			x := startExecutor(t, over.agent, over.flag, over.value)
			c := newCtl(t)
			c.serve("--ssh-listen", "127.0.0.1:0")
			ws := sampleWorkspace(t)
			first := c.start("export", ws, "--peer", x.url, "--prompt", "wait", "--transport", over.transport, "--ssh-listen", "127.0.0.1:0")
			d := c.waitState("", "running")
			first.Process.Kill()
			first.Wait()
			c.waitStateWithin(d.ID, "cancelled", 30*time.Second)
			waitWorkRootEmptyWithin(t, x, 20*time.Second)
			if _, err := os.Stat(filepath.Join(ws, "late.txt")); err == nil {
				t.Errorf("a result came in after its delegator died")
			}
			noLentRepos(t, c)
		})
	}
}

// An export whose output is a pipe closed early (`| head`) goes on to the
// end of its delegation: SIGPIPE does not kill it.
func TestExportOutlivesAClosedPipe(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `echo one; echo two; sleep 1; `+orphanAgent)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	cmd := c.command("export", ws, "--peer", x.url, "--prompt", "piped", "--ssh-listen", "127.0.0.1:0")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the first line
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	cmd.Wait()
	if note, _ := os.ReadFile(filepath.Join(ws, "note.txt")); string(note) != "piped\n" {
		t.Fatalf("the agent's note did not land: %q (exit: %v)", note, cmd.ProcessState)
	}
	if ds := c.status(); len(ds) != 1 || ds[0].State != "completed" {
		t.Fatalf("the delegation after its export's reader went away: %+v", ds)
	}
}

// waitStateWithin is waitState with a longer patience.
func (c *ctl) waitStateWithin(id, state string, d time.Duration) delegation {
	c.t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, del := range c.status() {
			if del.ID == id && del.State == state {
				return del
			}
		}
	}
	c.t.Fatalf("delegation %s never reached %s: %+v", id, state, c.status())
	return delegation{}
}

// waitWorkRootEmptyWithin waits up to d for the executor to clear its
// work root.
func waitWorkRootEmptyWithin(t *testing.T, x *executor, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ents, _ := os.ReadDir(x.workRoot); len(ents) == 0 {
			return
		}
	}
	x.workRootEmpty(t)
}
