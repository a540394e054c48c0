// Package dataset reads the project's real agent conversations (JSONL, one
// conversation per line: {"id","source","license","messages":[...]}) and
// samples the prefixes an agent would send turn by turn. Tests, benchmarks
// and `compactd eval` use it.
package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compactd/compactd/chat"
)

// Conversation is one line of a data file.
type Conversation struct {
	ID      string
	Source  string
	License string
	File    string // base name of the data file
	Line    int
	// Chat holds the messages with their original bytes.
	Chat *chat.Conversation
}

// maxLine bounds one JSONL line (a whole conversation).
const maxLine = 64 << 20

// ReadFile reads every conversation of a JSONL file. Blank lines are
// skipped; a malformed line is an error naming the line.
func ReadFile(path string) ([]Conversation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), maxLine)
	var out []Conversation
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec struct {
			ID       string          `json:"id"`
			Source   string          `json:"source"`
			License  string          `json:"license"`
			Messages json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("dataset: %s:%d: %w", path, line, err)
		}
		c, err := chat.Parse(rec.Messages)
		if err != nil {
			return nil, fmt.Errorf("dataset: %s:%d: %w", path, line, err)
		}
		id := rec.ID
		if id == "" {
			id = fmt.Sprintf("%s:%d", filepath.Base(path), line)
		}
		out = append(out, Conversation{ID: id, Source: rec.Source, License: rec.License, File: filepath.Base(path), Line: line, Chat: c})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", path, err)
	}
	return out, nil
}

// ErrNoData is returned when the full data directory cannot be found; the
// error wrapping it says where Dir looked.
var ErrNoData = errors.New("dataset: full data set not found")

// FixtureDirName is where the repository keeps its test fixtures: a few
// real conversations from each data file, under the same file names.
const FixtureDirName = "testdata/conversations"

// FixtureDir returns the repository's fixture directory, found by walking
// up from the working directory to compactd's go.mod. Tests use it; it
// needs no data outside the repository.
func FixtureDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("dataset: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/compactd/compactd\n")) {
			return filepath.Join(d, filepath.FromSlash(FixtureDirName)), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("dataset: no compactd go.mod above %s, so no %s", wd, FixtureDirName)
		}
	}
}

// FixtureFiles returns the fixture .jsonl files, sorted.
func FixtureFiles() ([]string, error) {
	dir, err := FixtureDir()
	if err != nil {
		return nil, err
	}
	return jsonlFiles(dir)
}

// Fixture returns the path of one fixture file by base name (the same
// names as the full data set's files).
func Fixture(name string) (string, error) {
	dir, err := FixtureDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("dataset: fixture: %w", err)
	}
	return path, nil
}

// Dir finds the full data directory, used by `compactd eval` and the
// benchmarks: $COMPACTD_DATA, or a "shared/data" directory beside or above
// the working directory (the repository is checked out next to it). When
// there is none, the error (wrapping ErrNoData) names every place it
// looked and how to point it at the data.
func Dir() (string, error) {
	if d := os.Getenv("COMPACTD_DATA"); d != "" {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return "", fmt.Errorf("%w: COMPACTD_DATA=%s is not a directory", ErrNoData, d)
		}
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	var looked []string
	seen := map[string]bool{}
	for d := wd; ; d = filepath.Dir(d) {
		for _, cand := range []string{filepath.Join(d, "shared", "data"), filepath.Join(filepath.Dir(d), "shared", "data")} {
			if seen[cand] {
				continue
			}
			seen[cand] = true
			looked = append(looked, cand)
			if st, err := os.Stat(cand); err == nil && st.IsDir() {
				return cand, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("%w: COMPACTD_DATA is not set and none of %s exists; "+
				"set COMPACTD_DATA to the directory holding the .jsonl files (tests need none: they use %s)",
				ErrNoData, strings.Join(looked, ", "), FixtureDirName)
		}
	}
}

// Files returns the .jsonl files of the full data directory, sorted.
func Files() ([]string, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	return jsonlFiles(dir)
}

func jsonlFiles(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no .jsonl files in %s", ErrNoData, dir)
	}
	sort.Strings(files)
	return files, nil
}

// File returns the path of one file of the full data set by base name.
func File(name string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// Prefix returns the first n messages of c as a conversation of its own
// (sharing the bytes).
func Prefix(c *chat.Conversation, n int) *chat.Conversation {
	return &chat.Conversation{Raw: c.Raw[:n:n], Messages: append(c.Messages[:0:0], c.Messages[:n]...)}
}

// TurnPrefixes returns the lengths of the prefixes a stateless agent sends:
// the history before each assistant message, plus the whole conversation.
func TurnPrefixes(c *chat.Conversation) []int {
	var out []int
	for i := 1; i < c.Len(); i++ {
		if c.Messages[i].Role == "assistant" {
			out = append(out, i)
		}
	}
	return append(out, c.Len())
}

// SamplePrefixes returns up to k prefix lengths spread evenly over
// TurnPrefixes, always including the shortest and the whole conversation.
func SamplePrefixes(c *chat.Conversation, k int) []int {
	all := TurnPrefixes(c)
	if len(all) <= k || k < 2 {
		return all
	}
	out := make([]int, 0, k)
	for i := 0; i < k; i++ {
		out = append(out, all[i*(len(all)-1)/(k-1)])
	}
	return out
}
