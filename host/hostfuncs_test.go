package host

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// signature is a Wasm function type written as the contract writes it:
// "(i64, i64) -> (i64)", "(i64) -> ()".
type signature string

func sigOf(params, results []api.ValueType) signature {
	names := func(ts []api.ValueType) string {
		var out []string
		for _, t := range ts {
			out = append(out, api.ValueTypeName(t))
		}
		return "(" + strings.Join(out, ", ") + ")"
	}
	return signature(names(params) + " -> " + names(results))
}

// tableSigs returns the host-function table and the fast path's kernel
// table as module → name → signature.
func tableSigs() map[string]map[string]signature {
	out := map[string]map[string]signature{abi.HostModule: {}, abi.ExtismEnvModule: {}}
	for _, f := range hostFuncs() {
		out[abi.HostModule][f.name] = sigOf(f.params, f.results)
	}
	for _, f := range kernelFuncs() {
		out[abi.ExtismEnvModule][f.name] = sigOf(f.params, f.results)
	}
	return out
}

// TestHostFunctionsOnBothPaths: the fast path and the Extism path each
// register every entry of the host-function table, with its signature,
// and nothing else.
func TestHostFunctionsOnBothPaths(t *testing.T) {
	t.Parallel()
	want := tableSigs()[abi.HostModule]
	if len(want) != len(hostFuncs()) {
		t.Fatalf("the table names a function twice: %d entries, %d names", len(hostFuncs()), len(want))
	}

	extismSigs := map[string]signature{}
	for _, hf := range extismHostFunctions() {
		if hf.Namespace != abi.HostModule {
			t.Errorf("Extism path: %s is in module %q, want %q", hf.Name, hf.Namespace, abi.HostModule)
		}
		extismSigs[hf.Name] = sigOf(hf.Params, hf.Returns)
	}
	if !mapsEqual(extismSigs, want) {
		t.Errorf("Extism path registers %v; the table has %v", extismSigs, want)
	}

	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	if err := instantiateFastHostModules(ctx, rt, hclog.NewNullLogger(), newLogLimiter()); err != nil {
		t.Fatal(err)
	}
	fastSigs := map[string]signature{}
	for name, def := range rt.Module(abi.HostModule).ExportedFunctionDefinitions() {
		fastSigs[name] = sigOf(def.ParamTypes(), def.ResultTypes())
	}
	if !mapsEqual(fastSigs, want) {
		t.Errorf("fast path registers %v; the table has %v", fastSigs, want)
	}
}

func mapsEqual(a, b map[string]signature) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// imported is one import a guest kit declares.
type imported struct {
	module, name string
	sig          signature
}

// TestHostFunctionDeclarations: what the contract, the Go PDK and the
// kits declare agrees with the host's tables. Every extism:host/user
// import is a host function of the table with its signature, and every
// extism:host/env import one of the fast path's kernel functions with
// Extism's signature (the kits take the fast path, whose kernel must
// provide each). The Go PDK and abi/README.md name every host function;
// a kit may leave out what it does not use.
func TestHostFunctionDeclarations(t *testing.T) {
	t.Parallel()
	table := tableSigs()
	sources := []struct {
		path  string
		parse func(t *testing.T, src string) []imported
		all   bool // must declare every host function
	}{
		{"../pdk/guest_wasip1.go", goImports, true},
		{"../kits/c/compactd.h", cImports, false},
		{"../kits/rust/compactd-pdk/src/lib.rs", rustImports, false},
		{"../kits/assemblyscript/compactd/index.ts", asImports, false},
		{"../kits/assemblyscript/compactd/exports.ts", asImports, false},
	}
	for _, src := range sources {
		t.Run(filepath.Base(src.path), func(t *testing.T) {
			b, err := os.ReadFile(src.path)
			if err != nil {
				t.Fatal(err)
			}
			imports := src.parse(t, string(b))
			if len(imports) == 0 {
				t.Fatalf("%s: no imports found (has the declaration syntax changed?)", src.path)
			}
			declared := map[string]bool{}
			for _, im := range imports {
				mod, ok := table[im.module]
				if !ok {
					continue // WASI
				}
				want, ok := mod[im.name]
				switch {
				case !ok:
					t.Errorf("%s imports %s %s, which the host does not provide", src.path, im.module, im.name)
				case im.sig != want:
					t.Errorf("%s declares %s %s as %s; the host's is %s", src.path, im.module, im.name, im.sig, want)
				}
				if im.module == abi.HostModule {
					declared[im.name] = true
				}
			}
			if src.all {
				for name := range table[abi.HostModule] {
					if !declared[name] {
						t.Errorf("%s does not declare the host function %s", src.path, name)
					}
				}
			}
		})
	}
	t.Run("abi/README.md", func(t *testing.T) {
		b, err := os.ReadFile("../abi/README.md")
		if err != nil {
			t.Fatal(err)
		}
		documented := readmeHostFunctions(t, string(b))
		if !mapsEqual(documented, table[abi.HostModule]) {
			t.Errorf("abi/README.md's \"Host functions\" documents %v; the table has %v", documented, table[abi.HostModule])
		}
	})
}

// wasmType maps a guest language's integer type to its Wasm type.
var wasmType = map[string]string{
	"uint64": "i64", "int64": "i64", "uint32": "i32", "int32": "i32", "uintptr": "i32", // Go
	"uint64_t": "i64", "int64_t": "i64", "uint32_t": "i32", "int32_t": "i32", // C
	"u64": "i64", "i64": "i64", "u32": "i32", "i32": "i32", "usize": "i32", // Rust, AssemblyScript
}

func mapTypes(t *testing.T, types []string) string {
	t.Helper()
	var out []string
	for _, ty := range types {
		ty = strings.TrimSpace(ty)
		if ty == "" || ty == "void" {
			continue
		}
		w, ok := wasmType[ty]
		if !ok {
			t.Fatalf("no Wasm type for %q", ty)
		}
		out = append(out, w)
	}
	return "(" + strings.Join(out, ", ") + ")"
}

func sig(t *testing.T, params, results []string) signature {
	return signature(mapTypes(t, params) + " -> " + mapTypes(t, results))
}

// goImports reads the //go:wasmimport declarations of a Go file.
func goImports(t *testing.T, src string) []imported {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var out []imported
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Doc == nil {
			continue
		}
		for _, c := range fn.Doc.List {
			mod, name, ok := strings.Cut(strings.TrimPrefix(c.Text, "//go:wasmimport "), " ")
			if !ok || !strings.HasPrefix(c.Text, "//go:wasmimport ") {
				continue
			}
			typeNames := func(fl *ast.FieldList) []string {
				var out []string
				if fl == nil {
					return nil
				}
				for _, field := range fl.List {
					n := max(len(field.Names), 1)
					for range n {
						out = append(out, types(field.Type))
					}
				}
				return out
			}
			out = append(out, imported{mod, name, sig(t, typeNames(fn.Type.Params), typeNames(fn.Type.Results))})
		}
	}
	return out
}

func types(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}

var cImport = regexp.MustCompile(`CD__IMPORT\("([^"]+)", "([^"]+)"\) extern (\w+) \w+\(([^)]*)\);`)

// cImports reads the C kit's CD__IMPORT declarations.
func cImports(t *testing.T, src string) []imported {
	var out []imported
	for _, m := range cImport.FindAllStringSubmatch(src, -1) {
		out = append(out, imported{m[1], m[2], sig(t, strings.Split(m[4], ","), []string{m[3]})})
	}
	return out
}

var (
	rustBlock = regexp.MustCompile(`(?s)#\[link\(wasm_import_module = "([^"]+)"\)\]\s*extern "C" \{(.*?)\n\s*\}`)
	rustFn    = regexp.MustCompile(`fn (\w+)\(([^)]*)\)(?: -> (\w+))?;`)
)

// rustImports reads the Rust kit's #[link(wasm_import_module)] blocks.
func rustImports(t *testing.T, src string) []imported {
	var out []imported
	for _, b := range rustBlock.FindAllStringSubmatch(src, -1) {
		for _, m := range rustFn.FindAllStringSubmatch(b[2], -1) {
			out = append(out, imported{b[1], m[1], sig(t, argTypes(m[2]), []string{m[3]})})
		}
	}
	return out
}

var asImport = regexp.MustCompile(`@external\("([^"]+)", "([^"]+)"\)\s*declare function \w+\(([^)]*)\): (\w+);`)

// asImports reads the AssemblyScript kit's @external declarations.
func asImports(t *testing.T, src string) []imported {
	var out []imported
	for _, m := range asImport.FindAllStringSubmatch(src, -1) {
		out = append(out, imported{m[1], m[2], sig(t, argTypes(m[3]), []string{m[4]})})
	}
	return out
}

// argTypes returns the types of "name: type, name: type".
func argTypes(args string) []string {
	var out []string
	for _, a := range strings.Split(args, ",") {
		if _, ty, ok := strings.Cut(a, ":"); ok {
			out = append(out, strings.TrimSpace(ty))
		}
	}
	return out
}

var readmeHeading = regexp.MustCompile("(?m)^### `(\\w+)\\(([^)]*)\\) -> ([^`]+)`")

// readmeHostFunctions reads the signatures of the "Host functions"
// section's headings: ### `name(i64 a, i64 b) -> i64`.
func readmeHostFunctions(t *testing.T, doc string) map[string]signature {
	_, section, ok := strings.Cut(doc, "\n## Host functions\n")
	if !ok {
		t.Fatal(`abi/README.md has no "## Host functions" section`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	out := map[string]signature{}
	for _, m := range readmeHeading.FindAllStringSubmatch(section, -1) {
		var params []string
		for _, p := range strings.Split(m[2], ",") {
			if f := strings.Fields(p); len(f) > 0 {
				params = append(params, f[0])
			}
		}
		results := strings.Trim(m[3], "()")
		out[m[1]] = signature("(" + strings.Join(params, ", ") + ") -> (" + results + ")")
	}
	if len(out) == 0 {
		t.Fatal(`no ### headings in abi/README.md's "Host functions"`)
	}
	return out
}
