//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// CommandGrants grants what a command runs, as the tree it loads from,
// and nothing it merely names: a launcher symlinked from node_modules/.bin
// (npm's way, and npx's) is granted as the node_modules holding its
// package and the dependencies hoisted beside it; a script given to an
// interpreter as its tree; a package name, /etc/shadow, /proc/self/...,
// and the system's own programs are not granted. Then the launcher runs in
// a root and as a user of its own and finds its own files and its
// dependency: the link is not bound as its target file at the link's
// path (which left node looking for its modules in the wrong place).
func TestCommandGrantsWhatItRuns(t *testing.T) {
	proj := t.TempDir()
	files := map[string]string{
		"node_modules/agent/package.json": `{"name":"agent","bin":{"agent":"bin/cli.js"}}`,
		"node_modules/agent/bin/cli.js":   "#!/usr/bin/env node\nrequire('../lib/main.js');\n",
		"node_modules/agent/lib/main.js":  "const dep = require('dep'); console.log('agent ran with ' + dep.name + ' ' + process.argv.slice(2).join(' '));\n",
		"node_modules/dep/index.js":       "exports.name = 'its dependency';\n",
		"tools/pkg/pyproject.toml":        "[project]\nname = 'x'\n",
		"tools/pkg/src/run.py":            "print('python ran')\n",
		"loose/agent.sh":                  "echo loose\n",
		"loose/secret":                    "not run\n",
	}
	for name, content := range files {
		p := filepath.Join(proj, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(proj, "node_modules/.bin"), 0o755)
	launcher := filepath.Join(proj, "node_modules/.bin/agent")
	if err := os.Symlink("../agent/bin/cli.js", launcher); err != nil {
		t.Fatal(err)
	}
	nodeModules, _ := filepath.EvalSymlinks(filepath.Join(proj, "node_modules"))
	real := func(p string) string { r, _ := filepath.EvalSymlinks(filepath.Join(proj, p)); return r }
	for cmd, want := range map[string][]string{
		launcher + " --acp":      {nodeModules},
		"FOO=1 exec " + launcher: {nodeModules},
		"/usr/bin/python3 " + real("tools/pkg/src/run.py") + " -v":     {real("tools/pkg")},
		"sh -e " + real("loose/agent.sh") + " " + real("loose/secret"): {real("loose/agent.sh")},
		"npx -y @agentclientprotocol/claude-agent-acp":                 nil,
		"cat /etc/shadow /proc/self/mountinfo":                         nil,
		"sh -c 'cat /etc/shadow'":                                      nil,
		"no-such-program " + real("loose/secret"):                      nil,
	} {
		if got := CommandGrants(cmd); !slices.Equal(got, want) {
			t.Errorf("CommandGrants(%q) = %q, want %q", cmd, got, want)
		}
	}

	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is needed: the launcher is a node script")
	}
	if !CanIsolate() {
		t.Fatal("not root: the root of its own cannot be tested here")
	}
	work := t.TempDir()
	agent := &User{UID: 2_000_000_779, GID: 2_000_000_779, Home: work}
	os.Chown(work, int(agent.UID), int(agent.GID))
	grants := CommandGrants(launcher + " --acp")
	p := &Policy{RW: []string{work}, RO: append(slices.Clone(System), grants...), Devices: Devices, Isolated: true, User: agent, Yours: grants}
	cmd := exec.Command("/bin/sh", "-c", launcher+" --acp; cat /proc/self/mountinfo >/dev/null && echo mountinfo read; cat /etc/shadow >/dev/null 2>&1 || echo shadow refused")
	cmd.Dir = work
	if err := p.Wrap(cmd); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if want := "agent ran with its dependency --acp\nmountinfo read\nshadow refused\n"; err != nil || string(out) != want {
		t.Errorf("the launcher in its sandbox: %v\n%s\nwant %s", err, out, want)
	}
	if strings.Contains(string(out), "Cannot find module") {
		t.Error("node looked for the launcher's modules beside the link")
	}
}

// TestResolveCommandSaysWhatIsMissing: a command beginning with a plain
// name found on no directory of PATH, or an absolute path that is not
// there, is missing; shell syntax, builtins, keywords and a path relative
// to the work dir are not judged before they run.
func TestResolveCommandSaysWhatIsMissing(t *testing.T) {
	for cmd, missing := range map[string]string{
		`claud -p "$AWCP_PROMPT"`:     "claud",
		"FOO=1 exec no-such-agent":    "no-such-agent",
		"/opt/nowhere/agent --acp":    "/opt/nowhere/agent",
		"sh -c 'echo hi'":             "",
		"./run-agent.sh":              "",
		"echo hi > out.txt":           "",
		"while :; do sleep 1; done":   "",
		"n=0; while true; do :; done": "",
		"$AGENT --go":                 "",
		"cd sub && ./agent":           "",
	} {
		if got := ResolveCommand(cmd).Missing; got != missing {
			t.Errorf("ResolveCommand(%q).Missing = %q, want %q", cmd, got, missing)
		}
	}
}

// TestVersionManagerShimRunsInTheSandbox: a command started through a
// version manager's shim (pyenv's shape: ROOT/shims/python3, a script
// that runs ROOT/libexec/pyenv, which runs the version chosen under
// ROOT/versions) is granted the manager's tree, read-only, and runs in the
// sandbox; before, only the shim was, and the manager was not found.
func TestVersionManagerShimRunsInTheSandbox(t *testing.T) {
	root := filepath.Join(t.TempDir(), ".pyenv")
	files := map[string]string{
		"shims/tool":              "#!/bin/sh\nexec \"" + root + "/libexec/pyenv\" exec tool \"$@\"\n",
		"libexec/pyenv":           "#!/bin/sh\nshift; p=$1; shift; exec \"" + root + "/versions/3.11/bin/$p\" \"$@\"\n",
		"versions/3.11/bin/tool":  "#!/bin/sh\necho \"tool 3.11 ran: $*\"\n",
		"versions/3.11/lib/x.txt": "a file of the version\n",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The agent's user passes through to the manager, as to a home's
	// tools: the test's own directories opened (never the temp dir
	// itself, which others share).
	for d := filepath.Dir(root); strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	t.Setenv("PATH", filepath.Join(root, "shims")+":"+os.Getenv("PATH"))
	r := ResolveCommand("tool --version")
	if !slices.Equal(r.Grants, []string{root}) || !slices.Contains(r.Chain, "shim of the version manager at "+root) {
		t.Fatalf("ResolveCommand through a shim: grants %q, chain %q", r.Grants, r.Chain)
	}
	// A "shims" folder that is no manager's (in a home, say) grants no more
	// than the program.
	home := t.TempDir()
	loose := filepath.Join(home, "shims", "loose-tool")
	os.MkdirAll(filepath.Dir(loose), 0o755)
	os.WriteFile(loose, []byte("#!/bin/sh\necho loose\n"), 0o755)
	os.WriteFile(filepath.Join(home, ".netrc"), []byte("machine x password y\n"), 0o600)
	if got := ResolveCommand(loose).Grants; !slices.Equal(got, []string{loose}) {
		t.Errorf("a shims folder that is no manager's: grants %q, want the program alone", got)
	}
	if !CanIsolate() {
		t.Fatal("not root: the root of its own cannot be tested here")
	}
	work := t.TempDir()
	agent := &User{UID: 2_000_000_780, GID: 2_000_000_780, Home: work}
	os.Chown(work, int(agent.UID), int(agent.GID))
	p := &Policy{RW: []string{work}, RO: append(slices.Clone(System), r.Grants...), Devices: Devices, Isolated: true, User: agent, Yours: r.Grants}
	cmd := exec.Command("/bin/sh", "-c", "tool --version")
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := p.Wrap(cmd); err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "tool 3.11 ran: --version\n" {
		t.Errorf("the shim in its sandbox: %v\n%s", err, out)
	}
}
