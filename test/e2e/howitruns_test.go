package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEachTestSaysHowItRuns reads this package's sources: every test
// calls parallel(t) or alone(t, "why") before anything but slow(t), so
// that a test added later decides, and says, whether it can run beside
// the others.
func TestEachTestSaysHowItRuns(t *testing.T) {
	parallel(t)
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files here: %v", err)
	}
	fset := token.NewFileSet()
	counted := map[string]int{}
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			how := howItRuns(fn.Body)
			if how == "" {
				t.Errorf("%s: %s calls neither parallel(t) nor alone(t, why) first (after slow(t) only)", fset.Position(fn.Pos()), fn.Name.Name)
			}
			counted[how]++
		}
	}
	t.Logf("tests: %d parallel, %d alone", counted["parallel"], counted["alone"])
}

// howItRuns is "parallel" or "alone" if body's first statements, past
// slow(t), call one of them, else "".
func howItRuns(body *ast.BlockStmt) string {
	for _, stmt := range body.List {
		expr, ok := stmt.(*ast.ExprStmt)
		if !ok {
			return ""
		}
		call, ok := expr.X.(*ast.CallExpr)
		if !ok {
			return ""
		}
		fn, ok := call.Fun.(*ast.Ident)
		if !ok {
			return ""
		}
		switch fn.Name {
		case "slow":
			continue
		case "parallel":
			return "parallel"
		case "alone":
			if len(call.Args) == 2 {
				if lit, ok := call.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING && len(lit.Value) > 2 {
					return "alone"
				}
			}
			return ""
		}
		return ""
	}
	return ""
}
