package e2e

import (
	"bufio"
	"encoding/xml"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// repoRoot is the checkout the tests run in (test/e2e is two below it).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// execStart is a unit's ExecStart command line, split on spaces (ours
// quote nothing).
func execStart(t *testing.T, unit string) []string {
	t.Helper()
	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if cmd, ok := strings.CutPrefix(line, "ExecStart="); ok {
			return strings.Fields(cmd)
		}
	}
	t.Fatalf("%s has no ExecStart", unit)
	return nil
}

// TestServiceFiles: systemd accepts both units as written (every key
// known, every value valid); each unit's command line, with the example
// settings it names, starts its daemon; and make install puts programs,
// units and settings where the units look for them, keeping settings an
// operator edited.
func TestServiceFiles(t *testing.T) {
	slow(t)
	parallel(t)
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is needed by this test (.ci/run installs systemd)")
	}
	root := repoRoot(t)
	units := map[string]string{
		"awcp-fs.service":  filepath.Join(root, "deploy/systemd/awcp-fs.service"),
		"awcp-ctl.service": filepath.Join(root, "deploy/systemd/awcp-ctl.service"),
	}
	// systemd checks that ExecStart's program exists: the built one
	// stands in for the installed one.
	tmp := t.TempDir()
	for name, unit := range units {
		data, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		local := filepath.Join(tmp, name)
		os.WriteFile(local, []byte(strings.ReplaceAll(string(data), "/usr/local/bin", binDir)), 0o644)
		args := []string{"verify", local}
		if name == "awcp-ctl.service" {
			args = append([]string{"--user"}, args...)
		}
		cmd := exec.Command(analyze, args...)
		runtime := filepath.Join(tmp, "run")
		os.MkdirAll(runtime, 0o700)
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
		if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) != 0 {
			t.Errorf("systemd-analyze %v: %v\n%s", args, err, out)
		}
	}

	// The executor's command line, its example settings, and what a test
	// must change: places, ports, and an agent (the example has none).
	fsArgs := execStart(t, units["awcp-fs.service"])
	if fsArgs[0] != "/usr/local/bin/awcp-fs" || strings.Join(fsArgs[1:], " ") != "serve --config /etc/awcp/awcp-fs.toml" {
		t.Fatalf("awcp-fs.service runs %v", fsArgs)
	}
	state := filepath.Join(t.TempDir(), "state")
	fs := exec.Command(filepath.Join(binDir, "awcp-fs"), "serve", "--config", filepath.Join(root, "deploy/awcp-fs.toml"),
		"--state-dir", state, "--work-root", filepath.Join(state, "work"), "--listen", "127.0.0.1:0",
		"--metrics-listen", freeAddr(t), "--agent-cmd", "true")
	var fsLog strings.Builder
	fs.Stderr = &fsLog
	out, _ := fs.StdoutPipe()
	if err := fs.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	fs.Process.Signal(syscall.SIGTERM)
	fs.Wait()
	if !strings.Contains(line, "listening on") {
		t.Fatalf("awcp-fs with the example settings: %q\n%s", line, fsLog.String())
	}
	if !strings.Contains(fsLog.String(), `"level":"INFO"`) {
		t.Errorf("the example's log-format json and log-level info were not applied:\n%s", fsLog.String())
	}

	// Without an agent, the example says exactly what is missing.
	r, _ := exec.Command(filepath.Join(binDir, "awcp-fs"), "serve", "--config", filepath.Join(root, "deploy/awcp-fs.toml"),
		"--state-dir", state, "--work-root", filepath.Join(state, "work")).CombinedOutput()
	if !strings.Contains(string(r), "an agent is required") {
		t.Errorf("the example without an agent: %s", r)
	}

	ctlArgs := execStart(t, units["awcp-ctl.service"])
	if strings.Join(ctlArgs[1:], " ") != "serve --config %E/awcp/awcp-ctl.toml" {
		t.Fatalf("awcp-ctl.service runs %v", ctlArgs)
	}
	c := newCtl(t)
	_, stop := c.serve("--config", filepath.Join(root, "deploy/awcp-ctl.toml"), "--ssh-listen", "127.0.0.1:0", "--metrics-listen", freeAddr(t))
	stop()
	// The same file serves the other commands: a setting of serve's or
	// export's is theirs, not an error.
	for _, args := range [][]string{{"status"}, {"peers", "--browse-window", "100ms"}, {"prune"}} {
		if r := c.run(append([]string{"--config", filepath.Join(root, "deploy/awcp-ctl.toml")}, args...)...); r.code != 0 {
			t.Errorf("awcp-ctl --config deploy/awcp-ctl.toml %v: exit %d\n%s", args, r.code, r.stderr)
		}
	}

	// make install, twice: the second keeps the edited settings.
	dest := t.TempDir()
	install := func() {
		t.Helper()
		cmd := exec.Command("make", "-s", "install", "DESTDIR="+dest, "PREFIX=/usr", "BIN="+binDir)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
	}
	install()
	for path, mode := range map[string]os.FileMode{
		"usr/bin/awcp-fs": 0o755, "usr/bin/awcp-ctl": 0o755,
		"etc/systemd/system/awcp-fs.service": 0o644, "etc/systemd/user/awcp-ctl.service": 0o644,
		"etc/awcp/awcp-fs.toml": 0o600, "usr/share/awcp/awcp-fs.toml": 0o644, "usr/share/awcp/awcp-ctl.toml": 0o644,
	} {
		fi, err := os.Stat(filepath.Join(dest, path))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v (%v), want mode %v", path, fi, err, mode)
		}
	}
	if got := execStart(t, filepath.Join(dest, "etc/systemd/system/awcp-fs.service"))[0]; got != "/usr/bin/awcp-fs" {
		t.Errorf("installed unit runs %s, want /usr/bin/awcp-fs", got)
	}
	edited := filepath.Join(dest, "etc/awcp/awcp-fs.toml")
	os.WriteFile(edited, []byte("# edited\n"), 0o600)
	install()
	if b, _ := os.ReadFile(edited); string(b) != "# edited\n" {
		t.Errorf("make install overwrote the edited settings: %q", b)
	}
}

// plistDict is a launchd property list's top dictionary: each key with
// its value as text (a string or an integer), an array's strings, or the
// element name of a boolean (<true/>) or a nested dict ("dict").
func plistDict(t *testing.T, file string) map[string][]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	out := map[string][]string{}
	var key string
	depth := 0 // of <dict>
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", file, err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "dict":
				depth++
				if depth == 2 {
					out[key] = append(out[key], "dict")
				}
			case "key", "string", "integer":
				var text string
				if err := dec.DecodeElement(&text, &el); err != nil {
					t.Fatal(err)
				}
				if depth != 1 {
					continue
				}
				if el.Name.Local == "key" {
					key = text
				} else {
					out[key] = append(out[key], text)
				}
			case "true", "false":
				if depth == 1 {
					out[key] = append(out[key], el.Name.Local)
				}
			}
		case xml.EndElement:
			if el.Name.Local == "dict" {
				depth--
			}
		}
	}
	return out
}

// TestLaunchdAgent: `make install-launchd` (docs/macos.md) writes the
// delegator's launchd agent for the user — the installed program's serve,
// started at login and again after a failure, its log and settings where
// the page says — and keeps settings already there. launchd is not here:
// the file is checked as launchd reads it, not run.
func TestLaunchdAgent(t *testing.T) {
	parallel(t)
	root := repoRoot(t)
	home := t.TempDir()
	install := func() {
		t.Helper()
		cmd := exec.Command("make", "-s", "install-launchd", "HOME="+home, "PREFIX=/opt/awcp")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make install-launchd: %v\n%s", err, out)
		}
	}
	install()
	plist := filepath.Join(home, "Library/LaunchAgents/dev.awcp.awcp-ctl.plist")
	d := plistDict(t, plist)
	want := map[string]string{
		"Label":             "dev.awcp.awcp-ctl",
		"ProgramArguments":  "/opt/awcp/bin/awcp-ctl serve",
		"RunAtLoad":         "true",
		"KeepAlive":         "dict",
		"Umask":             "63",
		"StandardErrorPath": filepath.Join(home, "Library/Logs/awcp/awcp-ctl.log"),
	}
	for k, v := range want {
		if got := strings.Join(d[k], " "); got != v {
			t.Errorf("the plist's %s is %q, want %q", k, got, v)
		}
	}
	if b, _ := os.ReadFile(plist); strings.Contains(string(b), "__") {
		t.Errorf("a placeholder is left in the plist:\n%s", b)
	}
	for path, mode := range map[string]os.FileMode{"Library/Logs/awcp": 0o700, ".config/awcp/awcp-ctl.toml": 0o600, "Library/LaunchAgents/dev.awcp.awcp-ctl.plist": 0o644} {
		if fi, err := os.Stat(filepath.Join(home, path)); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, want mode %v", path, err, mode)
		}
	}
	// What launchd runs reads those settings: serve, with no flag, takes
	// ~/.config/awcp/awcp-ctl.toml — here with free ports, its metrics
	// answering where they say.
	settings := filepath.Join(home, ".config/awcp/awcp-ctl.toml")
	b, _ := os.ReadFile(settings)
	metrics := freeAddr(t)
	text := strings.Replace(string(b), `ssh-listen = ":2222"`, `ssh-listen = "127.0.0.1:0"`, 1)
	text = strings.Replace(text, `metrics-listen = "127.0.0.1:9465"`, `metrics-listen = "`+metrics+`"`, 1)
	os.WriteFile(settings, []byte(text), 0o600)
	c := newCtl(t)
	c.env = append(c.env, "HOME="+home, "XDG_CONFIG_HOME=")
	log, stop := c.serve()
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatalf("serve as launchd runs it did not read ~/.config/awcp/awcp-ctl.toml (no metrics at %s): %v\n%s", metrics, err, log)
	}
	resp.Body.Close()
	stop()
	edited := []byte(text)
	install()
	if b, _ := os.ReadFile(settings); string(b) != string(edited) {
		t.Errorf("make install-launchd overwrote the settings")
	}
}
