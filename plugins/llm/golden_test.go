package main

import (
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/plugtest"
	"github.com/compactd/compactd/pdk"
)

// TestGolden runs the policy through its JSON encoding (pdk.Call, exactly
// what the Wasm export does) on testdata/*.input.json with the fixed-ratio
// fake summarizer (no LLM at all for inputs named *-no-llm-*), and
// compares the output with testdata/*.golden.json. The fast-path encoding
// must give the same bytes. Run with -update to rewrite the golden files.
func TestGolden(t *testing.T) {
	p := policy()
	plugtest.GoldenWith(t, &p, *update, func(name string) pdk.Host {
		if strings.Contains(name, "-no-llm-") {
			return &pdk.TestHost{}
		}
		return (&fakeLLM{}).host()
	})
}
