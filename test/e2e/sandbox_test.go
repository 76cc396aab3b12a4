package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAgentSandbox: two delegations side by side on one executor, live
// mounts. The second one's agent, as an attacker, tries to read and
// write the first one's mounted files, to read the executor's state dir
// (its store), /root, the first agent's /proc/PID/environ and the
// daemon's /proc/PID/cmdline (its --token), to write into /etc and the
// daemon's home, to escape through a symlink it makes in its temporary
// dir, to signal the daemon, to connect to a socket open to every user
// in /run, to read the host's /tmp and /dev/shm, /etc/shadow, and the
// first delegation's mount in its mountinfo: each is refused, while its
// own work — files, a shell, git, a Go build, its temporary dir —
// succeeds as a user of its own, and --sandbox-allow grants exactly what
// it names. With --sandbox off the same probes succeed: the refusals are
// the sandbox's. Either way, with the executor's token (as if it had
// leaked) and without a certificate or with one of its own, the agent
// neither sees the first delegation in the executor's status nor reads
// its events nor cancels it: a delegation is its delegator's alone.
func TestAgentSandbox(t *testing.T) {
	slow(t)
	parallel(t)
	script, err := filepath.Abs(filepath.Join("testdata", "sandbox_agent.sh"))
	if err != nil {
		t.Fatal(err)
	}
	mustRefuse := []string{"cat ROOT/FIRST/notes.txt", "sh -c echo intruder >> 'ROOT/FIRST/notes.txt'", "sh -c ls 'ROOT' | grep -q 'FIRST'", "sh -c ls 'STATE' | grep -q executor.db",
		"cat STATE/executor.db", "ls /root", "cat /proc/FIRSTPID/environ", "grep -q sandbox-token /proc/DAEMON/cmdline",
		"sh -c echo x > /etc/awcp-sandbox-probe", "sh -c echo x > 'HOME/awcp-sandbox-probe'", "/escape/executor.db",
		"kill -0 DAEMON", "sh -c echo x > 'RO/written.txt'",
		"nc -U -z /run/MARKER.sock", "ls /tmp/MARKER /dev/shm/MARKER", "grep -q FIRST /proc/self/mountinfo", "cat /etc/shadow"}
	mustWork := []string{"cat RO/granted.txt", "sh -c echo x > 'RW/written.txt'", "sh -c echo mine > own.txt",
		`sh -c echo tmp > "$TMPDIR/t" && cat "$TMPDIR/t"`, `sh -c git init -q "$TMPDIR/repo"`, "sh -c mkdir -p hello"}
	home, err := os.UserHomeDir() // the daemon's
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"auto", "off"} {
		t.Run(mode, func(t *testing.T) {
			ro, rw := t.TempDir(), t.TempDir()
			writeFiles(t, ro, map[string]string{"granted.txt": "granted\n"})
			token := "sandbox-token-" + mode
			x := startTLSExecutor(t, "sh '"+script+"'", "--token", token, "--sandbox", mode,
				"--sandbox-allow", ro, "--sandbox-allow", rw+":rw")
			state := filepath.Join(filepath.Dir(x.workRoot), "state")
			c := newCtl(t)
			c.tls = true
			peer := []string{"--peer", "https://" + x.addr, "--peer-key", x.key(t)}
			// A socket open to every user in /run, and markers in the
			// host's /tmp and /dev/shm.
			marker := fmt.Sprintf("awcp-e2e-%d-%s", os.Getpid(), mode)
			sock, err := net.Listen("unix", "/run/"+marker+".sock")
			if err != nil {
				t.Fatal(err)
			}
			defer sock.Close()
			os.Chmod("/run/"+marker+".sock", 0o777)
			go func() {
				for {
					c, err := sock.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			for _, dir := range []string{"/tmp", "/dev/shm"} {
				os.WriteFile(filepath.Join(dir, marker), nil, 0o644)
				defer os.Remove(filepath.Join(dir, marker))
			}
			first, second := sampleWorkspace(t), filepath.Join(t.TempDir(), "second")
			writeFiles(t, first, map[string]string{"notes.txt": "the first delegation's\n"})
			writeFiles(t, second, map[string]string{"x": "x\n"})

			r := c.run(append([]string{"export", first, "--token", token, "--prompt", "hold " + rw, "--background", "--ssh-listen", "127.0.0.1:0"}, peer...)...)
			if r.code != 0 {
				t.Fatalf("the first export: exit %d\n%s", r.code, r.stderr)
			}
			firstID := strings.TrimSpace(r.stdout)
			var firstPID int
			for deadline := time.Now().Add(30 * time.Second); firstPID == 0; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the first agent never ran: %+v", c.status())
				}
				firstPID = agentPID(firstID, "AWCP_PROMPT=hold")
			}
			defer os.WriteFile(filepath.Join(first, "release"), nil, 0o644)

			subst := strings.NewReplacer("ROOT", x.workRoot, "FIRSTPID", strconv.Itoa(firstPID), "FIRST", firstID, "STATE", state,
				"DAEMON", strconv.Itoa(x.cmd.Process.Pid), "RO", ro, "RW", rw, "HOME", home, "MARKER", marker)
			_, port, _ := net.SplitHostPort(x.addr)
			r = c.run(append([]string{"export", second, "--token", token, "--prompt",
				strings.Join([]string{"probe", strconv.Itoa(x.cmd.Process.Pid), state, x.workRoot, firstID, strconv.Itoa(firstPID), ro, rw, home,
					port, token, marker}, " ")}, peer...)...)
			if r.code != 0 {
				t.Fatalf("the probing export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			probes, err := os.ReadFile(filepath.Join(second, "probes.txt"))
			if err != nil {
				t.Fatal(err)
			}
			defer os.Remove("/etc/awcp-sandbox-probe")
			defer os.Remove(filepath.Join(home, "awcp-sandbox-probe"))
			has := func(verdict, probe string) bool {
				probe = subst.Replace(probe)
				for _, line := range strings.Split(string(probes), "\n") {
					if rest, ok := strings.CutPrefix(line, verdict+": "); ok && strings.Contains(rest, probe) {
						return true
					}
				}
				return false
			}
			work := mustWork
			if mode == "auto" {
				work = append(work, "sh -c test \"$(id -un)\" = awcp-agent") // a user of its own
			}
			for _, p := range work {
				if !has("ok", p) {
					t.Errorf("its own work failed: %s\n%s", subst.Replace(p), probes)
				}
			}
			for _, p := range mustRefuse {
				want := "refused"
				if mode == "off" {
					want = "ok"
				}
				if !has(want, p) {
					t.Errorf("%s: want %s: %s\n%s", mode, want, subst.Replace(p), probes)
				}
			}
			// The executor's API: answers the agent (the token is right),
			// and shows it nothing of the first delegation's, and lets it
			// do nothing to it — with no certificate or one of its own.
			for _, cert := range []string{"none", "own"} {
				for _, want := range []string{
					"api " + cert + ": GET /awcp/status: 200, first listed: 0",
					"api " + cert + ": GET events: 403",
					"api " + cert + ": POST cancel: 403",
				} {
					if !bytes.Contains(probes, []byte(want)) {
						t.Errorf("%s: no %q in the agent's probes:\n%s", mode, want, probes)
					}
				}
			}
			notes, _ := os.ReadFile(filepath.Join(first, "notes.txt"))
			if intruded := bytes.Contains(notes, []byte("intruder")); intruded != (mode == "off") {
				t.Errorf("%s: the first delegation's notes.txt: %q", mode, notes)
			}
			m := regexp.MustCompile(`delegation (\S+): lending`).FindStringSubmatch(r.stderr)
			if m == nil {
				t.Fatalf("the probing export did not name its delegation:\n%s", r.stderr)
			}
			out := c.run("output", m[1])
			if sandboxed := strings.Contains(out.stdout, "sandbox: landlock ABI"); sandboxed != (mode == "auto") {
				t.Errorf("%s: the delegation's notes on its sandbox:\n%s", mode, out.stdout)
			}
			os.WriteFile(filepath.Join(first, "release"), nil, 0o644)
			c.run("output", firstID, "--block", "--timeout", "30s")
			for _, d := range c.status() {
				if d.ID == firstID && d.State != "completed" {
					t.Errorf("%s: the first delegation ended %s, not completed: the agent reached it", mode, d.State)
				}
			}
		})
	}
}

// agentPID is the pid (in this PID namespace) of a process of delegation
// id's agent whose environment holds every one of also, found by its
// environment as it started; 0 if none runs. The sandbox's helper, the
// agent's parent, is not it.
func agentPID(id string, also ...string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		env, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(env, []byte("AWCP_DELEGATION_ID="+id+"\x00")) || bytes.Contains(env, []byte("_AWCP_SANDBOX=")) {
			continue
		}
		all := true
		for _, a := range also {
			all = all && bytes.Contains(env, []byte(a))
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && all {
			return pid
		}
	}
	return 0
}
