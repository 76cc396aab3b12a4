//go:build linux

package sandbox

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// What an agent command runs, granted read-only (CommandGrants): its
// program, found on PATH and followed through symlinks, and where the
// program is a script, its interpreter (its #! line, or the program the
// command names first: `node /opt/agent/cli.js`) — each as the tree it
// loads its own files from: the outermost node_modules holding it (npm
// hoists a package's dependencies there), or else the nearest directory
// holding a package.json or pyproject.toml, or else the file alone.
// Nothing under the system's directories (the sandbox shows them), and
// nothing the command merely names: a package name, a path it reads or
// writes (/etc/shadow, /proc/self/mountinfo) is not what it runs, and is
// granted only by the operator (--sandbox-allow).

// interpreters run the script their first argument names.
var interpreters = []string{"node", "nodejs", "deno", "bun", "python", "python3", "ruby", "perl", "sh", "bash", "dash", "zsh"}

// CommandGrants are the files and trees command runs that the sandbox
// would not show: read-only grants for them.
func CommandGrants(command string) []string { return ResolveCommand(command).Grants }

// Resolved is what an agent command runs, as ResolveCommand found it.
type Resolved struct {
	// Chain is how it was found, for doctor: each step "name → real path".
	Chain []string
	// Grants are the trees it loads from that the sandbox would not show.
	Grants []string
	// Missing is the program the command begins with where it is a plain
	// name (no shell syntax, not a shell builtin or keyword) found on no
	// directory of PATH, nor at its path: not installed, or misspelt.
	Missing string
}

// ResolveCommand finds what command runs (the package comment above).
func ResolveCommand(command string) Resolved {
	var r Resolved
	words := strings.Fields(command)
	for len(words) > 0 && (strings.Contains(words[0], "=") || words[0] == "exec" || words[0] == "env") {
		words = words[1:] // VAR=value, exec, env: the program follows
	}
	if len(words) == 0 {
		return r
	}
	within := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	add := func(p string) {
		if p == "" || underSystem(p) || slices.ContainsFunc(r.Grants, func(g string) bool { return within(p, g) }) {
			return // shown already
		}
		r.Grants = slices.DeleteFunc(r.Grants, func(g string) bool { return within(g, p) })
		r.Grants = append(r.Grants, p)
	}
	name := trimQuotes(words[0])
	prog := resolveProgram(name)
	if prog == "" {
		r.Chain = append(r.Chain, name+": not found on PATH")
		// A name is looked up on PATH and an absolute path is where it
		// is; a relative path is the work dir's, known only when it runs.
		if plainWord.MatchString(words[0]) && !shellWords[words[0]] && (!strings.Contains(name, "/") || filepath.IsAbs(name)) {
			r.Missing = name
		}
		return r
	}
	r.Chain = append(r.Chain, name+" → "+prog)
	add(loadRoot(prog))
	// A version manager's shim runs the manager, which runs the version
	// chosen: the manager's whole tree.
	if root := managerRoot(prog); root != "" {
		r.Chain = append(r.Chain, "shim of the version manager at "+root)
		add(root)
	}
	// A script: its #! interpreter's install.
	if interp := shebang(prog); interp != "" {
		if real := resolveProgram(interp); real != "" {
			r.Chain = append(r.Chain, "#! "+interp+" → "+real)
		}
		add(installRoot(interp))
	}
	// An interpreter given a script: the script's tree.
	if isInterpreter(words[0]) || isInterpreter(prog) {
		add(installRoot(prog))
		for _, w := range words[1:] {
			w = trimQuotes(w)
			if strings.HasPrefix(w, "-") {
				continue
			}
			if script := resolveFile(w); script != "" {
				r.Chain = append(r.Chain, "script "+w+" → "+script)
				add(loadRoot(script))
			}
			break
		}
	}
	return r
}

// managerRoot is the root of the version manager whose shim the program
// at prog (a real path) is, or "": pyenv, rbenv, nodenv, asdf and mise
// keep their shims in ROOT/shims (scripts that run the manager from ROOT),
// and volta links its shims to ROOT/bin/volta-shim, which finds the tool
// chosen under ROOT. Only a tree that is a manager's (it holds the
// versions, installs or tools it chooses among, or the manager in
// libexec) and not a home directory: a "shims" folder elsewhere grants
// nothing more.
func managerRoot(prog string) string {
	dir := filepath.Dir(prog)
	var root string
	switch {
	case filepath.Base(dir) == "shims":
		root = filepath.Dir(dir)
	case filepath.Base(prog) == "volta-shim" && filepath.Base(dir) == "bin":
		root = filepath.Dir(dir)
	default:
		return ""
	}
	if home, _ := os.UserHomeDir(); root == "/" || root == home || root == "/root" || filepath.Dir(root) == "/home" {
		return ""
	}
	for _, marker := range []string{"libexec", "versions", "installs", "tools"} {
		if fi, err := os.Stat(filepath.Join(root, marker)); err == nil && fi.IsDir() {
			return root
		}
	}
	return ""
}

// plainWord is a command word with no shell syntax in it: the program
// itself, as the shell would look it up.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./+@%,-]+$`)

// shellWords are the shell's keywords and builtins (dash's and bash's):
// a command beginning with one runs no program of that name.
var shellWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`if then else elif fi case esac for while until do done in function select time ! [[ ]] { }
		alias bg bind break builtin caller cd command compgen complete continue declare dirs disown echo enable eval exec
		exit export false fc fg getopts hash help history jobs kill let local logout mapfile popd printf pushd pwd read
		readarray readonly return set shift shopt source suspend test times trap true type typeset ulimit umask unalias
		unset wait . : [`) {
		shellWords[w] = true
	}
}

// isInterpreter reports whether the program at path (or named so) is one
// of interpreters, whatever its version (python3.11).
func isInterpreter(path string) bool {
	return slices.Contains(interpreters, strings.TrimRight(filepath.Base(trimQuotes(path)), "0123456789."))
}

func trimQuotes(w string) string { return strings.Trim(w, `'"`) }

// resolveProgram is the real path of the program a command's first word
// names (on PATH if it has no slash); "" if there is none.
func resolveProgram(w string) string {
	if !strings.Contains(w, "/") {
		p, err := exec.LookPath(w)
		if err != nil {
			return ""
		}
		w = p
	}
	return resolveFile(w)
}

// resolveFile is the real path of the regular file w, symlinks followed;
// "" if it is none.
func resolveFile(w string) string {
	abs, err := filepath.Abs(w)
	if err != nil {
		return ""
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return real
}

// loadRoot is the tree a program at file (a real path) loads its own
// files from.
func loadRoot(file string) string {
	if i := strings.Index(file, "/node_modules/"); i >= 0 {
		return file[:i+len("/node_modules")]
	}
	home, _ := os.UserHomeDir()
	for dir := filepath.Dir(file); dir != "/" && dir != "." && dir != home; dir = filepath.Dir(dir) {
		// (never a whole home directory, nor the root)
		for _, marker := range []string{"package.json", "pyproject.toml"} {
			if _, err := os.Stat(filepath.Join(dir, marker)); err == nil {
				return dir
			}
		}
	}
	return file
}

// installRoot is where an interpreter found at prog is installed: the
// directory above its bin/ (a version manager's, such as ~/.nvm's
// versions/node/v20), or the file alone.
func installRoot(name string) string {
	prog := resolveProgram(name)
	if prog == "" {
		return ""
	}
	if dir := filepath.Dir(prog); filepath.Base(dir) == "bin" {
		return filepath.Dir(dir)
	}
	return prog
}

// shebang is the interpreter file's #! line names ("node" for
// `#!/usr/bin/env node`); "" if it has none.
func shebang(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return ""
	}
	if filepath.Base(fields[0]) == "env" {
		for _, f := range fields[1:] {
			if !strings.HasPrefix(f, "-") {
				return f
			}
		}
		return ""
	}
	return fields[0]
}

// underSystem reports whether path is one the sandbox shows already.
func underSystem(path string) bool {
	for _, s := range System {
		if real, err := filepath.EvalSymlinks(s); err == nil && (path == real || strings.HasPrefix(path, real+"/")) {
			return true
		}
		if path == s || strings.HasPrefix(path, s+"/") {
			return true
		}
	}
	return false
}
