package testenv

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// TestUnitExcludedFilesOnlySkip checks the promise the package doc makes
// for `//go:build !unit`: `make test-unit` builds such a file out, so
// nothing in it may be a test that a unit run would have run. Every test,
// fuzz target and example in such a file must skip in a unit run before
// it does anything: its first statements (after t.Parallel or t.Helper)
// call Integration or Long, skip under testing.Short or Unit (a unit run
// is also -short), or call a helper of the package whose first statements
// do. A file that breaks the rule would hide a unit test from `make
// test-unit` without anyone noticing.
func TestUnitExcludedFilesOnlySkip(t *testing.T) {
	root := moduleRoot(t)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		excluded, err := unitExcluded(src)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if !excluded {
			return nil
		}
		files++
		problems, err := checkUnitExcludedFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, p := range problems {
			t.Errorf("%s: %s", rel, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("found no test file built out by -tags unit; the walk is broken")
	}
	t.Logf("%d test files built out by -tags unit; each of their tests skips in a unit run", files)
}

// TestUnitExcludedCheck runs the check on small files, including ones
// that break the rule.
func TestUnitExcludedCheck(t *testing.T) {
	const head = "//go:build !unit\n\npackage p\n\nimport (\n\t\"testing\"\n\n\t\"github.com/compactd/compactd/internal/testenv\"\n)\n\n"
	for _, tt := range []struct {
		name, src string
		problems  int
	}{
		{"integration first", "func TestA(t *testing.T) {\n\ttestenv.Integration(t, \"a daemon\")\n\tt.Log()\n}\n", 0},
		{"long after parallel", "func TestA(t *testing.T) {\n\tt.Parallel()\n\ttestenv.Long(t, \"slow\")\n}\n", 0},
		{"short skip", "func TestA(t *testing.T) {\n\tif testing.Short() {\n\t\tt.Skip(\"x\")\n\t}\n}\n", 0},
		{"unit skip", "func TestA(t *testing.T) {\n\tif testenv.Unit() {\n\t\tt.SkipNow()\n\t}\n}\n", 0},
		{"through a helper", "func TestA(t *testing.T) {\n\td := start(t)\n\t_ = d\n}\nfunc start(t *testing.T) int {\n\tt.Helper()\n\treturn helper2(t)\n}\nfunc helper2(t *testing.T) int {\n\ttestenv.Integration(t, \"x\")\n\treturn 1\n}\n", 0},
		{"benchmarks and TestMain are not tests", "func BenchmarkA(b *testing.B) {}\nfunc TestMain(m *testing.M) { m.Run() }\n", 0},
		{"no skip", "func TestA(t *testing.T) {\n\tt.Log(\"runs\")\n}\n", 1},
		{"skip too late", "func TestA(t *testing.T) {\n\tx := 1\n\t_ = x\n\ttestenv.Integration(t, \"x\")\n}\n", 1},
		{"short without a skip", "func TestA(t *testing.T) {\n\tif testing.Short() {\n\t\tt.Log(\"short\")\n\t}\n}\n", 1},
		{"helper that does not skip", "func TestA(t *testing.T) {\n\tstart(t)\n}\nfunc start(t *testing.T) { t.Log() }\n", 1},
		{"recursive helper", "func TestA(t *testing.T) {\n\tstart(t)\n}\nfunc start(t *testing.T) { start(t) }\n", 1},
		{"fuzz target", "func FuzzA(f *testing.F) {\n\tf.Add(1)\n}\n", 1},
		{"example", "func ExampleA() {\n\t// Output:\n}\n", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "a_test.go")
			if err := os.WriteFile(path, []byte(head+tt.src), 0o644); err != nil {
				t.Fatal(err)
			}
			excluded, err := unitExcluded([]byte(head))
			if err != nil || !excluded {
				t.Fatalf("the !unit constraint is not seen: %v %v", excluded, err)
			}
			problems, err := checkUnitExcludedFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != tt.problems {
				t.Errorf("got %d problems %q, want %d", len(problems), problems, tt.problems)
			}
		})
	}
	for src, want := range map[string]bool{
		"package p\n":                              false,
		"//go:build unit\n\npackage p\n":           false,
		"//go:build linux && !unit\n\npackage p\n": runtime.GOOS == "linux",
		"//go:build !race\n\npackage p\n":          false,
	} {
		if got, err := unitExcluded([]byte(src)); err != nil || got != want {
			t.Errorf("unitExcluded(%q) = %v %v, want %v", src, got, err, want)
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// unitExcluded reports whether a file's build constraint leaves it out
// of a build with -tags unit and keeps it in one without.
func unitExcluded(src []byte) (bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		return false, err
	}
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				return false, err
			}
			with, without := expr.Eval(buildTag(true)), expr.Eval(buildTag(false))
			return !with && without, nil
		}
	}
	return false, nil
}

// buildTag satisfies the tags of this machine's build, and unit as given.
func buildTag(unit bool) func(string) bool {
	return func(tag string) bool {
		switch tag {
		case "unit":
			return unit
		case runtime.GOOS, runtime.GOARCH, runtime.Compiler:
			return true
		case "unix":
			return runtime.GOOS != "windows" && runtime.GOOS != "plan9" && runtime.GOOS != "js" && runtime.GOOS != "wasip1"
		}
		for _, r := range build.Default.ReleaseTags {
			if tag == r {
				return true
			}
		}
		return false
	}
}

// checkUnitExcludedFile returns what in the file at path would run in a
// unit run: each test, fuzz target and example that does not skip first.
// Helpers are looked up among the top-level functions of the file's
// directory (its package and its external test package).
func checkUnitExcludedFile(path string) ([]string, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		return nil, err
	}
	funcs := map[string]*ast.FuncDecl{}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.go"))
	for _, m := range matches {
		f := file
		if m != path {
			if f, err = parser.ParseFile(fset, m, nil, 0); err != nil {
				return nil, err
			}
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Body != nil {
				funcs[fn.Name.Name] = fn
			}
		}
	}
	c := skipChecker{funcs: funcs, memo: map[string]bool{}}
	var problems []string
	for _, d := range file.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name == "TestMain" {
			continue
		}
		name := fn.Name.Name
		isTest := strings.HasPrefix(name, "Test") || strings.HasPrefix(name, "Fuzz")
		if !isTest && !strings.HasPrefix(name, "Example") {
			continue
		}
		if strings.HasPrefix(name, "Example") {
			problems = append(problems, fmt.Sprintf("%s: an example cannot skip, and runs in a unit run", name))
			continue
		}
		if fn.Body == nil || !c.skipsFirst(fn.Body.List) {
			problems = append(problems, fmt.Sprintf("%s (line %d) does not skip in a unit run before its first statement that does something: call testenv.Integration or testenv.Long first, or move it to a file without //go:build !unit",
				name, fset.Position(fn.Pos()).Line))
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// skipChecker decides whether a list of statements skips in a unit run
// before it does anything else.
type skipChecker struct {
	funcs map[string]*ast.FuncDecl
	memo  map[string]bool // helper → skips first; false while being checked
}

func (c skipChecker) skipsFirst(stmts []ast.Stmt) bool {
	for _, s := range stmts {
		switch s := s.(type) {
		case *ast.ExprStmt:
			call, ok := s.X.(*ast.CallExpr)
			if !ok {
				return false
			}
			if c.skipCall(call) {
				return true
			}
			if !neutralCall(call) {
				return false
			}
		case *ast.AssignStmt:
			return len(s.Rhs) == 1 && c.isSkipCallExpr(s.Rhs[0])
		case *ast.ReturnStmt:
			return len(s.Results) > 0 && c.isSkipCallExpr(s.Results[0])
		case *ast.IfStmt:
			return s.Init == nil && unitCondition(s.Cond) && callsSkip(s.Body)
		default:
			return false
		}
	}
	return false
}

func (c skipChecker) isSkipCallExpr(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	return ok && c.skipCall(call)
}

// skipCall reports whether call is testenv.Integration or testenv.Long,
// or a helper of the package whose first statements skip.
func (c skipChecker) skipCall(call *ast.CallExpr) bool {
	switch fun := call.Fun.(type) {
	case *ast.SelectorExpr:
		pkg, ok := fun.X.(*ast.Ident)
		return ok && pkg.Name == "testenv" && (fun.Sel.Name == "Integration" || fun.Sel.Name == "Long")
	case *ast.Ident:
		fn := c.funcs[fun.Name]
		if fn == nil {
			return false
		}
		if skips, seen := c.memo[fun.Name]; seen {
			return skips
		}
		c.memo[fun.Name] = false // a helper that recurses into itself does not skip
		skips := c.skipsFirst(fn.Body.List)
		c.memo[fun.Name] = skips
		return skips
	}
	return false
}

// neutralCall reports whether call is t.Parallel() or t.Helper(), which
// may come before the skip.
func neutralCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && len(call.Args) == 0 && (sel.Sel.Name == "Parallel" || sel.Sel.Name == "Helper")
}

// unitCondition reports whether cond is testing.Short() or
// testenv.Unit(), alone or in an || chain.
func unitCondition(cond ast.Expr) bool {
	switch e := cond.(type) {
	case *ast.BinaryExpr:
		return e.Op == token.LOR && (unitCondition(e.X) || unitCondition(e.Y))
	case *ast.ParenExpr:
		return unitCondition(e.X)
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		pkg, ok := sel.X.(*ast.Ident)
		return ok && (pkg.Name == "testing" && sel.Sel.Name == "Short" || pkg.Name == "testenv" && sel.Sel.Name == "Unit")
	}
	return false
}

// callsSkip reports whether block calls Skip, Skipf or SkipNow.
func callsSkip(block *ast.BlockStmt) bool {
	found := false
	ast.Inspect(block, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "Skip", "Skipf", "SkipNow":
					found = true
				}
			}
		}
		return !found
	})
	return found
}
