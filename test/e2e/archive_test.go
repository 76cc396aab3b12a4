package e2e

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
)

// The agent used by the round trip: it edits, creates, deletes, sets an
// exec bit and reports through $AWCP_SUMMARY_FILE.
const editingAgent = `set -e
echo "reading the task"
test "$(cat)" = "$AWCP_PROMPT"
printf '%s\n' "$AWCP_PROMPT" >> README.md
mkdir -p docs && echo "new doc" > docs/guide.md
rm src/old.go
chmod +x scripts/build.sh
echo "Updated README, added docs/guide.md, removed src/old.go." > "$AWCP_SUMMARY_FILE"`

func TestArchiveRoundTrip(t *testing.T) {
	parallel(t)
	x := startExecutor(t, editingAgent)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	gitBefore, _ := os.ReadFile(filepath.Join(dir, ".git/HEAD"))

	r := c.run("export", dir, "--peer", x.url, "--prompt", "Add a line; don't run $(rm -rf /)", "--transport", "archive")
	if r.code != 0 {
		t.Fatalf("export exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"completed", "Updated README", "A docs/guide.md", "M README.md", "D src/old.go", "M scripts/build.sh"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "| reading the task") {
		t.Errorf("progress not shown:\n%s", r.stderr)
	}
	readme, _ := os.ReadFile(filepath.Join(dir, "README.md"))
	if string(readme) != "# sample\nAdd a line; don't run $(rm -rf /)\n" {
		t.Errorf("README.md = %q", readme)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "docs/guide.md")); err != nil || string(b) != "new doc\n" {
		t.Errorf("docs/guide.md = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "src/old.go")); !os.IsNotExist(err) {
		t.Error("src/old.go was not deleted")
	}
	if info, err := os.Stat(filepath.Join(dir, "scripts/build.sh")); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("exec bit not carried back: %v %v", info.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "main-link")); err != nil || target != "src/main.go" {
		t.Errorf("symlink lost: %q %v", target, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".git/HEAD")); !bytes.Equal(b, gitBefore) {
		t.Error(".git was touched")
	}
	x.workRootEmpty(t)

	ds := c.status()
	if len(ds) != 1 || ds[0].State != "completed" {
		t.Fatalf("status: %+v", ds)
	}
	out := c.run("output", ds[0].ID[:8])
	if out.code != 0 || !strings.Contains(out.stdout, "Updated README") {
		t.Fatalf("output: %d %s%s", out.code, out.stdout, out.stderr)
	}
}

// failCase runs export and checks the code, the exit status and that the
// directory is byte-identical afterwards.
func failCase(t *testing.T, c *ctl, dir, code string, args ...string) result {
	t.Helper()
	var before map[string]string
	if info, err := os.Stat(dir); err == nil && info.IsDir() {
		before = tree(t, dir)
	}
	r := c.run(append([]string{"export", dir}, args...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "error "+code+":") {
		t.Fatalf("want exit 1 with %s, got %d\nstdout:\n%s\nstderr:\n%s", code, r.code, r.stdout, r.stderr)
	}
	if before != nil {
		sameTree(t, dir, before)
	}
	return r
}

func TestExportErrorCodes(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `echo fine`)
	tokenX := startExecutor(t, `echo fine`, "--token", "s3cret")
	failing := startExecutor(t, `echo "compiling"; echo "main.go:3: undefined: foo" >&2; exit 2`)
	noMount := startExecutor(t, `echo fine`, "--transports", "archive")
	c := newCtl(t)

	t.Run("WORKSPACE_NOT_FOUND", func(t *testing.T) {
		r := failCase(t, c, filepath.Join(t.TempDir(), "missing"), control.CodeWorkspaceNotFound, "--peer", x.url, "--prompt", "p")
		if !strings.Contains(r.stderr, "hint:") {
			t.Fatalf("no hint:\n%s", r.stderr)
		}
	})
	t.Run("WORKSPACE_INVALID", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file.txt")
		os.WriteFile(f, []byte("x"), 0o644)
		failCase(t, c, f, control.CodeWorkspaceInvalid, "--peer", x.url, "--prompt", "p")
	})
	t.Run("WORKSPACE_TOO_LARGE single file", func(t *testing.T) {
		dir := t.TempDir()
		big, _ := os.Create(filepath.Join(dir, "data.bin"))
		big.Truncate(60 << 20) // sparse: costs nothing, counts 60 MB
		big.Close()
		// The spec's limits are the archive's; a live mount copies nothing
		// and takes far more (TestAdmissionFitsTheTransport).
		r := failCase(t, c, dir, control.CodeWorkspaceTooLarge, "--peer", x.url, "--prompt", "p", "--transport", "archive")
		if !strings.Contains(r.stderr, "File data.bin is too large") || !strings.Contains(r.stderr, "--hide data.bin keeps it out") || !strings.Contains(r.stderr, "--max-file-bytes") {
			t.Fatalf("hint missing:\n%s", r.stderr)
		}
	})
	t.Run("WORKSPACE_TOO_LARGE total", func(t *testing.T) {
		dir := t.TempDir()
		for i := range 3 {
			f, _ := os.Create(filepath.Join(dir, "part"+string(rune('a'+i))))
			f.Truncate(40 << 20)
			f.Close()
		}
		// node_modules does not count, so this alone would pass.
		nm := filepath.Join(dir, "node_modules")
		os.Mkdir(nm, 0o755)
		r := failCase(t, c, dir, control.CodeWorkspaceTooLarge, "--peer", x.url, "--prompt", "p", "--transport", "archive")
		// The culprits named, and how to keep them out.
		if !strings.Contains(r.stderr, "the largest files: parta (40MB), partb (40MB), partc (40MB)") ||
			!strings.Contains(r.stderr, "--hide parta --hide partb --hide partc keeps the largest out") {
			t.Fatalf("the largest files are not named:\n%s", r.stderr)
		}
		// A limit of the export's own applies to a live mount too.
		failCase(t, c, dir, control.CodeWorkspaceTooLarge, "--peer", x.url, "--prompt", "p", "--max-bytes", "100M")
	})
	t.Run("WORKSPACE_TOO_LARGE file count", func(t *testing.T) {
		dir := t.TempDir()
		for i := range 10_001 {
			os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644)
		}
		failCase(t, c, dir, control.CodeWorkspaceTooLarge, "--peer", x.url, "--prompt", "p", "--transport", "archive")
	})
	t.Run("AUTH_FAILED", func(t *testing.T) {
		failCase(t, c, sampleWorkspace(t), control.CodeAuthFailed, "--peer", tokenX.url, "--prompt", "p")
		failCase(t, c, sampleWorkspace(t), control.CodeAuthFailed, "--peer", tokenX.url, "--prompt", "p", "--token", "wrong")
		r := c.run("export", sampleWorkspace(t), "--peer", tokenX.url, "--prompt", "p", "--token", "s3cret")
		if r.code != 0 {
			t.Fatalf("right token refused: %s", r.stderr)
		}
	})
	t.Run("DEP_MISSING", func(t *testing.T) {
		failCase(t, c, sampleWorkspace(t), control.CodeDepMissing, "--peer", noMount.url, "--prompt", "p", "--transport", "sshfs")
	})
	t.Run("auto falls back to archive", func(t *testing.T) {
		r := c.run("export", sampleWorkspace(t), "--peer", noMount.url, "--prompt", "p")
		if r.code != 0 || !strings.Contains(r.stdout, "fell back to archive") || !strings.Contains(r.stdout, "(archive, rw)") {
			t.Fatalf("%d\n%s%s", r.code, r.stdout, r.stderr)
		}
		// Said as it happens, before the task runs, not only at the end.
		if i, j := strings.Index(r.stderr, "awcp: transport auto: the executor cannot mount"), strings.Index(r.stderr, "executor is running the task"); i < 0 || j < i {
			t.Errorf("the fallback was not said before the task ran:\n%s", r.stderr)
		}
	})
	t.Run("TASK_FAILED", func(t *testing.T) {
		r := failCase(t, c, sampleWorkspace(t), control.CodeTaskFailed, "--peer", failing.url, "--prompt", "p")
		if !strings.Contains(r.stderr, "undefined: foo") {
			t.Fatalf("stderr tail missing:\n%s", r.stderr)
		}
		failing.workRootEmpty(t)
	})
	t.Run("unreachable executor", func(t *testing.T) {
		failCase(t, c, sampleWorkspace(t), control.CodeSetupFailed, "--peer", "http://127.0.0.1:1", "--prompt", "p")
	})
	t.Run("bad flags", func(t *testing.T) {
		r := c.run("export", "--peer", x.url)
		if r.code != 2 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
	})
}

func TestMaxConcurrentDeclines(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `sleep 30`, "--max-concurrent", "1")
	c := newCtl(t)
	first := sampleWorkspace(t)
	r := c.run("export", first, "--peer", x.url, "--prompt", "long task", "--background")
	if r.code != 0 {
		t.Fatalf("background export: %d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	c.waitState(id, "running")

	failCase(t, c, sampleWorkspace(t), control.CodeDeclined, "--peer", x.url, "--prompt", "second")

	// One rw delegation per directory, refused before anything is sent.
	r = failCase(t, c, first, control.CodeDeclined, "--peer", x.url, "--prompt", "again")
	if !strings.Contains(r.stderr, id) {
		t.Fatalf("refusal does not name the holder %s:\n%s", id, r.stderr)
	}

	if r := c.run("cancel", id); r.code != 0 {
		t.Fatalf("cancel: %s", r.stderr)
	}
	out := c.run("output", id, "--block", "--timeout", "10s")
	if out.code != 1 || !strings.Contains(out.stderr, "error CANCELLED") {
		t.Fatalf("output after cancel: %d %s %s", out.code, out.stdout, out.stderr)
	}
	nothingLeft(t, c, x, 0)
}

func TestCancelMidTask(t *testing.T) {
	parallel(t)
	for _, transport := range []string{"archive", "sshfs"} {
		t.Run(transport, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "agent.pid")
			x := startExecutor(t, `echo $$ > `+pidFile+`; echo started; sleep 60 & sleep 60`)
			c := newCtl(t)
			dir := sampleWorkspace(t)
			before := tree(t, dir)

			exp := c.start("export", dir, "--peer", x.url, "--prompt", "never finishes", "--transport", transport,
				"--ssh-listen", "127.0.0.1:0")
			pgid := readPID(t, pidFile)
			d := c.waitState("", "running")
			if r := c.run("cancel", d.ID); r.code != 0 {
				t.Fatalf("cancel: %s", r.stderr)
			}
			err := exp.Wait()
			if exp.ProcessState.ExitCode() != 1 || !strings.Contains(exp.stderr.String(), "error CANCELLED") {
				t.Fatalf("export after cancel: %v\n%s", err, exp.stderr.String())
			}
			nothingLeft(t, c, x, pgid)
			sameTree(t, dir, before)
		})
	}
}

func TestInterruptCancels(t *testing.T) {
	parallel(t)
	pidFile := filepath.Join(t.TempDir(), "agent.pid")
	x := startExecutor(t, `echo $$ > `+pidFile+`; sleep 60`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	exp := c.start("export", dir, "--peer", x.url, "--prompt", "p")
	pgid := readPID(t, pidFile)
	c.waitState("", "running")
	exp.Process.Signal(os.Interrupt)
	exp.Wait()
	if !strings.Contains(exp.stderr.String(), "cancelling") || exp.ProcessState.ExitCode() != 1 {
		t.Fatalf("%d %s", exp.ProcessState.ExitCode(), exp.stderr.String())
	}
	if d := c.status()[0]; d.State != "cancelled" {
		t.Fatalf("state %s", d.State)
	}
	nothingLeft(t, c, x, pgid)
}

// TestLeaseExpiresMidTask: a 2 s lease ends a task that would run for a
// minute, on both transports, within 2 s of its end.
func TestLeaseExpiresMidTask(t *testing.T) {
	slow(t)
	alone(t, "bounds a 2 s lease's expiry at 6 s of wall clock")
	for _, transport := range []string{"archive", "sshfs"} {
		t.Run(transport, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "agent.pid")
			x := startExecutor(t, `echo $$ > `+pidFile+`; sleep 60`)
			c := newCtl(t)
			dir := sampleWorkspace(t)
			start := time.Now()
			r := failCase(t, c, dir, control.CodeExpired, "--peer", x.url, "--prompt", "p", "--ttl", "2s",
				"--transport", transport, "--ssh-listen", "127.0.0.1:0")
			// 2 s of lease, at most 2 s late, and the processes' start-up.
			if el := time.Since(start); el > 6*time.Second {
				t.Fatalf("expiry took %s for a 2s lease", el)
			}
			if !strings.Contains(r.stderr, "--ttl") {
				t.Fatalf("no hint:\n%s", r.stderr)
			}
			nothingLeft(t, c, x, readPID(t, pidFile))
		})
	}
}

func TestLocalChangeIsNotOverwritten(t *testing.T) {
	parallel(t)
	gate := filepath.Join(t.TempDir(), "gate")
	x := startExecutor(t, `while [ ! -e `+gate+` ]; do sleep 0.05; done; echo executor > README.md; echo ok`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	exp := c.start("export", dir, "--peer", x.url, "--prompt", "p", "--transport", "archive")
	c.waitState("", "running")
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("user\n"), 0o644)
	os.WriteFile(gate, nil, 0o644)
	exp.Wait()
	if exp.ProcessState.ExitCode() != 0 || !strings.Contains(exp.stdout.String(), "conflicts") {
		t.Fatalf("%s", exp.stdout.String())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "README.md")); string(b) != "user\n" {
		t.Fatalf("local change overwritten: %q", b)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "README.md.awcp-*"))
	if len(matches) != 1 {
		t.Fatalf("executor's version not kept beside: %v", matches)
	}
	if b, _ := os.ReadFile(matches[0]); string(b) != "executor\n" {
		t.Fatalf("executor's version %q", b)
	}
}

// TestMaliciousArchives speaks the wire protocol directly to a running
// executor with archives our delegator would never make.
func TestMaliciousArchives(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `echo ran > ran.txt`, "--max-workspace-bytes", "10000000")
	outside := filepath.Dir(x.workRoot)
	before, _ := os.ReadDir(outside)

	entries := map[string]func(zw *zip.Writer){
		"zip-slip": func(zw *zip.Writer) { w, _ := zw.Create("../../../tmp/awcp-e2e-slip"); w.Write([]byte("x")) },
		"absolute": func(zw *zip.Writer) { w, _ := zw.Create("/tmp/awcp-e2e-abs"); w.Write([]byte("x")) },
		"link-out": func(zw *zip.Writer) {
			h := &zip.FileHeader{Name: "escape"}
			h.SetMode(fs.ModeSymlink | 0o777)
			w, _ := zw.CreateHeader(h)
			w.Write([]byte("../../.."))
		},
		"bomb": func(zw *zip.Writer) {
			w, _ := zw.CreateHeader(&zip.FileHeader{Name: "zeros", Method: zip.Deflate})
			w.Write(make([]byte, 50<<20))
		},
	}
	for name, entry := range entries {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			zw := zip.NewWriter(&buf)
			entry(zw)
			zw.Close()
			id := "dlg_evil_" + strings.ReplaceAll(name, "-", "_")
			post(t, x.url, map[string]any{
				"version": "1", "type": "INVITE", "delegationId": id,
				"task":      map[string]string{"description": "d", "prompt": "p"},
				"lease":     map[string]any{"ttlSeconds": 60, "accessMode": "rw"},
				"workspace": map[string]string{"exportName": "x"},
			}, http.StatusOK)
			m := post(t, x.url, map[string]any{
				"version": "1", "type": "START", "delegationId": id,
				"lease": map[string]any{"expiresAt": control.Timestamp(time.Now().Add(time.Minute)), "accessMode": "rw"},
				"workDir": map[string]string{"transport": "archive",
					"workspaceBase64": base64.StdEncoding.EncodeToString(buf.Bytes()), "checksum": archive.Checksum(buf.Bytes())},
			}, http.StatusUnprocessableEntity)
			if m["code"] != control.CodeSetupFailed {
				t.Fatalf("answer %v", m)
			}
		})
	}
	x.workRootEmpty(t)
	after, _ := os.ReadDir(outside)
	if len(after) != len(before) {
		t.Fatalf("written beside the work root: %v -> %v", before, after)
	}
	for _, p := range []string{"/tmp/awcp-e2e-slip", "/tmp/awcp-e2e-abs"} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s written", p)
		}
	}
}

// TestStartExpiredAndWorkdirDenied covers the two codes only a foreign or
// slow delegator can provoke.
func TestStartExpiredAndWorkdirDenied(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `true`)
	invite := func(id string, status int) map[string]any {
		return post(t, x.url, map[string]any{
			"version": "1", "type": "INVITE", "delegationId": id,
			"task":      map[string]string{"description": "d", "prompt": "p"},
			"lease":     map[string]any{"ttlSeconds": 60, "accessMode": "rw"},
			"workspace": map[string]string{"exportName": "x"},
		}, status)
	}
	invite("dlg_late", http.StatusOK)
	m := post(t, x.url, map[string]any{
		"version": "1", "type": "START", "delegationId": "dlg_late",
		"lease":   map[string]any{"expiresAt": "2020-01-01T00:00:00.000Z", "accessMode": "rw"},
		"workDir": map[string]string{"transport": "archive", "workspaceBase64": "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==", "checksum": "x"},
	}, http.StatusGone)
	if m["code"] != control.CodeStartExpired {
		t.Fatalf("%v", m)
	}
	os.MkdirAll(filepath.Join(x.workRoot, "dlg_taken"), 0o700)
	os.WriteFile(filepath.Join(x.workRoot, "dlg_taken", "keep"), []byte("mine"), 0o600)
	if m := invite("dlg_taken", http.StatusForbidden); m["code"] != control.CodeWorkdirDenied {
		t.Fatalf("%v", m)
	}
	if b, _ := os.ReadFile(filepath.Join(x.workRoot, "dlg_taken", "keep")); string(b) != "mine" {
		t.Fatal("existing work dir touched")
	}
}

func post(t *testing.T, base string, msg any, wantStatus int) map[string]any {
	t.Helper()
	body, _ := json.Marshal(msg)
	resp, err := http.Post(base+"/awcp", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not JSON: %s", raw)
	}
	if resp.StatusCode != wantStatus {
		t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, wantStatus, raw)
	}
	return m
}

// TestDaemonCrashLosesNothing kills the delegator daemon mid-task; the task
// finishes while no delegator runs; a new daemon adopts the delegation,
// resumes the event stream and applies the result.
func TestDaemonCrashLosesNothing(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `sleep 1; echo "made while the delegator was down" > late.txt; echo finished`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "p", "--background", "--transport", "archive")
	if r.code != 0 {
		t.Fatalf("%d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	c.waitState(id, "running")

	// The local API is for this user only.
	for path, want := range map[string]fs.FileMode{c.state: 0o700, filepath.Join(c.state, "ctl.sock"): 0o600, filepath.Join(c.state, "delegator.db"): 0o600} {
		if info, err := os.Stat(path); err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, info.Mode().Perm(), err, want)
		}
	}

	c.stopDaemonHard()
	time.Sleep(2 * time.Second) // the task ends meanwhile
	if _, err := os.Stat(filepath.Join(dir, "late.txt")); err == nil {
		t.Fatal("result applied with no delegator running?")
	}

	daemon := c.command("serve", "--state-dir", c.state)
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { daemon.Process.Signal(syscall.SIGTERM); daemon.Wait() }()
	res := c.run("output", id, "--block", "--timeout", "15s")
	if res.code != 0 {
		t.Fatalf("after restart: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "late.txt")); err != nil || !strings.Contains(string(b), "delegator was down") {
		t.Fatalf("late.txt = %q, %v", b, err)
	}
	nothingLeft(t, c, x, 0)
}

// TestOverdueLeaseExpiresOnNextLook: a lease that runs out while no
// delegator process runs is expired by the next command that opens the store.
func TestOverdueLeaseExpiresOnNextLook(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `sleep 60`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	before := tree(t, dir)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "p", "--background", "--ttl", "2s")
	if r.code != 0 {
		t.Fatalf("%d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	c.waitState(id, "running")
	c.stopDaemonHard()
	time.Sleep(2500 * time.Millisecond)
	d := c.waitState(id, "expired")
	if d.Failure == nil || d.Failure.Code != control.CodeExpired {
		t.Fatalf("%+v", d)
	}
	sameTree(t, dir, before)
	nothingLeft(t, c, x, 0)
}

// TestResultKeptWhenItCannotBeApplied: the workspace vanished while the
// task ran; the executor's result is kept in the state dir, not lost.
func TestResultKeptWhenItCannotBeApplied(t *testing.T) {
	parallel(t)
	gate := filepath.Join(t.TempDir(), "gate")
	x := startExecutor(t, `while [ ! -e `+gate+` ]; do sleep 0.05; done; echo precious > work.txt`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	exp := c.start("export", dir, "--peer", x.url, "--prompt", "p", "--transport", "archive")
	d := c.waitState("", "running")
	os.RemoveAll(dir)
	os.WriteFile(gate, nil, 0o644)
	exp.Wait()
	if exp.ProcessState.ExitCode() != 1 || !strings.Contains(exp.stderr.String(), "error TASK_FAILED") {
		t.Fatalf("%d %s", exp.ProcessState.ExitCode(), exp.stderr.String())
	}
	kept := filepath.Join(c.state, "results", d.ID+".zip")
	if !strings.Contains(exp.stderr.String(), kept) {
		t.Fatalf("the message does not say where the result is:\n%s", exp.stderr.String())
	}
	data, err := os.ReadFile(kept)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := archive.Extract(data, out, archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "work.txt")); string(b) != "precious\n" {
		t.Fatalf("kept result lacks the work: %q", b)
	}
}
