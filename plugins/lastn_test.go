// These tests run the C policy plugins/lastn (lastn.c, built to Wasm by the
// test with the toolchain `make deps` installs) through the host: its
// window, the task it keeps, and its config errors.
package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/compactd/compactd/policyconfig"
)

func loadLastn(t *testing.T) *host.Plugin {
	t.Helper()
	e, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	wasm, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/lastn/lastn.c"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Load(context.Background(), wasm, host.LoadOptions{Source: "lastn.wasm"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// buildChat makes a conversation from a spec: s system, u user, a assistant,
// c assistant with a call, t its result.
func buildChat(t *testing.T, spec string) *chat.Conversation {
	t.Helper()
	var parts []string
	call := 0
	for i, r := range spec {
		switch r {
		case 's':
			parts = append(parts, `{"role":"system","content":"s"}`)
		case 'u':
			parts = append(parts, fmt.Sprintf(`{"role":"user","content":"u%d"}`, i))
		case 'a':
			parts = append(parts, fmt.Sprintf(`{"role":"assistant","content":"a%d"}`, i))
		case 'c':
			call++
			parts = append(parts, fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":"c%d","type":"function","function":{"name":"f","arguments":"{}"}}]}`, call))
		case 't':
			parts = append(parts, fmt.Sprintf(`{"role":"tool","tool_call_id":"c%d","content":"r%d"}`, call, i))
		}
	}
	c, err := chat.Parse([]byte("[" + strings.Join(parts, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// shapeOf lists the output as input indices.
func shapeOf(in, out *chat.Conversation) string {
	var s []string
	for _, raw := range out.Raw {
		for i, r := range in.Raw {
			if string(r) == string(raw) {
				s = append(s, fmt.Sprint(i))
				break
			}
		}
	}
	return strings.Join(s, " ")
}

func TestLastnWindowAndTask(t *testing.T) {
	p := loadLastn(t)
	tests := []struct {
		name string
		spec string
		cfg  map[string]any
		want string
	}{
		{"the task stays", "su" + "auauaua", map[string]any{"n": 3}, "0 1 6 7 8"},
		{"keep_task false: the seed's window", "su" + "auauaua", map[string]any{"n": 3, "keep_task": false}, "0 6 7 8"},
		{"no system message", "uauaua", map[string]any{"n": 2}, "0 4 5"},
		{"the window widens over a tool unit, not past the task", "su" + "ctctct", map[string]any{"n": 3}, "0 1 4 5 6 7"},
		{"nothing to drop", "su" + "aua", map[string]any{"n": 3}, "0 1 2 3 4"},
		{"the window reaches the task: nothing dropped", "su" + "auau", map[string]any{"n": 4}, "0 1 2 3 4 5"},
		{"the task is the final message", "sa" + "au", map[string]any{"n": 1}, "0 3"},
		{"no user message", "s" + "actacta", map[string]any{"n": 2}, "0 5 6 7"},
		{"a greeting before the task is kept with it", "sau" + "auauau", map[string]any{"n": 2}, "0 1 2 7 8"},
		{"defaults: n 8", "su" + strings.Repeat("au", 6), nil, "0 1 6 7 8 9 10 11 12 13"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := buildChat(t, tt.spec)
			var layers []policyconfig.Layer
			if tt.cfg != nil {
				layers = append(layers, policyconfig.Layer{Source: "test", Values: tt.cfg})
			}
			cfg, err := p.Schema().Resolve(layers...)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := p.Compact(context.Background(), &host.Request{Conversation: in, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			if got := shapeOf(in, resp.Conversation); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if resp.Compacted != (resp.Conversation.Len() < in.Len()) {
				t.Fatalf("compacted = %v", resp.Compacted)
			}
		})
	}
}

// TestConfigErrors: keep_task must be a boolean; the host's schema says so
// first, and the plugin itself refuses a request whose config says
// otherwise (a host that skipped validation).
func TestLastnConfigErrors(t *testing.T) {
	p := loadLastn(t)
	if _, err := p.Schema().Resolve(policyconfig.Layer{Source: "test", Values: map[string]any{"keep_task": "yes"}}); err == nil {
		t.Fatal("keep_task \"yes\" passed the schema")
	}
	in := buildChat(t, "suaua")
	for _, cfg := range []string{`{"keep_task":"yes"}`, `{"keep_task":1}`, `{"keep_task":null}`, `{"n":2,"keep_task":tru}`} {
		_, err := p.Compact(context.Background(), &host.Request{Conversation: in, Config: json.RawMessage(cfg)})
		var pe *host.PluginError
		if !errors.As(err, &pe) {
			t.Fatalf("%s: err = %v, want a plugin error", cfg, err)
		}
		if !strings.Contains(err.Error(), abi.CodeInvalidConfig) && !strings.Contains(err.Error(), abi.CodeInvalidRequest) {
			t.Fatalf("%s: err = %v", cfg, err)
		}
	}
	d := p.Description()
	if !strings.Contains(string(d.Defaults), `"keep_task":true`) {
		t.Fatalf("defaults %s", d.Defaults)
	}
}
