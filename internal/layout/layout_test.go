package layout

import (
	"go/build"
	"io/fs"
	"os"
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
	"internal/bufconn": {},
	"internal/confine": {},
	"internal/layout":  {},
	"sshd/sftpwire":    {},
	"lease":            {},
	"archive":          {"internal/confine"},
	"fs/sftpc":         {"sshd/sftpwire"},
	"fs":               {"fs/sftpc", "sshd/sftpwire", "internal/bufconn"},
	"sshd":             {"sshd/sftpwire", "internal/confine", "internal/bufconn"},
	"sshd/sshdtest":    {"sshd"},
	"control/agent":    {"lease"},
	"control/acp":      {"control/agent", "lease"},
	// control still holds both roles, and so reaches both halves of the
	// live mount; the role split (issue 26) takes fs and sshd from it.
	"control":             {"archive", "control/agent", "lease", "fs", "sshd", "sshd/sftpwire"},
	"control/mcpserver":   {"control", "lease"},
	"cmd/internal/clikit": {},
	"cmd/awcp-ctl":        {"cmd/internal/clikit", "control", "control/mcpserver", "lease", "sshd"},
	"cmd/awcp-fs":         {"archive", "cmd/internal/clikit", "control", "control/acp", "control/agent", "fs", "lease"},
	"test/bench/control":  nil,
	"test/e2e":            nil,
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
