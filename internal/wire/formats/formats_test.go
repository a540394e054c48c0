package formats

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/wire"
)

// sample is one tool-using conversation per format: system prompt, a
// turn with two parallel calls and their results, an answer, then a plain
// user message and one more call.
var samples = map[string]struct{ system, list string }{
	"openai": {"", `[
		{"role":"system","content":"be brief"},
		{"role":"user","content":"fix main.go"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"main.go\"}"}},{"id":"call_2","type":"function","function":{"name":"read","arguments":"{\"path\":\"go.mod\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"package main"},
		{"role":"tool","tool_call_id":"call_2","content":"module x"},
		{"role":"assistant","content":"done","refusal":null},
		{"role":"user","content":[{"type":"text","text":"now the tests"}]},
		{"role":"assistant","content":"","tool_calls":[{"id":"call_3","type":"function","function":{"name":"run","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"call_3","content":"ok \u00e9"}]`},
	"anthropic": {`[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}]`, `[
		{"role":"user","content":"fix main.go"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"read both","signature":"sig"},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"main.go"}},{"type":"tool_use","id":"toolu_2","name":"read","input":{"path":"go.mod"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"package main"},{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"module x"}]}]},
		{"role":"assistant","content":[{"type":"text","text":"done"}]},
		{"role":"user","content":[{"type":"text","text":"now the tests"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"run","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3","content":"ok \u00e9","is_error":false}]}]`},
	"responses": {`"be brief"`, `[
		{"role":"user","content":[{"type":"input_text","text":"fix main.go"}]},
		{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"},
		{"type":"function_call","call_id":"call_1","name":"read","arguments":"{\"path\":\"main.go\"}"},
		{"type":"function_call","call_id":"call_2","name":"read","arguments":"{\"path\":\"go.mod\"}"},
		{"type":"function_call_output","call_id":"call_1","output":"package main"},
		{"type":"function_call_output","call_id":"call_2","output":"module x"},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done","annotations":[]}]},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"now the tests"}]},
		{"type":"custom_tool_call","call_id":"call_3","name":"run","input":"go test"},
		{"type":"custom_tool_call_output","call_id":"call_3","output":"ok \u00e9"}]`},
}

func elements(t testing.TB, list string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	if err := json.Unmarshal([]byte(list), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// sample returns the format's sample conversation: its system prompt
// (nil when none) and the elements of its list.
func sample(t testing.TB, format string) (json.RawMessage, []json.RawMessage) {
	t.Helper()
	s := samples[format]
	var system json.RawMessage
	if s.system != "" {
		system = json.RawMessage(s.system)
	}
	return system, elements(t, s.list)
}

func identity(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

// TestRegistration: every format has a unique name and route, Lookup
// finds it, and the default is OpenAI chat.
func TestRegistration(t *testing.T) {
	t.Parallel()
	names, routes, units := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, f := range All() {
		if names[f.Name()] || routes[f.Route()] {
			t.Errorf("format %q (route %s) registered twice", f.Name(), f.Route())
		}
		names[f.Name()], routes[f.Route()] = true, true
		if g, ok := Lookup(f.Name()); !ok || g.Name() != f.Name() {
			t.Errorf("Lookup(%q) = %v, %v", f.Name(), g, ok)
		}
		if p := f.Provider(); p != wire.ProviderOpenAI && p != wire.ProviderAnthropic {
			t.Errorf("format %q: provider %q", f.Name(), p)
		}
		if u := f.MessageUnit(); u == "" || units[u] {
			t.Errorf("format %q: message unit %q empty or shared", f.Name(), u)
		}
		units[f.MessageUnit()] = true
		if !strings.HasPrefix(f.Route(), "/v1/") {
			t.Errorf("format %q: route %q is not under /v1/", f.Name(), f.Route())
		}
		if _, ok := samples[f.Name()]; !ok {
			t.Errorf("format %q has no sample conversation in this test", f.Name())
		}
	}
	if f, ok := Lookup(""); !ok || f.Name() != Default || Names()[0] != Default {
		t.Errorf("the default format is not %q first", Default)
	}
	if _, ok := Lookup("gemini"); ok {
		t.Error("Lookup found an unregistered format")
	}
}

// TestRoundTrip: every format writes back what a policy kept byte for
// byte — the whole conversation, and a tail from the last user message.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, f := range All() {
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			system, list := sample(t, f.Name())
			wc, err := f.Convert(system, list)
			if err != nil {
				t.Fatal(err)
			}
			c := wc.Chat()
			if err := c.Validate(); err != nil {
				t.Fatalf("the chat form is not a valid conversation: %v", err)
			}
			// Everything kept: the caller's bytes.
			got, marked, err := wc.Back(c, identity(c.Len()), nil, 0)
			if err != nil || marked != nil {
				t.Fatalf("Back: %v, marked %v", err, marked)
			}
			if !sameElements(got, list) || !sameElements(wc.List(), list) {
				t.Fatalf("kept everything, got back\n%s\nwant\n%s", join(got), join(list))
			}
			// A tail from the last user message: the list's tail.
			last := -1
			for i, m := range c.Messages {
				if m.Role == abi.RoleUser {
					last = i
				}
			}
			tail := c.WithMessages(c.Raw[last:], c.Messages[last:])
			origin := identity(c.Len())[last:]
			got, _, err = wc.Back(tail, origin, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !sameElements(got, list[len(list)-3:]) {
				t.Fatalf("kept the tail, got back\n%s\nwant\n%s", join(got), join(list[len(list)-3:]))
			}
		})
	}
}

// TestBackMarks: a format whose provider caches by markers writes the
// breakpoints it is given; the others write the kept bytes.
func TestBackMarks(t *testing.T) {
	t.Parallel()
	for _, f := range All() {
		s := samples[f.Name()]
		var system json.RawMessage
		if s.system != "" {
			system = json.RawMessage(s.system)
		}
		list := elements(t, s.list)
		wc, err := f.Convert(system, list)
		if err != nil {
			t.Fatal(err)
		}
		c := wc.Chat()
		got, marked, err := wc.Back(c, identity(c.Len()), []int{c.Len() - 1}, 0)
		if err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		n := wire.CountCacheControls(json.RawMessage(join(got))) - wire.CountCacheControls(json.RawMessage(s.list))
		switch {
		case f.Name() == "responses" && (n != 0 || marked != nil):
			t.Errorf("%s: %d markers written (marked %v), want none: the Responses API has no markers", f.Name(), n, marked)
		case f.Name() != "responses" && (n != 1 || len(marked) != 1):
			t.Errorf("%s: %d markers written (marked %v), want 1", f.Name(), n, marked)
		}
		if f.MarkedCache() != (f.Name() == "anthropic") {
			t.Errorf("%s: MarkedCache = %v", f.Name(), f.MarkedCache())
		}
	}
}

// TestBackMarksFailure: marks a format cannot write wrap
// wire.ErrBreakpoints, so /v1/compact can answer without them.
func TestBackMarksFailure(t *testing.T) {
	t.Parallel()
	f, _ := Lookup("openai")
	wc, err := f.Convert(nil, elements(t, samples["openai"].list))
	if err != nil {
		t.Fatal(err)
	}
	c := wc.Chat()
	if _, _, err := wc.Back(c, identity(c.Len()), []int{c.Len() + 5}, 0); !errors.Is(err, wire.ErrBreakpoints) {
		t.Fatalf("a mark past the end: %v, want ErrBreakpoints", err)
	}
}

// TestConvertErrors: malformed input is an error wrapping
// chat.ErrMalformed (or chat.ErrUnsupportedFormat), never a panic.
func TestConvertErrors(t *testing.T) {
	t.Parallel()
	for _, f := range All() {
		for _, bad := range []string{`[1]`, `[{"role":7}]`, `[null]`, `[{"type":"computer_call","call_id":"c"}]`} {
			_, err := f.Convert(nil, elements(t, bad))
			if err == nil {
				continue // some shapes are valid in some formats
			}
			if !errors.Is(err, chat.ErrMalformed) && !errors.Is(err, chat.ErrUnsupportedFormat) && !errors.Is(err, chat.ErrInvalid) {
				t.Errorf("%s: Convert(%s) = %v, want a chat error", f.Name(), bad, err)
			}
		}
	}
}

// FuzzRoundTrip: whatever a format converts, it writes back unchanged
// when everything is kept.
func FuzzRoundTrip(f *testing.F) {
	for i, fm := range All() {
		s := samples[fm.Name()]
		f.Add(uint8(i), s.system, s.list)
	}
	f.Add(uint8(1), `"sys"`, `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"a"},{"type":"text","text":"b"}]}]`)
	f.Add(uint8(2), ``, `["hi"]`)
	all := All()
	f.Fuzz(func(t *testing.T, which uint8, system, list string) {
		fm := all[int(which)%len(all)]
		var elems []json.RawMessage
		if json.Unmarshal([]byte(list), &elems) != nil {
			return
		}
		var sys json.RawMessage
		if system != "" {
			if !json.Valid([]byte(system)) {
				return
			}
			sys = json.RawMessage(system)
		}
		wc, err := fm.Convert(sys, elems)
		if err != nil {
			return
		}
		c := wc.Chat()
		got, _, err := wc.Back(c, identity(c.Len()), nil, 0)
		if err != nil {
			t.Fatalf("%s: Back after Convert: %v", fm.Name(), err)
		}
		if !sameElements(got, wc.List()) {
			t.Fatalf("%s: kept everything, got back\n%s\nwant\n%s", fm.Name(), join(got), join(wc.List()))
		}
	})
}

func sameElements(a, b []json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func join(l []json.RawMessage) string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = string(e)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// TestLeadingSettled: Leading reports how many leading elements decided
// it (up to the first user message), the same lead comes from any list
// that keeps them, and a list with no user message settles nothing.
func TestLeadingSettled(t *testing.T) {
	t.Parallel()
	want := map[string]int{"openai": 2, "anthropic": 1, "responses": 1}
	for _, f := range All() {
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			system, list := sample(t, f.Name())
			lead, settled, err := f.Leading(system, list)
			if err != nil {
				t.Fatal(err)
			}
			if settled != want[f.Name()] {
				t.Fatalf("settled %d, want %d", settled, want[f.Name()])
			}
			whole, _ := json.Marshal(lead)
			for _, n := range []int{settled, settled + 1, len(list)} {
				got, again, err := f.Leading(system, list[:n])
				if err != nil {
					t.Fatal(err)
				}
				if j, _ := json.Marshal(got); string(j) != string(whole) || again != settled {
					t.Fatalf("the first %d elements lead %s (settled %d), want %s (%d)", n, j, again, whole, settled)
				}
			}
			// Only what comes before the first user message: nothing
			// settles it.
			_, none, err := f.Leading(system, list[:settled-1])
			if err != nil || none != 0 {
				t.Fatalf("a list without a user message: settled %d, %v", none, err)
			}
		})
	}
}
