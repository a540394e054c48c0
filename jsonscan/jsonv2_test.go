//go:build goexperiment.jsonv2

package jsonscan

import (
	"bytes"
	"encoding/json/jsontext"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkJSONv2 is the same structural pass as BenchmarkData with
// encoding/json/jsontext (Go's experimental json v2), for RATIONALE.md's
// comparison:
//
//	GOEXPERIMENT=jsonv2 go test -run '^$' -bench 'Data|JSONv2' ./jsonscan/
func BenchmarkJSONv2(b *testing.B) {
	for _, name := range []string{"mini_swe_agent_deepseek_swebench.jsonl", "tau_bench_gpt4o_airline.jsonl"} {
		data, err := os.ReadFile(filepath.Join("..", "testdata", "conversations", name))
		if err != nil {
			b.Fatal(err)
		}
		lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
		b.Run(name+"/tokens", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				for _, l := range lines {
					dec := jsontext.NewDecoder(bytes.NewReader(l))
					for {
						if _, err := dec.ReadToken(); err == io.EOF {
							break
						} else if err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
		b.Run(name+"/skip-values", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				for _, l := range lines {
					dec := jsontext.NewDecoder(bytes.NewReader(l))
					if _, err := dec.ReadValue(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
