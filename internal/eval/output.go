package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Write writes the report into dir (created if needed): report.json
// (every figure), summary.md (the tables in Markdown), and two SVG charts
// per data file with an evaluated conversation, tokens-NAME.svg and
// cost-NAME.svg. It returns the paths written.
func (rep *Report) Write(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	put := func(name string, data []byte) error {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
		written = append(written, p)
		return nil
	}
	js, err := json.MarshalIndent(rep, "", " ")
	if err != nil {
		return nil, fmt.Errorf("encoding report: %w", err)
	}
	if err := put("report.json", append(js, '\n')); err != nil {
		return written, err
	}
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	if err := put("summary.md", md.Bytes()); err != nil {
		return written, err
	}
	for i := range rep.Files {
		f := &rep.Files[i]
		if f.Conversations == 0 {
			continue // nothing to draw
		}
		base := ChartName(f.File)
		if err := put("tokens-"+base+".svg", TokensChart(f)); err != nil {
			return written, err
		}
		if err := put("cost-"+base+".svg", CostChart(f, rep.CostModels)); err != nil {
			return written, err
		}
	}
	return written, nil
}

// ChartName turns a data file's name into a file-name stem:
// "tau_bench.jsonl" → "tau_bench".
func ChartName(file string) string {
	base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, base)
}
