package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestUpdateStaysBounded (F11): repeated updates rewrite the file to the
// same bytes for the same settings, so it cannot creep; new settings can
// grow it only up to MaxFileBytes, and an update past that is refused with
// nothing saved.
func TestUpdateStaysBounded(t *testing.T) {
	m := newManager(t, "# mine\npolicy: sliding   # default\npolicies: {sliding: {window_size: 8}}\n", Options{})
	var sizes []int
	for i := 0; i < 300; i++ {
		patch := fmt.Sprintf(`{"policies":{"sliding":{"window_size":%d,"step":null}},"limits":{"plugin":{"call_timeout":"%ds"},"plugins":{"lastn":null}},"compact":null}`, i%7+1, i%5+1)
		if i%2 == 1 {
			patch = `{"policies":{"sliding":{"step":2}},"limits":{"plugins":{"lastn":{"max_instances":2}}},"compact":{"model":"m"}}`
		}
		if _, err := m.Update([]byte(patch)); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		st, _ := os.Stat(m.Path())
		sizes = append(sizes, int(st.Size()))
	}
	for i := 2; i < len(sizes); i++ {
		if sizes[i] != sizes[i-2] {
			t.Fatalf("the file creeps: %d bytes after update %d, %d after update %d", sizes[i-2], i-2, sizes[i], i)
		}
	}
	// The same update twice gives the same bytes.
	m.Update([]byte(`{"policies":{"sliding":{"window_size":3}}}`))
	first, _ := os.ReadFile(m.Path())
	m.Update([]byte(`{"policies":{"sliding":{"window_size":3}}}`))
	second, _ := os.ReadFile(m.Path())
	if !bytes.Equal(first, second) {
		t.Fatalf("not idempotent:\n%s\n---\n%s", first, second)
	}

	// Settings for ever more policies grow it up to the limit, no further:
	// a quarter of the limit at a time (every update parses the whole
	// file, twice; 64 KiB at a time, that was most of the package's CPU
	// under -race).
	big := strings.Repeat("x", MaxFileBytes/4)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = m.Update([]byte(fmt.Sprintf(`{"policies":{"p%d":{"note":%q}}}`, i, big)))
	}
	if err == nil || !strings.Contains(err.Error(), "the limit is 1048576") {
		t.Fatalf("updates past the size limit: %v", err)
	}
	if st, _ := os.Stat(m.Path()); st.Size() > MaxFileBytes {
		t.Fatalf("file is %d bytes", st.Size())
	}
}

func TestOversizedFileRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, append([]byte("policy: sliding\n#"), bytes.Repeat([]byte("x"), MaxFileBytes)...), 0o600)
	if _, err := Open(Options{Path: path}); err == nil || !strings.Contains(err.Error(), "the limit is 1048576") {
		t.Errorf("Open = %v", err)
	}
}

// FuzzUpdate applies arbitrary merge patches to arbitrary config files
// (applyPatch, Update without the disk: fsync made fuzzing crawl). It
// never panics; when it succeeds, the file it makes parses to the config
// it returns, stays within MaxFileBytes, and applying the same patch to it
// again gives the same bytes (RFC 7396 patches are idempotent, and the
// normalized form must be too).
func FuzzUpdate(f *testing.F) {
	f.Add([]byte(fullConfig), []byte(`{"policies":{"sliding":{"step":4}}}`))
	f.Add([]byte("# c\npolicy: sliding # d\n"), []byte(`{"policy":null,"pipeline":["a","b"]}`))
	f.Add([]byte("limits: {plugin: {call_timeout: 1s}}\n"), []byte(`{"limits":{"plugin":{"max_instances":-3}}}`))
	f.Add([]byte("a: &x {b: 1}\n"), []byte(`{"limits":null}`))
	f.Add([]byte(""), []byte(`{"policies":{"lastn":{"n":1e100}}}`))
	f.Add([]byte("policies:\n  x: &a {k: [1, 2]}\n  y: *a\n"), []byte("policies:\n  y: {k: null}\n"))
	f.Add([]byte("llm: {provider: openai}\n"), []byte(`{"llm":{"model":"m"},"state":{"ttl":"2h"}}`))
	f.Fuzz(func(t *testing.T, file, patch []byte) {
		if _, err := Parse(file, "fuzz"); err != nil {
			return // the file itself is invalid: Update refuses it first
		}
		parse := func(b []byte) *yaml.Node {
			var doc yaml.Node
			if err := yaml.Unmarshal(b, &doc); err != nil {
				t.Fatalf("a valid file does not parse: %v", err)
			}
			return &doc
		}
		written, cfg, err := applyPatch(parse(file), patch)
		if err != nil {
			return
		}
		if len(written) > MaxFileBytes {
			t.Fatalf("wrote %d bytes", len(written))
		}
		parsed, err := Parse(written, "written")
		if err != nil {
			t.Fatalf("wrote a file that does not parse: %v\n%s", err, written)
		}
		if !reflect.DeepEqual(cfg, parsed) {
			t.Fatalf("the config returned is not the file's")
		}
		again, _, err := applyPatch(parse(written), patch)
		if err != nil {
			t.Fatalf("the same patch, again: %v", err)
		}
		if !bytes.Equal(again, written) {
			t.Fatalf("the same patch twice changed the file:\n%s\n---\n%s", written, again)
		}
	})
}
