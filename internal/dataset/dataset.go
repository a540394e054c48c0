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

	"github.com/compactd/compactd/internal/chat"
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

// ErrNoData is returned when the data directory cannot be found.
var ErrNoData = errors.New("dataset: data directory not found (set COMPACTD_DATA to the directory holding the .jsonl files)")

// Dir finds the data directory: $COMPACTD_DATA, or a "shared/data"
// directory beside or above the working directory (the repository is
// checked out next to it).
func Dir() (string, error) {
	if d := os.Getenv("COMPACTD_DATA"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		for _, cand := range []string{filepath.Join(d, "shared", "data"), filepath.Join(d, "..", "shared", "data")} {
			if st, err := os.Stat(cand); err == nil && st.IsDir() {
				return filepath.Clean(cand), nil
			}
		}
		if filepath.Dir(d) == d {
			return "", ErrNoData
		}
	}
}

// Files returns the .jsonl files of the data directory, sorted.
func Files() ([]string, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
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

// File returns the path of one data file by base name.
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
