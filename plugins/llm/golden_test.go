package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/pdk"
)

// TestGolden runs the policy through its JSON encoding (pdk.Call, exactly
// what the Wasm export does) on testdata/*.input.json with the fixed-ratio
// fake summarizer (no LLM at all for inputs named *-no-llm-*), and
// compares the output with testdata/*.golden.json. The fast-path encoding
// must give the same bytes. Run with -update to rewrite the golden files.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.input.json")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	p := policy()
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.json")
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			host := func() pdk.Host {
				if strings.Contains(name, "-no-llm-") {
					return &pdk.TestHost{}
				}
				return (&fakeLLM{}).host()
			}
			out, err := pdk.Call(&p, host(), abi.ExportCompact, input)
			if err != nil {
				t.Fatal(err)
			}
			var req abi.CompactRequest
			if err := json.Unmarshal(input, &req); err != nil {
				t.Fatal(err)
			}
			fast, err := pdk.CallFast(&p, host(), abi.ExportCompact, abi.AppendFastRequest(nil, req.Config, &req.Context, req.Messages))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, fast) {
				t.Fatalf("the fast path gives another result:\n%s\n%s", out, fast)
			}
			var res abi.CompactResult
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatal(err)
			}
			if err := convo.CheckResult(req.Messages, res.Messages); err != nil {
				t.Fatalf("invalid result: %v", err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "  "); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			golden := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(pretty.Bytes(), want) {
				t.Fatalf("output differs from %s:\n%s", golden, pretty.Bytes())
			}
		})
	}
}
