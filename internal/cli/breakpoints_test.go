package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCompactCacheBreakpoints: `compactd compact --cache-breakpoints`
// writes the policy's breakpoints as Anthropic cache_control markers;
// without the flag the output has none.
func TestCompactCacheBreakpoints(t *testing.T) {
	compactdBinary(t) // a unit run skips here, before building the plugin
	plugins := pluginsDir(t, "plugins/ledger")
	file, _ := realConversation(t)
	args := []string{"compact", "--plugins", plugins, "--policy", "ledger", "--set", "min_turns=0", "--set", "min_tokens=0", "--set", "fold_tokens=200", file}
	plain := run(t, "", args...)
	if plain.code != 0 || strings.Contains(plain.stdout, "cache_control") {
		t.Fatalf("exit %d; stderr %q", plain.code, plain.stderr)
	}
	marked := run(t, "", append([]string{"compact", "--cache-breakpoints"}, args[1:]...)...)
	var out []json.RawMessage
	if marked.code != 0 || json.Unmarshal([]byte(marked.stdout), &out) != nil {
		t.Fatalf("exit %d; stderr %q", marked.code, marked.stderr)
	}
	n := 0
	for _, m := range out {
		n += strings.Count(string(m), `"cache_control":{"type":"ephemeral"}`)
	}
	if n != 3 {
		t.Fatalf("%d breakpoints, want 3 (the task, the end of the ledger's stable messages and its newest)", n)
	}
}
