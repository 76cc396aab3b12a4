package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestJSONLogs: with --log-format json every line of the executor's log is
// one JSON object, and those of a delegation's work carry its id under
// "delegation", so that an operator can follow one delegation through.
func TestJSONLogs(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `echo working; echo done > out.txt`, "--log-format", "json")
	c := newCtl(t)
	r := c.run("--log-format", "json", "--log-level", "info", "export", t.TempDir(), "--peer", x.url,
		"--transport", "archive", "--prompt", "p", "--json")
	if r.code != 0 {
		t.Fatalf("export: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.ID == "" {
		t.Fatalf("export --json: %v\n%s", err, r.stdout)
	}
	x.stop(t)
	withID := 0
	for _, log := range []string{x.log.String(), r.stderr} {
		for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
			if line == "" || strings.HasPrefix(line, "awcp:") || strings.HasPrefix(line, "  |") {
				continue // the export's own progress lines, not its log
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
				t.Fatalf("a log line that is not a JSON record: %q (%v)", line, err)
			}
			if rec["delegation"] == out.ID {
				withID++
			}
		}
	}
	if withID < 2 {
		t.Fatalf("%d log lines carry the delegation's id:\nexecutor:\n%s\nctl:\n%s", withID, x.log, r.stderr)
	}
}

// stop ends awcp-fs (SIGTERM) and waits, so that its log is complete.
func (x *executor) stop(t *testing.T) {
	t.Helper()
	x.cmd.Process.Signal(syscall.SIGTERM)
	x.cmd.Wait()
}

// TestShellCompletion: the bash script completes commands and a command's
// flags by asking the program; zsh gets the same through bashcompinit;
// fish gets complete lines for every command.
func TestShellCompletion(t *testing.T) {
	parallel(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash is needed by this test")
	}
	complete := func(bin string, words ...string) string {
		t.Helper()
		script := fmt.Sprintf(`source <(%[1]s completion bash) && COMP_WORDS=(%[2]s) && COMP_CWORD=%[3]d && _%[4]s_complete && echo "${COMPREPLY[*]}"`,
			filepath.Join(binDir, bin), strings.Join(append([]string{bin}, words...), " "), len(words), strings.ReplaceAll(bin, "-", "_"))
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completion of %v: %v\n%s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct {
		bin   string
		words []string
		want  string
	}{
		{"awcp-ctl", []string{"ex"}, "export"},
		{"awcp-ctl", []string{"p"}, "prune permit peers"},
		{"awcp-ctl", []string{"export", "--tt"}, "--ttl"},
		{"awcp-ctl", []string{"peers", "--w"}, "--watch"},
		{"awcp-fs", []string{"se"}, "serve"},
		{"awcp-fs", []string{"serve", "--adv"}, "--advertise"},
	} {
		if got := complete(tc.bin, tc.words...); got != tc.want {
			t.Errorf("%s %v completes to %q, want %q", tc.bin, tc.words, got, tc.want)
		}
	}
	zsh, err := exec.Command(filepath.Join(binDir, "awcp-ctl"), "completion", "zsh").Output()
	if err != nil || !strings.HasPrefix(string(zsh), "autoload -U +X bashcompinit") || !strings.Contains(string(zsh), "complete -o bashdefault") {
		t.Errorf("zsh script: %v\n%s", err, zsh)
	}
	fish, err := exec.Command(filepath.Join(binDir, "awcp-ctl"), "completion", "fish").Output()
	if err != nil || !strings.Contains(string(fish), "complete -c awcp-ctl") || !strings.Contains(string(fish), "peers") {
		t.Errorf("fish script: %v\n%s", err, fish)
	}
	if r := (&ctl{t: t, state: t.TempDir()}).run("completion", "tcsh"); r.code != 2 || !strings.Contains(r.stderr, "bash, zsh or fish") {
		t.Errorf("completion tcsh: %d %s", r.code, r.stderr)
	}
}
