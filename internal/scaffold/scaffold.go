// Package scaffold writes a new compactd policy project: the example
// policy in one of the kit languages (Go, C, Rust, AssemblyScript), its
// unit tests, a Makefile (`make` builds NAME.wasm, `make test` runs the
// tests, `make install` copies the module into the plugins directory) and
// the language's kit, so the project builds on its own. `compactd new`
// runs it.
package scaffold

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	compactd "github.com/compactd/compactd"
	"github.com/compactd/compactd/abi"
)

// Errors Write returns (wrapped).
var (
	ErrLanguage = errors.New("unknown language")
	ErrName     = errors.New("invalid policy name")
	ErrExists   = errors.New("directory is not empty")
)

// A kit copied into a project: files under from (in the embedded tree)
// land under to (in the project).
type copySpec struct{ from, to string }

type language struct {
	name    string
	aliases []string
	kit     []copySpec
	// goModule: also write go.mod for the vendored Go packages.
	goModule bool
}

var languages = []language{
	{name: "go", aliases: []string{"golang"}, goModule: true, kit: []copySpec{
		{"abi", "compactd/abi"}, {"convo", "compactd/convo"}, {"facts", "compactd/facts"}, {"idents", "compactd/idents"}, {"pdk", "compactd/pdk"},
	}},
	{name: "c", kit: []copySpec{{"kits/c/compactd.h", "compactd.h"}}},
	{name: "rust", aliases: []string{"rs"}, kit: []copySpec{{"kits/rust/compactd-pdk", "compactd-pdk"}}},
	{name: "assemblyscript", aliases: []string{"as"}, kit: []copySpec{{"kits/assemblyscript/compactd", "compactd"}}},
}

// Languages returns the languages Write knows, by their main names.
func Languages() []string {
	out := make([]string, len(languages))
	for i, l := range languages {
		out[i] = l.name
	}
	return out
}

func lookup(lang string) (*language, error) {
	lang = strings.ToLower(lang)
	for i := range languages {
		l := &languages[i]
		if l.name == lang {
			return l, nil
		}
		for _, a := range l.aliases {
			if a == lang {
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("%w %q (want one of %s)", ErrLanguage, lang, strings.Join(Languages(), ", "))
}

// goVersion is the go directive of generated Go projects: the Go release
// compactd itself requires.
const goVersion = "1.26"

// Write creates a project for policy name in lang under dir, which must
// not exist or be empty. It returns the files written, relative to dir.
func Write(lang, name, dir string) ([]string, error) {
	l, err := lookup(lang)
	if err != nil {
		return nil, err
	}
	if !abi.ValidName(name) {
		return nil, fmt.Errorf("%w %q: want 1-64 characters of a-z, 0-9, _ and -, starting with a letter", ErrName, name)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrExists, dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("new project: %w", err)
	}

	files := map[string][]byte{}
	subst := strings.NewReplacer("__NAME__", name, "__GOVERSION__", goVersion)
	tmplRoot := "kits/templates/" + l.name
	err = fs.WalkDir(compactd.Sources, tmplRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := compactd.Sources.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, tmplRoot+"/")
		// Templates that would otherwise be built as part of compactd
		// (Go files, a go.mod) carry a .tmpl suffix.
		rel = strings.TrimSuffix(rel, ".tmpl")
		if rel == "gitignore" {
			rel = ".gitignore"
		}
		files[subst.Replace(rel)] = []byte(subst.Replace(string(b)))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("new project: templates: %w", err)
	}
	for _, c := range l.kit {
		err := fs.WalkDir(compactd.Sources, c.from, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := compactd.Sources.ReadFile(p)
			if err != nil {
				return err
			}
			files[path.Join(c.to, strings.TrimPrefix(strings.TrimPrefix(p, c.from), "/"))] = b
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("new project: kit: %w", err)
		}
	}
	if l.goModule {
		files["compactd/go.mod"] = []byte("// compactd's Go PDK, as `compactd new` wrote it (the module is not\n// published): abi, convo and pdk, standard library only.\nmodule github.com/compactd/compactd\n\ngo " + goVersion + "\n")
	}

	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		target := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return nil, fmt.Errorf("new project: %w", err)
		}
		if err := os.WriteFile(target, files[n], 0o644); err != nil {
			return nil, fmt.Errorf("new project: %w", err)
		}
	}
	return names, nil
}
