package scaffold

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		lang  string
		files []string // a few files each project must have
	}{
		{"go", []string{"go.mod", "main.go", "policy.go", "policy_test.go", "Makefile", "README.md", ".gitignore", "compactd/go.mod", "compactd/pdk/pdk.go", "compactd/abi/fastwire.go", "compactd/convo/convo.go", "compactd/facts/facts.go", "compactd/idents/idents.go"}},
		{"c", []string{"my-pol.c", "test_my-pol.c", "compactd.h", "Makefile", "README.md", ".gitignore"}},
		{"rust", []string{"Cargo.toml", "Cargo.lock", ".cargo/config.toml", "src/lib.rs", "compactd-pdk/Cargo.toml", "compactd-pdk/src/lib.rs", "Makefile"}},
		{"assemblyscript", []string{"package.json", "package-lock.json", "assembly/policy.ts", "test/policy.test.mjs", "compactd/index.ts", "compactd/exports.ts", "compactd/abort.ts", "compactd/testhost.mjs", "Makefile"}},
		{"as", []string{"assembly/policy.ts"}},
		{"RS", []string{"src/lib.rs"}},
	}
	for _, tt := range tests {
		t.Run(tt.lang, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "p")
			files, err := Write(tt.lang, "my-pol", dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.files {
				if !slices.Contains(files, f) {
					t.Errorf("%s not written (got %v)", f, files)
				}
			}
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(b), "__NAME__") || strings.Contains(f, "__NAME__") || strings.HasSuffix(f, ".tmpl") || strings.HasSuffix(f, "_test.go") && strings.HasPrefix(f, "compactd/") {
					t.Errorf("%s: template not filled in, or a test file of compactd copied", f)
				}
			}
		})
	}
}

func TestWriteRefuses(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, lang, policy, dir string
		want                    error
	}{
		{"unknown language", "cobol", "p", filepath.Join(t.TempDir(), "p"), ErrLanguage},
		{"bad name", "c", "My Policy", filepath.Join(t.TempDir(), "p"), ErrName},
		{"name starting with a digit", "go", "1p", filepath.Join(t.TempDir(), "p"), ErrName},
		{"directory not empty", "rust", "p", full, ErrExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Write(tt.lang, tt.policy, tt.dir); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	if entries, _ := os.ReadDir(full); len(entries) != 1 {
		t.Errorf("a refused Write changed the directory: %v", entries)
	}
}
