package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDir(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "checkout", "compactd")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("absent: the error names every place looked", func(t *testing.T) {
		t.Setenv("COMPACTD_DATA", "")
		t.Chdir(repo)
		_, err := Dir()
		if !errors.Is(err, ErrNoData) {
			t.Fatalf("err = %v, want ErrNoData", err)
		}
		for _, want := range []string{
			filepath.Join(repo, "shared", "data"), filepath.Join(root, "checkout", "shared", "data"),
			filepath.Join(root, "shared", "data"), "COMPACTD_DATA", FixtureDirName,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not mention %s:\n%v", want, err)
			}
		}
	})
	t.Run("beside the checkout", func(t *testing.T) {
		t.Setenv("COMPACTD_DATA", "")
		data := filepath.Join(root, "checkout", "shared", "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(filepath.Join(root, "checkout", "shared"))
		t.Chdir(repo)
		if d, err := Dir(); err != nil || d != data {
			t.Fatalf("Dir = %q, %v; want %s", d, err, data)
		}
	})
	t.Run("COMPACTD_DATA that is not a directory", func(t *testing.T) {
		file := filepath.Join(root, "file")
		os.WriteFile(file, nil, 0o644)
		t.Setenv("COMPACTD_DATA", file)
		if _, err := Dir(); !errors.Is(err, ErrNoData) || !strings.Contains(err.Error(), "COMPACTD_DATA="+file) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("COMPACTD_DATA wins", func(t *testing.T) {
		t.Setenv("COMPACTD_DATA", root)
		if d, err := Dir(); err != nil || d != root {
			t.Fatalf("Dir = %q, %v", d, err)
		}
	})
}

func TestFixturesNeedNoFullData(t *testing.T) {
	t.Setenv("COMPACTD_DATA", "")
	files, err := FixtureFiles()
	if err != nil || len(files) == 0 {
		t.Fatalf("FixtureFiles = %v, %v", files, err)
	}
	for _, f := range files {
		convs, err := ReadFile(f)
		if err != nil || len(convs) == 0 {
			t.Errorf("%s: %d conversations, %v", f, len(convs), err)
		}
		for _, c := range convs {
			if c.Source == "" || c.License == "" {
				t.Errorf("%s:%d: no source or license", c.File, c.Line)
			}
		}
	}
}
