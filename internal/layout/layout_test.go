package layout

import (
	"go/build"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/awcp/awcp/"

// allowed is, for each package of the module (by its path in the module),
// the module's packages its non-test files may import: ARCHITECTURE.md's
// table. A package missing here fails the test, so that a new one is
// placed on purpose. nil means any.
var allowed = map[string][]string{
	"internal/bufconn":       {},
	"internal/cloexec":       {},
	"internal/untrusted":     {},
	"internal/openflag":      {},
	"internal/portable":      {},
	"internal/peercred":      {},
	"internal/confine":       {"internal/openflag"},
	"internal/sandbox":       {},
	"internal/stage":         {"archive"},
	"internal/linediff":      {},
	"internal/gitrun":        {},
	"internal/treewalk":      {"internal/openflag", "internal/portable"},
	"internal/tail":          {},
	"internal/merge3":        {"internal/linediff"},
	"internal/layout":        {},
	"internal/mountinfo":     {},
	"internal/httpserve":     {},
	"internal/metrics":       {"internal/httpserve"},
	"internal/heappeak":      {},
	"sshd/sftpwire":          {"internal/untrusted"},
	"lease":                  {},
	"archive":                {"internal/confine", "internal/merge3"},
	"fs/sftpc":               {"sshd/sftpwire"},
	"fs":                     {"fs/sftpc", "sshd/sftpwire", "internal/bufconn", "internal/cloexec", "internal/mountinfo", "internal/untrusted"},
	"sshd":                   {"archive", "sshd/sftpwire", "internal/confine", "internal/bufconn", "internal/stage", "internal/untrusted", "internal/gitrun", "internal/treewalk", "internal/openflag", "internal/portable"},
	"sshd/sshdtest":          {"sshd"},
	"control/executor/agent": {"internal/tail", "lease"},
	"control/executor/acp":   {"control", "control/executor/agent", "internal/tail", "internal/untrusted", "lease"},
	// control is what both roles share: no role's logic, and neither
	// half of the live mount. The SSH server (sshd) is reached only from
	// control/delegator, the FUSE mount (fs) only from control/executor,
	// and neither role's package imports the other's.
	"control":                       {"archive", "internal/untrusted", "lease"},
	"control/discovery":             {"control", "internal/untrusted"},
	"control/skills":                {"control", "control/discovery", "internal/untrusted"},
	"control/delegator":             {"archive", "control", "control/delegator/lending", "control/delegator/review", "internal/httpserve", "internal/peercred", "internal/sandbox", "internal/tail", "internal/untrusted", "lease", "sshd", "sshd/sftpwire", "internal/treewalk"},
	"control/delegator/a2apeer":     {"control", "internal/untrusted", "lease"},
	"control/delegator/lending":     {"internal/untrusted", "lease", "sshd/sftpwire"},
	"control/delegator/lendarchive": {"archive", "control", "control/delegator/lending", "lease"},
	"control/delegator/lendlive":    {"archive", "control", "control/delegator/lending", "internal/stage", "lease", "sshd", "sshd/sftpwire"},
	"control/delegator/lendgit":     {"archive", "control", "control/delegator/lendarchive", "control/delegator/lending", "control/delegator/lendlive", "control/delegator/review", "internal/gitrun", "lease", "sshd"},
	"control/executor":              {"archive", "control", "control/executor/agent", "fs", "internal/httpserve", "internal/mountinfo", "internal/sandbox", "lease", "sshd/sftpwire", "internal/gitrun", "internal/treewalk"},
	"control/executor/a2aface":      {"control", "control/executor", "internal/httpserve", "internal/linediff", "internal/untrusted"},
	"control/executor/executortest": {"control", "control/executor", "internal/httpserve", "lease"},
	"control/delegator/mcpserver":   {"control", "control/delegator", "control/discovery", "lease"},
	"control/delegator/gateway":     {"control", "control/delegator", "internal/untrusted", "lease", "sshd/sftpwire"},
	"control/delegator/turns":       {"control", "control/delegator", "control/delegator/gateway", "lease"},
	"control/delegator/webui":       {"control", "control/delegator", "control/delegator/review", "control/discovery", "lease"},
	"control/delegator/review":      {"archive", "internal/linediff", "internal/stage", "internal/untrusted", "internal/gitrun"},
	"cmd/internal/clikit":           {"internal/cloexec", "internal/metrics", "internal/untrusted"},
	"cmd/awcp-ctl":                  {"cmd/internal/clikit", "control", "control/delegator", "control/delegator/a2apeer", "control/skills", "control/delegator/lendarchive", "control/delegator/lendgit", "control/delegator/lendlive", "control/delegator/gateway", "control/delegator/mcpserver", "control/delegator/turns", "control/delegator/webui", "control/discovery", "internal/metrics", "internal/sandbox", "lease"},
	"cmd/awcp-fs":                   {"archive", "cmd/internal/clikit", "control", "control/discovery", "control/executor/a2aface", "control/executor/acp", "control/executor/agent", "control/executor", "fs", "internal/metrics", "internal/peercred", "internal/sandbox", "lease"},
	"test/bench/benchd":             nil,
	"test/bench/control":            nil,
	"test/bench/delaylink":          nil,
	"test/bench/loopmount":          nil,
	"test/bench/ops":                nil,
	"test/e2e":                      nil,
}

// violations lists what in imports (the module's packages a package at
// path imports) the rules do not allow.
func violations(path string, imports []string) []string {
	may, known := allowed[path]
	if !known {
		return []string{path + " has no rule in ARCHITECTURE.md's table (internal/layout)"}
	}
	if may == nil {
		return nil
	}
	var out []string
	for _, imp := range imports {
		if !slices.Contains(may, imp) {
			out = append(out, path+" imports "+imp)
		}
	}
	return out
}

func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		switch d.Name() {
		case "testdata", "node_modules", "bin", ".git", ".ci":
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && dir != root {
			return filepath.SkipDir // a module of its own (deploy/kubernetes): not this module's packages
		}
		pkg, err := build.ImportDir(dir, 0)
		if _, none := err.(*build.NoGoError); none {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, dir)
		var ours []string
		for _, imp := range pkg.Imports {
			if p, ok := strings.CutPrefix(imp, module); ok {
				ours = append(ours, p)
			}
		}
		for _, v := range violations(filepath.ToSlash(rel), ours) {
			t.Error(v)
		}
		seen++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < len(allowed)-1 { // the module root has no package
		t.Fatalf("checked %d packages, fewer than the rules name (%d): is the walk rooted right?", seen, len(allowed))
	}
	if _, err := os.Stat(filepath.Join(root, "ARCHITECTURE.md")); err != nil {
		t.Errorf("the rules' table: %v", err)
	}
}

// Each program links one role's half of the live mount: the delegator's
// no FUSE library, the executor's no SSH server.
func TestProgramsLinkOneHalf(t *testing.T) {
	for prog, never := range map[string]string{
		"./cmd/awcp-ctl": "github.com/hanwen/go-fuse",
		"./cmd/awcp-fs":  "github.com/gliderlabs/ssh",
	} {
		cmd := exec.Command("go", "list", "-deps", prog)
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", prog, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, never) {
				t.Errorf("%s links %s", prog, dep)
			}
		}
		if !strings.Contains(string(out), "github.com/awcp/awcp/control\n") {
			t.Errorf("go list -deps %s names no control: is the list read right?", prog)
		}
	}
}

// The check fails on a forbidden import, and on a package without a rule.
func TestViolationsAreFound(t *testing.T) {
	if v := violations("sshd", []string{"sshd/sftpwire", "fs"}); !slices.Equal(v, []string{"sshd imports fs"}) {
		t.Errorf("sshd importing fs: %v", v)
	}
	if v := violations("lease", []string{"control"}); len(v) != 1 {
		t.Errorf("lease importing control: %v", v)
	}
	if v := violations("newpkg", nil); len(v) != 1 {
		t.Errorf("a package without a rule: %v", v)
	}
	if v := violations("test/e2e", []string{"control", "fs"}); v != nil {
		t.Errorf("tests may import anything: %v", v)
	}
}
