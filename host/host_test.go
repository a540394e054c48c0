package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// paths are the two ways the host runs a plugin built with the Go PDK.
var paths = []struct {
	name    string
	disable bool
}{{"fast", false}, {"extism", true}}

func newTestEngine(t testing.TB, disableFast bool, limits Limits) *Engine {
	t.Helper()
	e, err := NewEngine(Config{DisableFastPath: disableFast, Limits: limits, CacheDir: wasmbuild.TestCacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func loadTestPlugin(t testing.TB, e *Engine, rel string, limits Limits) *Plugin {
	t.Helper()
	path := wasmbuild.ForTest(t, rel)
	wasm, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Load(context.Background(), wasm, LoadOptions{Source: path, Limits: limits})
	if err != nil {
		t.Fatalf("load %s: %v", rel, err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// testConversation is a small valid conversation with a tool call, a
// parallel tool call and a field the ABI does not know.
const testConversationJSON = `[
 {"role":"system","content":"You are terse."},
 {"role":"user","content":"Find the bug in parse.go","cache_control":{"type":"ephemeral"}},
 {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"path\":\"parse.go\"}"}}]},
 {"role":"tool","tool_call_id":"c1","content":"package parse\n// <html> & friends"},
 {"role":"assistant","content":"Two more files.","tool_calls":[
   {"id":"c2","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.go\"}"}},
   {"id":"c3","type":"function","function":{"name":"read","arguments":"{\"path\":\"b.go\"}"}}]},
 {"role":"tool","tool_call_id":"c3","content":"package b"},
 {"role":"tool","tool_call_id":"c2","content":"package a"},
 {"role":"assistant","content":"The bug is on line 3."},
 {"role":"user","content":[{"type":"text","text":"Fix it."}]}
]`

func testConversation(t testing.TB) *chat.Conversation {
	t.Helper()
	c, err := chat.Parse([]byte(testConversationJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for i := range c.Messages {
		c.Messages[i].Tokens = len(c.Raw[i]) / 4
	}
	return c
}

func modeRequest(c *chat.Conversation, mode string) *Request {
	return &Request{Conversation: c, Config: json.RawMessage(`{"mode":"` + mode + `","n":0}`)}
}

func snapshot(c *chat.Conversation) []byte { return c.Encode() }

func TestLoadDescribes(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			p := sharedPlugin(t, path.disable, "plugins/sliding")
			if p.Path() != path.name {
				t.Errorf("path = %s, want %s", p.Path(), path.name)
			}
			d := p.Description()
			if d.Name != "sliding" || d.Version == "" || d.ABI != abi.Version || len(d.ConfigSchema) == 0 {
				t.Errorf("description = %+v", d)
			}
			if p.SHA256() == "" || len(p.Schema().Keys()) == 0 {
				t.Errorf("sha=%q keys=%v", p.SHA256(), p.Schema().Keys())
			}
		})
	}
}

func TestRefsAreByteIdentical(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			p := sharedPlugin(t, path.disable, "plugins/sliding")
			c := testConversation(t)
			before := snapshot(c)
			cfg, err := p.Schema().Resolve(policyLayer(map[string]any{"window_size": 3, "step": 1}))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := p.Compact(context.Background(), &Request{Conversation: c, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, snapshot(c)) {
				t.Fatal("input conversation changed")
			}
			out := resp.Conversation
			// system, task, marker, then the last 3 entries widened to the
			// start of the parallel tool-call unit.
			if out.Len() != 1+1+1+5 || !resp.Compacted {
				t.Fatalf("got %d messages: %s", out.Len(), out.Encode())
			}
			for i, raw := range out.Raw {
				if i == 2 {
					if want := `{"role":"assistant","content":"[2 earlier entries discarded]"}`; string(raw) != want {
						t.Errorf("marker = %s, want %s", raw, want)
					}
					continue
				}
				found := false
				for _, in := range c.Raw {
					if bytes.Equal(in, raw) {
						found = true
					}
				}
				if !found {
					t.Errorf("output message %d is not byte-identical to an input message: %s", i, raw)
				}
			}
			if !bytes.Contains(out.Encode(), []byte(`<html> & friends`)) && bytes.Contains(before, []byte(`<html> & friends`)) {
				t.Logf("(the tool result with HTML was dropped)")
			}
		})
	}
}

// TestHostileGo runs the Go misbehaving plugin on both paths. The modes
// that share limits share one plugin per path, so each mode after the
// first also shows that the host keeps serving after all the failures
// before it (and a Go plugin is loaded three times a path, not thirteen).
//
// The memory and output limits are small so that what the guest must
// allocate to break them is small too: under -race every byte the host
// copies of a growing linear memory or of a large output is tracked, and
// breaking 64 MiB and 8 MiB limits with a 48 MiB output took minutes on
// a busy machine. The checks are the same at any size: the guest's
// allocation past the memory limit fails as ErrMemoryLimit naming it,
// and an output past the output limit as ErrOutputTooLarge naming it.
func TestHostileGo(t *testing.T) {
	t.Parallel()
	testenv.Long(t, "a Go plugin run out of memory, time and output, on both paths")
	// A Go guest takes a few seconds to die of memory exhaustion (its
	// runtime collects and retries before it gives up), hence the limit;
	// under -race on a loaded 2-core machine (load average 17 seen) the
	// Extism path took up to two minutes, where 30s failed. 16 MiB is
	// room for the Go runtime (45 pages initially) and every mode but
	// the two that break it.
	limits := Limits{CallTimeout: 4 * time.Minute, MaxMemoryPages: MinMemoryPages, MaxOutputBytes: 1 << 20, MaxInstances: 2}
	tests := []struct {
		mode   string
		n      int // the mode's size in MiB (huge: its summary; 0: the mode's default)
		limits Limits
		kind   error
		code   string
		want   string
	}{
		{mode: "loop", limits: Limits{CallTimeout: time.Second}, kind: ErrTimeout, want: "time limit of 1s"},
		{mode: "alloc", kind: ErrMemoryLimit, want: "16 MiB"},
		// A summary of 48 MiB does not fit in 16 MiB of memory; one of
		// 2 MiB does, and is over the output limit of 1 MiB.
		{mode: "huge", kind: ErrMemoryLimit, want: "16 MiB"},
		{mode: "huge", n: 2, kind: ErrOutputTooLarge, want: "limit 1048576"},
		{mode: "badref", kind: ErrInvalidResult, want: "out of range"},
		{mode: "reorder", kind: ErrInvalidResult, want: "strictly increasing"},
		{mode: "split", kind: ErrInvalidResult, want: "tool"},
		{mode: "dropsystem", kind: ErrInvalidResult, want: "leading system message"},
		{mode: "changelast", kind: ErrInvalidResult, want: "final message"},
		{mode: "panic", kind: ErrReported, code: abi.CodeInternal, want: "panicked"},
		{mode: "exit", kind: ErrTrap, want: "exit"},
		{mode: "error", kind: ErrReported, code: abi.CodeInvalidConfig, want: "refusing"},
		{mode: "nosuchmode", kind: ErrReported, code: abi.CodeInvalidConfig},
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, path.disable, limits)
			plugins := map[Limits]*Plugin{}
			for _, tt := range tests {
				if plugins[tt.limits] == nil {
					plugins[tt.limits] = loadTestPlugin(t, e, "host/testdata/gohostile", tt.limits)
				}
			}
			for _, tt := range tests {
				t.Run(tt.mode, func(t *testing.T) {
					p := plugins[tt.limits]
					if p.Path() != path.name {
						t.Fatalf("path = %s", p.Path())
					}
					c := testConversation(t)
					before := snapshot(c)
					req := &Request{Conversation: c, Config: json.RawMessage(fmt.Sprintf(`{"mode":%q,"n":%d}`, tt.mode, tt.n))}
					_, err := p.Compact(context.Background(), req)
					checkPluginError(t, err, "gohostile", tt.kind, tt.code, tt.want)
					if !bytes.Equal(before, snapshot(c)) {
						t.Fatal("the caller's conversation changed")
					}
					// The host keeps serving.
					if _, err := p.Compact(context.Background(), modeRequest(c, "ok")); err != nil {
						t.Fatalf("next call after %s: %v", tt.mode, err)
					}
				})
			}
		})
	}
}

func checkPluginError(t *testing.T, err error, plugin string, kind error, code, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", kind)
	}
	pe, ok := IsPluginError(err)
	if !ok || !errors.Is(err, kind) {
		t.Fatalf("err = %v, want kind %v", err, kind)
	}
	if pe.Plugin != plugin || !strings.Contains(err.Error(), "plugin "+plugin) {
		t.Errorf("error does not name the plugin: %v", err)
	}
	if code != "" && pe.Code != code {
		t.Errorf("code = %q, want %q", pe.Code, code)
	}
	if want != "" && !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
}

type fakeLLM struct{ text string }

func (f fakeLLM) Complete(_ context.Context, req abi.LLMRequest) (abi.LLMResponse, error) {
	return abi.LLMResponse{Text: f.text + req.Messages[0].Content, Usage: abi.LLMUsage{InputTokens: 1, OutputTokens: 2}}, nil
}

func TestHostFunctions(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			p := sharedPlugin(t, path.disable, "host/testdata/gohostile")
			c := testConversation(t)
			req := modeRequest(c, "count")
			req.Env.CountTokens = func(s string) int { return len(s) }
			resp, err := p.Compact(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			wantTokens := 0
			for _, m := range c.Messages {
				wantTokens += len(m.Text())
			}
			w := resp.Result.Warnings
			if len(w) != 2 || w[0] != "tokens="+itoa(wantTokens) || !strings.Contains(w[1], abi.CodeNoProvider) {
				t.Fatalf("warnings = %q (want tokens=%d and a no_provider error)", w, wantTokens)
			}
			req.Env.LLM = fakeLLM{text: "echo:"}
			resp, err = p.Compact(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Result.Warnings) != 1 {
				t.Fatalf("with an LLM, warnings = %q", resp.Result.Warnings)
			}
		})
	}
}

// TestHostFunctionExtractIdentifiers: extract_identifiers answers on
// both paths what idents.Extract finds, and a request block over the limit
// or out of format traps the call, named, without harm to the next one.
func TestHostFunctionExtractIdentifiers(t *testing.T) {
	t.Parallel()
	c, err := chat.Parse([]byte(`[
 {"role":"user","content":"Fix parse_args in src/app/main.py for ticket ZFA04Y"},
 {"role":"assistant","content":"I will run it.","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"python src/app/main.py\"}"}}]},
 {"role":"tool","tool_call_id":"c1","content":"Traceback:\n  File \"src/app/main.py\"\nValueError: bad 4,500\n    10\tdef fold():\n    11\t    pass\n"},
 {"role":"user","content":"and getUser too"}
]`))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range c.Messages {
		var b strings.Builder
		for _, it := range idents.Extract(nil, m.Text(), m.Role == abi.RoleTool || m.Role == abi.RoleUser) {
			b.WriteString(itoa(int(it.Kind)) + ":" + it.Text + "\t")
		}
		want = append(want, b.String())
	}
	if !strings.Contains(strings.Join(want, ""), "10-11") || !strings.Contains(strings.Join(want, ""), "src/app/main.py") {
		t.Fatalf("the conversation does not exercise spans and literals: %q", want)
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			p := sharedPlugin(t, path.disable, "host/testdata/gohostile")
			resp, err := p.Compact(context.Background(), modeRequest(c, "idents"))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Result.Warnings; !slices.Equal(got, want) {
				t.Fatalf("items\n got %q\nwant %q", got, want)
			}
			for mode, msg := range map[string]string{
				"identsbig": fmt.Sprintf("extract_identifiers: the request is %d bytes; the limit is %d", abi.MaxHostInputBytes+1, abi.MaxHostInputBytes),
				"identsbad": "extract_identifiers: malformed block: the request does not start with version byte 1",
			} {
				_, err := p.Compact(context.Background(), modeRequest(c, mode))
				checkPluginError(t, err, "gohostile", ErrTrap, "", msg)
				if _, err := p.Compact(context.Background(), modeRequest(c, "ok")); err != nil {
					t.Fatalf("next call after %s: %v", mode, err)
				}
			}
		})
	}
}

// TestHostFunctionExtractIdentifiersFrom: on the fast path,
// extract_identifiers_from (the PDK's way there: the idents mode of
// TestHostFunctionExtractIdentifiers checks its answers) traps, named, on
// a request over the limit or outside the plugin's memory, without harm
// to the next call; through Extism it answers abi.ExtractUnsupported.
func TestHostFunctionExtractIdentifiersFrom(t *testing.T) {
	t.Parallel()
	c, err := chat.Parse([]byte(`[{"role":"user","content":"Fix parse_args in src/app/main.py"}]`))
	if err != nil {
		t.Fatal(err)
	}
	traps := map[string]string{
		"identsfrombig": fmt.Sprintf("extract_identifiers_from: the request is %d bytes; the limit is %d", abi.MaxHostInputBytes+1, abi.MaxHostInputBytes),
		"identsfromout": "extract_identifiers_from: the request of 1024 bytes at 4294967040 is outside the plugin's memory",
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			p := sharedPlugin(t, path.disable, "host/testdata/gohostile")
			checkFastPathTraps(t, p, c, path.disable, traps)
		})
	}
}

// TestHostFunctionMessageFacts: extract_message_facts_into answers, on
// the fast path, what facts.Collect finds in the messages, through the
// PDK and straight after a call with a buffer too small; through Extism
// the PDK finds the same facts in the plugin, and the function answers
// abi.FactsUnsupported. A range the request does not hold, or a buffer
// outside the plugin's memory, traps the call, named, without harm to
// the next one.
func TestHostFunctionMessageFacts(t *testing.T) {
	t.Parallel()
	c, err := chat.Parse([]byte(`[
 {"role":"system","content":"You are a coding agent."},
 {"role":"user","content":"Fix parse_args in src/app/main.py for ticket ZFA04Y"},
 {"role":"assistant","content":"I will run it.\n` + "```" + `\npython src/app/main.py && grep -n x a.py\n` + "```" + `","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"cd /srv && pytest -q tests/test_main.py | tail -5\"}"}}]},
 {"role":"tool","tool_call_id":"c1","content":"Traceback:\n  File \"src/app/main.py\"\nValueError: bad 4,500\n    10\tdef fold():\n    11\t    pass\n"},
 {"role":"user","content":"Please do not touch getUser in src/app/main.py. It must stay."}
]`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := facts.Collect(c.Messages, facts.Options{UserChars: 200}, facts.ExtractHere)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	kinds := map[idents.Kind]bool{}
	for i, it := range set.Items {
		used := "0"
		if set.Used[i] {
			used = "1"
		}
		want = append(want, itoa(int(it.Kind))+":"+it.Text+":"+used)
		kinds[it.Kind] = true
	}
	if len(kinds) < 6 || !slices.Contains(want, "0:pytest:1") || !slices.Contains(want, "1:src/app/main.py:1") {
		t.Fatalf("the conversation does not exercise commands, kinds and used facts: %q", want)
	}
	traps := map[string]string{
		"factsrange": "extract_message_facts_into: malformed block: messages 5 to 6 of a request of 5",
		"factsout":   "extract_message_facts_into: the buffer of 1048576 bytes at 4294967040 is outside the plugin's memory",
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			p := sharedPlugin(t, path.disable, "host/testdata/gohostile")
			for _, mode := range []string{"facts", "factsretry"} {
				resp, err := p.Compact(context.Background(), modeRequest(c, mode))
				if err != nil {
					t.Fatal(err)
				}
				got := resp.Result.Warnings
				if mode == "factsretry" && path.disable {
					if !slices.Equal(got, []string{"unsupported"}) {
						t.Fatalf("%s through Extism: %q", mode, got)
					}
					continue
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: facts\n got %q\nwant %q", mode, got, want)
				}
			}
			checkFastPathTraps(t, p, c, path.disable, traps)
		})
	}
}

// checkFastPathTraps runs gohostile in each of traps' modes, which call a
// fast-path-only host function badly: on the fast path the call traps
// with the mode's message, without harm to the next call; through Extism
// (disable) the function answers that it is not served there.
func checkFastPathTraps(t *testing.T, p *Plugin, c *chat.Conversation, disable bool, traps map[string]string) {
	t.Helper()
	for mode, msg := range traps {
		resp, err := p.Compact(context.Background(), modeRequest(c, mode))
		if disable {
			if err != nil || !slices.Equal(resp.Result.Warnings, []string{"unsupported"}) {
				t.Fatalf("%s through Extism: %v, %+v", mode, err, resp)
			}
			continue
		}
		checkPluginError(t, err, "gohostile", ErrTrap, "", msg)
		if _, err := p.Compact(context.Background(), modeRequest(c, "ok")); err != nil {
			t.Fatalf("next call after %s: %v", mode, err)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestPoolServesConcurrentCallers(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			e := newTestEngine(t, path.disable, Limits{MaxInstances: 2})
			p := loadTestPlugin(t, e, "plugins/sliding", Limits{})
			cfg, _ := p.Schema().Resolve(policyLayer(map[string]any{"window_size": 2, "step": 1}))
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 8; i++ {
						resp, err := p.Compact(context.Background(), &Request{Conversation: testConversation(t), Config: cfg})
						if err == nil && !resp.Compacted {
							err = errors.New("not compacted")
						}
						if err != nil {
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if s := p.Stats(); s.Calls != 64+1 || s.Failures != 0 || s.Idle > 2 {
				t.Errorf("stats = %+v", s)
			}
		})
	}
}

// blockingLLM blocks llm_complete until released.
type blockingLLM struct {
	entered chan struct{}
	release chan struct{}
}

func (b blockingLLM) Complete(ctx context.Context, _ abi.LLMRequest) (abi.LLMResponse, error) {
	close(b.entered)
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return abi.LLMResponse{Text: "late"}, nil
}

func TestCloseWaitsForCallsInFlight(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			e := newTestEngine(t, path.disable, Limits{})
			p := loadTestPlugin(t, e, "host/testdata/gohostile", Limits{})
			llm := blockingLLM{entered: make(chan struct{}), release: make(chan struct{})}
			req := modeRequest(testConversation(t), "count")
			req.Env.LLM = llm
			done := make(chan error, 1)
			go func() {
				_, err := p.Compact(context.Background(), req)
				done <- err
			}()
			select {
			case <-llm.entered:
			case err := <-done:
				t.Fatalf("call ended before reaching llm_complete: %v", err)
			}
			p.Close(context.Background())
			select {
			case <-p.Done():
				t.Fatal("module released while a call was in flight")
			default:
			}
			if _, err := p.Compact(context.Background(), modeRequest(testConversation(t), "ok")); !errors.Is(err, ErrClosed) {
				t.Fatalf("call after Close: %v, want ErrClosed", err)
			}
			close(llm.release)
			if err := <-done; err != nil {
				t.Fatalf("call in flight failed: %v", err)
			}
			select {
			case <-p.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("module not released after the last call")
			}
			p.Close(context.Background()) // a second Close is harmless
		})
	}
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	// The context's deadline comes long before the shared plugin's call
	// timeout (DefaultCallTimeout).
	p := sharedPlugin(t, false, "host/testdata/gohostile")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := p.Compact(ctx, modeRequest(testConversation(t), "loop"))
	if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrCanceled) {
		t.Fatalf("err = %v", err)
	}
	if _, err := p.Compact(context.Background(), modeRequest(testConversation(t), "ok")); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRejects(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, false, Limits{})
	good, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/sliding"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		wasm []byte
		kind error
		want string
	}{
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), ErrInvalidModule, ""},
		{"empty", nil, ErrInvalidModule, ""},
		{"truncated", good[:len(good)/2], ErrInvalidModule, ""},
		{"no exports", emptyModule, ErrInvalidModule, `missing required export "describe"`},
		{"foreign import", foreignImportModule, ErrInvalidModule, "imports env.foo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Load(context.Background(), tt.wasm, LoadOptions{Source: "/plugins/bad.wasm"})
			if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), "bad.wasm") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.kind, tt.want)
			}
		})
	}
}

// emptyModule is "\0asm" version 1 with no sections.
var emptyModule = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}

// foreignImportModule imports env.foo: () -> ().
var foreignImportModule = []byte{
	0, 'a', 's', 'm', 1, 0, 0, 0,
	1, 4, 1, 0x60, 0, 0, // type section: one func type () -> ()
	2, 11, 1, 3, 'e', 'n', 'v', 3, 'f', 'o', 'o', 0, 0, // import section: env.foo func type 0
}

// TestHostileC runs the C misbehaving plugins (testdata/hostile), which
// take the Extism path like any plugin not built with our PDK.
func TestHostileC(t *testing.T) {
	t.Parallel()
	testenv.Long(t, "C plugins run to their limits")
	tests := []struct {
		mode   string
		limits Limits
		kind   error
		code   string
		want   string
	}{
		{mode: "LOOP", limits: Limits{CallTimeout: 500 * time.Millisecond}, kind: ErrTimeout, want: "time limit of 500ms"},
		// 16 MiB, not 64: the same limit to break, with a quarter of
		// the linear memory for the host to grow (and -race to track).
		{mode: "ALLOC", limits: Limits{MaxMemoryPages: MinMemoryPages}, kind: ErrMemoryLimit, want: "16 MiB"},
		// HUGE writes its output through Extism's kernel eight bytes per
		// host call: 65 MiB take seconds, and a minute under -race on a
		// busy machine, so the output limit is tried on a 2 MiB one
		// against a 1 MiB limit (the same check). The 65 MiB block does
		// not fit in 32 MiB of kernel memory: alloc fails at once.
		{mode: "HUGE#HUGE_MIB=2", limits: Limits{MaxOutputBytes: 1 << 20, CallTimeout: 10 * time.Minute}, kind: ErrOutputTooLarge},
		{mode: "HUGE", limits: Limits{MaxMemoryPages: 512, CallTimeout: 10 * time.Minute}, kind: ErrMemoryLimit},
		{mode: "BADJSON", kind: ErrInvalidOutput, want: "not a JSON CompactResult"},
		{mode: "BADREF", kind: ErrInvalidResult, want: "out of range"},
		{mode: "SPLIT", kind: ErrInvalidResult, want: "tool"},
		{mode: "TRAP", kind: ErrTrap, want: "unreachable"},
		{mode: "ERRSET", kind: ErrReported, code: abi.CodeInvalidConfig, want: "hostile: refusing"},
		{mode: "NOERR", kind: ErrReported, want: "returned status 7 without an error"},
	}
	e := newTestEngine(t, false, Limits{})
	for _, tt := range tests {
		// Only LOOP is about the wall clock: the others get a generous
		// one, so that a busy machine cannot turn their failure into a
		// timeout (ALLOC under -race at a load average of 20 ran past the
		// default 10s before it reached 64 MiB).
		if tt.limits.CallTimeout == 0 {
			tt.limits.CallTimeout = 10 * time.Minute
		}
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			p := loadTestPlugin(t, e, "host/testdata/hostile/hostile.c#HOSTILE_"+tt.mode, tt.limits)
			if p.Path() != "extism" {
				t.Fatalf("path = %s", p.Path())
			}
			name := "hostile-" + strings.ToLower(strings.Split(tt.mode, "#")[0])
			c := testConversation(t)
			before := snapshot(c)
			_, err := p.Compact(context.Background(), &Request{Conversation: c})
			checkPluginError(t, err, name, tt.kind, tt.code, tt.want)
			if !bytes.Equal(before, snapshot(c)) {
				t.Fatal("the caller's conversation changed")
			}
			// The host keeps serving: the next call fails the same way
			// on a fresh or healthy instance, without crashing.
			_, err = p.Compact(context.Background(), &Request{Conversation: c})
			checkPluginError(t, err, name, tt.kind, tt.code, "")
			if poisons(tt.kind) && p.Stats().Discarded < 2 {
				t.Errorf("poisoned instances were not discarded: %+v", p.Stats())
			}
		})
	}
}

// TestCPluginLastn runs the C policy through the same path as Go ones.
func TestCPluginLastn(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, false, Limits{})
	p := loadTestPlugin(t, e, "plugins/lastn/lastn.c", Limits{})
	// step 1: a plain last-n window (lastn's default moves the cut in steps).
	cfg, err := p.Schema().Resolve(policyLayer(map[string]any{"n": 2, "step": 1}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Compact(context.Background(), &Request{Conversation: testConversation(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	// system + the task + the last two messages.
	if got := resp.Conversation.Len(); got != 4 || !resp.Compacted {
		t.Fatalf("got %d messages: %s", got, resp.Conversation.Encode())
	}
	if _, err := p.Schema().Resolve(policyLayer(map[string]any{"n": 0})); err == nil {
		t.Fatal("n=0 passed the plugin's schema")
	}
}

// TestGuestMemoryStaysFlat: a Go guest that allocates and drops a MiB per
// call keeps its memory bounded, because the PDK lets the guest's GC run
// before each export returns. Linear memory never shrinks, and the Go heap
// takes a few hundred calls to settle (4.5 MiB after the first call, 6 MiB
// after 100, 8.5 MiB from about 1,000 on), so the test does not compare
// two points on the way there: it bounds the growth over all the calls.
// Without the PDK's yield, 2,000 calls grew memory to 125 MiB; a guest
// that also kept 8 KiB a call grew it by 28 MiB. Both fail the bound of
// 16 MiB (a leak of 16 KiB a call in short mode).
func TestGuestMemoryStaysFlat(t *testing.T) {
	t.Parallel()
	calls := 2_000
	if testing.Short() {
		calls = 1_000
	}
	const bound = 16 << 20
	e := newTestEngine(t, false, Limits{MaxInstances: 1})
	p := loadTestPlugin(t, e, "host/testdata/gohostile", Limits{})
	c := testConversation(t)
	req := &Request{Conversation: c, Config: json.RawMessage(`{"mode":"garbage","n":1}`)}
	ctx := context.Background()
	if _, err := p.Compact(ctx, req); err != nil {
		t.Fatal(err)
	}
	first := p.Stats().IdleMemoryBytes
	for i := 1; i < calls; i++ {
		if _, err := p.Compact(ctx, req); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	last := p.Stats().IdleMemoryBytes
	t.Logf("guest memory: %d KiB after the first call, %d KiB after %d calls", first>>10, last>>10, calls)
	if first == 0 || last > first+bound {
		t.Fatalf("guest memory grew from %d to %d bytes over %d calls of 1 MiB of garbage each; want at most %d more", first, last, calls, bound)
	}
}

// TestHeaderView: a plugin that declares the header view gets no content,
// and reads each one it asks for through the host, on both paths (the
// fast path writes into the plugin's memory; the Extism path falls back
// to a kernel block).
func TestHeaderView(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			e := newTestEngine(t, path.disable, Limits{})
			p := loadTestPlugin(t, e, "host/testdata/goheaders", Limits{})
			if p.View() != abi.ViewHeaders || p.Description().View != abi.ViewHeaders {
				t.Fatalf("view %q", p.View())
			}
			c := testConversation(t)
			long := strings.Repeat("é long text ", 20000) // larger than any buffer the guest starts with
			c, err := chat.FromRaw(append(append([]json.RawMessage(nil), c.Raw[:len(c.Raw)-1]...),
				json.RawMessage(`{"role":"user","content":`+mustMarshal(t, long)+`}`)))
			if err != nil {
				t.Fatal(err)
			}
			var read []int
			var want []string
			for i, m := range c.Messages {
				kind := ""
				switch {
				case m.Content.IsNull():
				case m.Content.IsString():
					kind = abi.OmittedText
				default:
					kind = abi.OmittedParts
				}
				size := len(m.Content.Text())
				if kind == abi.OmittedParts {
					size = len(m.Content.Raw())
				}
				read = append(read, i)
				want = append(want, fmt.Sprintf("%d:%s:%d:%s", i, kind, size, m.Content.Text()))
			}
			cfg, _ := json.Marshal(map[string]any{"read": read})
			resp, err := p.Compact(context.Background(), &Request{Conversation: c, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Result.Summary; got != strings.Join(want, "|") {
				t.Errorf("read %.300q…, want %.300q…", got, strings.Join(want, "|"))
			}
			// Reading a message that is not there is the plugin's error.
			bad, _ := json.Marshal(map[string]any{"read": []int{c.Len()}})
			if _, err := p.Compact(context.Background(), &Request{Conversation: c, Config: bad}); !errors.Is(err, ErrReported) {
				t.Errorf("reading past the end: %v", err)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestQuickLoad: a quick load serves at once with the interpreter, then
// the compiled module takes over, with calls running across the swap.
func TestQuickLoad(t *testing.T) {
	wasm, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/sliding"))
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, false, Limits{})
	ctx := context.Background()
	heapBefore := heapInUse()
	p, err := e.Load(ctx, wasm, LoadOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if p.Tier() != TierInterpreted {
		t.Fatalf("tier %q right after a quick load", p.Tier())
	}
	c := testConversation(t)
	cfg, _ := p.Schema().Resolve(policyLayer(map[string]any{"window_size": 3, "step": 1}))
	first, err := p.Compact(ctx, &Request{Conversation: c, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 3; g++ {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := p.Compact(ctx, &Request{Conversation: c, Config: cfg})
				if err != nil || !bytes.Equal(resp.Conversation.Encode(), first.Conversation.Encode()) {
					t.Errorf("a call across the swap: %v", err)
					return
				}
			}
		})
	}
	// A hang guard, not a bound: compiling a Go plugin under -race beside
	// 2×nproc busy loops took more than a minute.
	waitTier(t, p, TierCompiled, 10*time.Minute)
	close(stop)
	wg.Wait()
	// The interpreted module (several times the compiled one's memory)
	// is gone once its instances are. The background compile that
	// swapped it out may still be returning (its goroutine's frames,
	// the engine's bookkeeping): wait for it, then for the heap to settle
	// (the deadline is a hang guard; a module kept alive fails it). A
	// clean-clone CI run once measured 101 MiB here, where the usual
	// figure is 21 MiB.
	e.background.Wait()
	grown := int64(heapInUse()) - int64(heapBefore)
	for deadline := time.Now().Add(30 * time.Second); grown > 48<<20 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		grown = int64(heapInUse()) - int64(heapBefore)
	}
	if grown > 48<<20 {
		t.Errorf("%d MiB more in use after the swap: the interpreted module is kept alive", grown>>20)
	}
	resp, err := p.Compact(ctx, &Request{Conversation: c, Config: cfg})
	if err != nil || !bytes.Equal(resp.Conversation.Encode(), first.Conversation.Encode()) {
		t.Fatalf("compiled: %v", err)
	}
}

// TestDescribedLoad: a plugin loaded from its description compiles on
// its first call.
func TestDescribedLoad(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			e := newTestEngine(t, path.disable, Limits{})
			full := sharedPlugin(t, path.disable, "plugins/sliding")
			wasm, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/sliding"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			desc := full.Description()
			p, err := e.Load(ctx, wasm, LoadOptions{Described: &desc})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(ctx)
			if p.Tier() != TierLazy || p.Path() != path.name || p.Name() != "sliding" || p.View() != abi.ViewHeaders || p.SHA256() != full.SHA256() {
				t.Fatalf("lazy plugin: tier %s, path %s, name %s", p.Tier(), p.Path(), p.Name())
			}
			c := testConversation(t)
			cfg, _ := p.Schema().Resolve()
			want, err := full.Compact(ctx, &Request{Conversation: c, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Compact(ctx, &Request{Conversation: c, Config: cfg})
			if err != nil || !bytes.Equal(got.Conversation.Encode(), want.Conversation.Encode()) {
				t.Fatalf("lazy compact: %v", err)
			}
			if p.Tier() != TierCompiled || p.Path() != path.name {
				t.Errorf("after its first call: tier %s, path %s", p.Tier(), p.Path())
			}
			// Warm compiles a lazy plugin now, and says nothing when all
			// is well (nor for a plugin already compiled).
			warm, err := e.Load(ctx, wasm, LoadOptions{Described: &desc})
			if err != nil {
				t.Fatal(err)
			}
			defer warm.Close(ctx)
			for range 2 {
				if err := warm.Warm(ctx); err != nil || warm.Tier() != TierCompiled {
					t.Errorf("Warm = %v, tier %s", err, warm.Tier())
				}
			}
			// A description that does not validate is refused at once.
			bad := desc
			bad.Name = "Not A Name"
			if _, err := e.Load(ctx, wasm, LoadOptions{Described: &bad}); !errors.Is(err, ErrInvalidDescription) {
				t.Errorf("bad description: %v", err)
			}
		})
	}
}

// TestCloseDuringBackgroundCompile: closing a quickly loaded plugin and
// the engine while the compiler works leaves nothing running.
func TestCloseDuringBackgroundCompile(t *testing.T) {
	t.Parallel()
	// A module on the fast path, the cache empty: the compile takes a
	// while (lastn's, a second under -race; a Go plugin's, ten).
	wasm, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/lastn/lastn.c"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := e.Load(ctx, wasm, LoadOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	p.Close(ctx)
	<-p.Done()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Tier() == TierCompiled {
		t.Log("(the compile finished before the close)")
	}
}

func waitTier(t *testing.T, p *Plugin, tier string, limit time.Duration) {
	t.Helper()
	start := time.Now()
	for p.Tier() != tier {
		if time.Since(start) > limit {
			t.Fatalf("tier still %s after %v", p.Tier(), limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReleaseIdle: an idle plugin gives its code and instances back and
// compiles again on its next call.
func TestReleaseIdle(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, false, Limits{})
	p := loadTestPlugin(t, e, "plugins/sliding", Limits{})
	ctx := context.Background()
	c := testConversation(t)
	cfg, _ := p.Schema().Resolve()
	if _, err := p.Compact(ctx, &Request{Conversation: c, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if p.ReleaseIdle(ctx, time.Hour) {
		t.Fatal("released a plugin used a moment ago")
	}
	if !p.ReleaseIdle(ctx, 0) || p.Tier() != TierLazy || p.Stats().Idle != 0 {
		t.Fatalf("not released: tier %s, %d idle", p.Tier(), p.Stats().Idle)
	}
	if _, err := p.Compact(ctx, &Request{Conversation: c, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if p.Tier() != TierCompiled {
		t.Errorf("tier %s after a call", p.Tier())
	}
	// A plugin loaded from memory (no file to read again) keeps its code.
	wasm, _ := os.ReadFile(wasmbuild.ForTest(t, "plugins/sliding"))
	mem, err := e.Load(ctx, wasm, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close(ctx)
	if mem.ReleaseIdle(ctx, 0) {
		t.Error("released a plugin that cannot compile again")
	}
}

// TestCloseReleasesMemory: closed plugins leave nothing behind, on either
// path. A runtime closed with a compilation cache keeps its compiled
// modules in the cache's memory unless they are closed too: a daemon
// reloading a Go plugin leaked ~20 MB per version that way, nearly all of
// it machine code, which wazero maps outside the Go heap. So the test
// measures both the heap and the executable memory mapped (Linux), and
// the code measure makes a small module enough: with the fast path's
// compiled module left open, each version of the C plugin lastn left
// 288 KiB of code mapped (sliding, a Go plugin: 14 MB), while a version
// closed leaves none. A cold compile of a Go plugin takes a minute and
// more under -race on a busy machine; lastn's, a second.
func TestCloseReleasesMemory(t *testing.T) {
	testenv.Long(t, "modules compiled cold")
	for _, tt := range []struct {
		name, rel, version string
		disable            bool
		versions           int
		heapLimit          int64
		codeLimit          int64
	}{
		{"fast", "plugins/lastn/lastn.c", "0.4.0", false, 3, 2 << 20, 128 << 10},
		{"extism", "plugins/lastn/lastn.c", "0.4.0", true, 3, 2 << 20, 128 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// No file cache: every version is new to it, and would stay
			// in the shared one for good.
			e, err := NewEngine(Config{DisableFastPath: tt.disable})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			wasm, err := os.ReadFile(wasmbuild.ForTest(t, tt.rel))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Count(wasm, []byte(tt.version)) != 1 {
				t.Fatalf("want exactly one %q in %s, to make versions of it", tt.version, tt.rel)
			}
			ctx := context.Background()
			heap := func() int64 {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				return int64(ms.HeapInuse)
			}
			stamp := time.Now().UnixNano() % 10000
			load := func(i int) {
				// Each version is new to the compilation cache.
				v := []byte(fmt.Sprintf("9.%03d", (stamp+int64(i))%1000))
				// Compiled, not interpreted: the interpreter's runtime owns
				// its engine and leaked nothing.
				p, err := e.Load(ctx, bytes.Replace(wasm, []byte(tt.version), v, 1), LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if p.Path() != tt.name {
					t.Fatalf("loaded on the %s path, want %s", p.Path(), tt.name)
				}
				p.Close(ctx)
				<-p.Done()
			}
			load(0)
			before := heap()
			codeBefore, codeErr := codeMapped()
			for i := 1; i <= tt.versions; i++ {
				load(i)
			}
			grown := heap() - before
			if grown > tt.heapLimit {
				t.Errorf("the heap grew by %.1f MiB over %d versions loaded and closed", float64(grown)/(1<<20), tt.versions)
			}
			t.Logf("heap growth over %d versions: %.1f MiB", tt.versions, float64(grown)/(1<<20))
			if codeErr != nil {
				t.Logf("executable memory not measured: %v", codeErr)
				return
			}
			codeAfter, err := codeMapped()
			if err != nil {
				t.Fatal(err)
			}
			if code := codeAfter - codeBefore; code > tt.codeLimit {
				t.Errorf("%d KiB more executable memory mapped after %d versions loaded and closed: their compiled code is kept", code>>10, tt.versions)
			} else {
				t.Logf("executable memory growth over %d versions: %d KiB", tt.versions, code>>10)
			}
		})
	}
}

// codeMapped returns the bytes of anonymous executable memory the process
// has mapped (wazero's compiled code), from /proc/self/maps, after a
// garbage collection.
func codeMapped() (int64, error) {
	runtime.GC()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		// address perms offset dev inode [path]: no path, anonymous.
		f := strings.Fields(line)
		if len(f) != 5 || !strings.Contains(f[1], "x") {
			continue
		}
		var lo, hi int64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil {
			return 0, fmt.Errorf("/proc/self/maps line %q: %w", line, err)
		}
		n += hi - lo
	}
	return n, nil
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestPoolPrefersTheConversationsInstance: a conversation's next call
// takes the idle instance that served its last one (a policy's memo
// holds what that call saw), not the most recently used; a call without a
// conversation, or whose instance is busy, takes any idle one.
func TestPoolPrefersTheConversationsInstance(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, false, Limits{MaxInstances: 3})
	p := loadTestPlugin(t, e, "plugins/sliding", Limits{})
	ctx := context.Background()
	take := func(conv string) *pooled {
		t.Helper()
		pi, err := p.acquire(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		pi.conv = conv
		return pi
	}
	a, b := take("a"), take("b")
	p.release(ctx, a, nil)
	p.release(ctx, b, nil) // b is the most recently used
	if got := take("a"); got != a {
		t.Fatal("conversation a got another instance than the one that served it")
	}
	// a is busy: b's instance is the only idle one, and serves anyone.
	if got := take(""); got != b {
		t.Fatal("a call without a conversation did not get the idle instance")
	}
	p.release(ctx, b, nil)
	p.release(ctx, a, nil)
	if got := take("c"); got != a {
		t.Fatal("a new conversation did not get the most recently used instance")
	}
}
