package eval

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/dataset"
)

func msg(role, text string) abi.Message {
	return abi.Message{Role: role, Content: abi.TextContent(text)}
}

func call(id, name, args string) abi.Message {
	return abi.Message{Role: abi.RoleAssistant, ToolCalls: []abi.ToolCall{{ID: id, Type: "function", Function: abi.FunctionCall{Name: name, Arguments: args}}}}
}

func result(id, text string) abi.Message {
	m := msg(abi.RoleTool, text)
	m.ToolCallID = id
	return m
}

// toChat encodes messages as a conversation with raw bytes, as eval reads
// them from a data file.
func toChat(t *testing.T, msgs []abi.Message) *chat.Conversation {
	t.Helper()
	b, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	c, err := chat.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type found struct{ kind, text string }

func facts(m abi.Message) []found {
	var out []found
	extractFacts(&m, factText(&m), func(k kind, text string, word bool) {
		if word != (k != kindError && k != kindConstraint) {
			panic(fmt.Sprintf("%s %q: word %v", probeKinds[k], text, word))
		}
		if f := (found{probeKinds[k], text}); !slices.Contains(out, f) {
			out = append(out, f)
		}
	})
	return out
}

func TestExtractFacts(t *testing.T) {
	tests := []struct {
		name string
		m    abi.Message
		want []found
	}{
		{"paths", msg("tool", "see src/parser/lexer.py:12 and ./tests/test_x.py, not https://x.org/a/b.py nor src/a.pyc2x"),
			[]found{{"path", "src/parser/lexer.py"}, {"path", "./tests/test_x.py"}, {"path", "src/a.pyc2x"}}},
		{"words of a path are the path's", msg("tool", "cat astropy/modeling/separable_core.py"),
			[]found{{"path", "astropy/modeling/separable_core.py"}}},
		{"definitions", msg("tool", "def tokenize_input(text):\nclass Lexer:\nfunc (s *S) x() {}\nfunc parseAll(\nthe class too: no\ndef run("),
			[]found{{"snake_case", "tokenize_input"}, {"function", "tokenize_input"}, {"function", "Lexer"}, {"function", "parseAll"}}},
		{"calls", msg("assistant", "then self.parser.reset() and parse_args(x), getUser(1), CompoundModel(a), 3.foo(), foo(), os.path.join(a)"),
			[]found{{"snake_case", "parse_args"}, {"function", "self.parser.reset"}, {"function", "parse_args"}, {"function", "getUser"}, {"function", "CompoundModel"}}},
		{"errors from observations", msg("tool", "Traceback\nValueError: bad token at 1234\nraise ValueError\nFAILED tests/t.py::test_x - boom\nerror: cannot open\nTimeoutError:"),
			[]found{{"path", "tests/t.py"}, {"snake_case", "test_x"}, {"error", "ValueError: bad token at 1234"}, {"error", "FAILED tests/t.py::test_x"}, {"error", "error: cannot open"}, {"number", "1234"}}},
		{"no errors or numbers from the agent", msg("assistant", "I expect ValueError: bad token at 1234"), nil},
		{"ids and snake_case", msg("tool", `{"user_id": "mia_li_3668", "cabin": "basic_economy", "flight": "HAT170", "x": "utf8", "y": "RSA-1024", "h": "1c6ba19b2818435c"}`),
			// RSA-1024 is no id; its number is a number.
			[]found{{"id", "mia_li_3668"}, {"snake_case", "basic_economy"}, {"id", "HAT170"}, {"number", "1024"}}},
		{"numbers", msg("tool", "count 56.78 of 4,500 in v1.2.3 at 1.2 for 98765 (x123, 12, 0.5, 2024-01-15)"),
			[]found{{"number", "56.78"}, {"number", "4,500"}, {"number", "98765"}, {"number", "2024"}}},
		{"escapes left in a tool's output", msg("tool", `caf\u00e9t \nleft_arr 98846`),
			[]found{{"number", "98846"}}},
		{"constraints from the user", msg("user", "Never touch setup.cfg at all. Short one. You must not modify the tests!"),
			[]found{{"constraint", "Never touch setup.cfg at all."}, {"constraint", "You must not modify the tests!"}}},
		{"tool call arguments, not the tool's or parameters' names", call("c1", "get_user_details", `{"user_id":"sara_doe_496","command":"cat src/a.py\nsed -n 1p src/b_c.py"}`),
			[]found{{"path", "src/a.py"}, {"path", "src/b_c.py"}, {"id", "sara_doe_496"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := facts(tt.m)
			sortFound := func(f []found) {
				slices.SortFunc(f, func(a, b found) int { return strings.Compare(a.kind+a.text, b.kind+b.text) })
			}
			sortFound(got)
			sortFound(tt.want)
			if !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("facts:\n got  %q\n want %q", got, tt.want)
			}
		})
	}
}

func TestLastTurn(t *testing.T) {
	sys, task := msg("system", "s"), msg("user", "task")
	tests := []struct {
		name string
		msgs []abi.Message
		want int
	}{
		{"the first request: the task", []abi.Message{sys, task}, 2},
		{"a call and its result", []abi.Message{sys, task, call("c1", "bash", "{}"), result("c1", "r"), call("c2", "bash", "{}"), result("c2", "r")}, 4},
		{"a reply and the user's answer", []abi.Message{sys, task, msg("assistant", "a"), msg("user", "b"), msg("assistant", "c"), msg("user", "d")}, 4},
		{"users only", []abi.Message{sys, task, msg("user", "more"), msg("user", "again")}, 3},
	}
	for _, tt := range tests {
		if got := LastTurn(tt.msgs, 2); got != tt.want {
			t.Errorf("%s: LastTurn = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// drawConversation: system, task, then ten tool steps, each reading a
// file of its own (src/mN.py) and printing a number of its own.
func drawConversation(steps int) []abi.Message {
	msgs := []abi.Message{
		msg("system", "You are a coding agent. Never edit src/pinned.py."),
		msg("user", "Fix the bug in src/task.py and src/pinned.py."),
	}
	for i := 0; i < steps; i++ {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs,
			call(id, "bash", fmt.Sprintf(`{"cmd":"cat src/m%d.py src/task.py"}`, i)),
			result(id, fmt.Sprintf("def handler_%d(x):\n    return %d\nsrc/pinned.py", i, 1000+i)))
	}
	return msgs
}

func TestDraw(t *testing.T) {
	msgs := drawConversation(12)
	c := toChat(t, msgs)
	ps := newProbeSet(c, "conv-1", ProbeOptions{PerRequest: 9})
	at := len(msgs) // the request of every message: its last turn is the last call and result
	probes := ps.Draw(at)
	if len(probes) != 9 {
		t.Fatalf("%d probes, want 9: %+v", len(probes), probes)
	}
	last := LastTurn(msgs, 2)
	positions := map[string]int{}
	for _, p := range probes {
		positions[p.Position]++
		if p.At != at || p.Message < 2 || p.Message >= last {
			t.Errorf("probe %+v: not from the history [2, %d) of request %d", p, last, at)
		}
		// Pinned facts (in the system prompt or the task) and facts of
		// the last turn are never probes.
		for _, never := range []string{"src/pinned.py", "src/task.py", "src/m11.py", "1011", "handler_11"} {
			if p.Text == never {
				t.Errorf("probe %q: kept by every valid compaction", p.Text)
			}
		}
		if want := Positions[third(p.Message-2, last-2)]; want != p.Position {
			t.Errorf("probe %q at message %d: position %s, want %s", p.Text, p.Message, p.Position, want)
		}
	}
	if positions[PositionFirst] != 3 || positions[PositionMiddle] != 3 || positions[PositionLast] != 3 {
		t.Errorf("positions %v, want 3 each", positions)
	}
	if again := newProbeSet(toChat(t, msgs), "conv-1", ProbeOptions{PerRequest: 9}).Draw(at); !sameProbes(again, probes) {
		t.Errorf("the draw is not reproducible:\n%+v\n%+v", probes, again)
	}
	other := newProbeSet(toChat(t, msgs), "conv-2", ProbeOptions{PerRequest: 9}).Draw(at)
	earlier := ps.Draw(at - 2)
	if sameProbes(other, probes) && sameProbes(earlier, probes) {
		t.Error("the draw does not depend on the conversation or the request")
	}
	if ps.Draw(2) != nil || ps.Draw(4) != nil {
		t.Error("a request whose history is only its last turn has no probes")
	}
}

func TestThird(t *testing.T) {
	for _, tt := range []struct{ i, n, want int }{
		{0, 1, 1}, {0, 2, 0}, {1, 2, 2}, {0, 3, 0}, {1, 3, 1}, {2, 3, 2},
		{0, 22, 0}, {6, 22, 0}, {7, 22, 1}, {14, 22, 1}, {15, 22, 2}, {21, 22, 2},
	} {
		if got := third(tt.i, tt.n); got != tt.want {
			t.Errorf("third(%d, %d) = %d, want %d", tt.i, tt.n, got, tt.want)
		}
	}
}

func sameProbes(a, b []Probe) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Text != b[i].Text || a[i].Position != b[i].Position {
			return false
		}
	}
	return true
}

// TestDrawLastSeen: a fact's position is the last time the history shows
// it, so a file read early and again late is a late probe.
func TestDrawLastSeen(t *testing.T) {
	msgs := drawConversation(9)
	// Step 8 reads src/m0.py again.
	msgs[len(msgs)-4] = call("c7", "bash", `{"cmd":"cat src/m0.py"}`)
	c := toChat(t, msgs)
	ps := newProbeSet(c, "x", ProbeOptions{PerRequest: 300})
	for _, p := range ps.Draw(len(msgs)) {
		if p.Text == "src/m0.py" && (p.Position != PositionLast || p.Message != len(msgs)-4) {
			t.Errorf("src/m0.py: %+v, want the last third at message %d", p, len(msgs)-4)
		}
	}
}

func TestRetain(t *testing.T) {
	msgs := drawConversation(12)
	c := toChat(t, msgs)
	ps := newProbeSet(c, "conv", ProbeOptions{PerRequest: 30})
	at := len(msgs)
	probes := ps.Draw(at)
	in := dataset.Prefix(c, at)
	if r := ps.retainSent(probes, in); r.Retained != r.Probes || r.Probes != len(probes) || len(r.Lost) != 0 {
		t.Fatalf("the uncompressed request keeps %d of %d probes: lost %+v", r.Retained, r.Probes, r.Lost)
	}
	// A window: the pinned prefix and the last two steps.
	window, err := chat.FromRaw(append(append([]json.RawMessage{}, in.Raw[:2]...), in.Raw[at-4:]...))
	if err != nil {
		t.Fatal(err)
	}
	r := ps.retainSent(probes, window)
	for _, p := range probes {
		kept := p.Message >= at-4
		if slices.ContainsFunc(r.Lost, func(l Probe) bool { return l.Text == p.Text }) == kept {
			t.Errorf("probe %q from message %d: kept %v by a window from %d", p.Text, p.Message, !kept, at-4)
		}
	}
	// Without the raw bytes (a native replay), every text is searched:
	// the same answer.
	if plain := NewProbeSet(msgs, "conv", ProbeOptions{PerRequest: 30}).Retain(probes, window.Messages); plain.Retained != r.Retained || plain.Probes != r.Probes {
		t.Errorf("Retain on messages: %d of %d, retainSent: %d of %d", plain.Retained, plain.Probes, r.Retained, r.Probes)
	}
	if r.ByPosition[PositionFirst][1] != 0 || r.ByPosition[PositionLast][1] == 0 {
		t.Errorf("by position %v: a window keeps late facts, not early ones", r.ByPosition)
	}
	sum := 0
	for _, v := range r.ByKind {
		sum += v[0]
	}
	if sum != r.Probes || r.Retained+len(r.Lost) != r.Probes {
		t.Errorf("counts: %+v", r)
	}
	// A summary that names a fact keeps it.
	lost := r.Lost[0]
	summary, _ := json.Marshal(msg("user", "Earlier: "+lost.Text+" was read."))
	withSummary, err := chat.FromRaw(append(append(append([]json.RawMessage{}, in.Raw[:2]...), summary), in.Raw[at-4:]...))
	if err != nil {
		t.Fatal(err)
	}
	if r2 := ps.retainSent(probes, withSummary); r2.Retained != r.Retained+1 {
		t.Errorf("with a summary naming %q: kept %d, want %d", lost.Text, r2.Retained, r.Retained+1)
	}
}

func TestRetentionAdd(t *testing.T) {
	var sum Retention
	for i := 0; i < 5; i++ {
		r := Retention{Probes: 2, Retained: 1, ByKind: map[string][2]int{ProbePath: {2, 1}}, ByPosition: map[string][2]int{PositionFirst: {2, 1}}}
		sum.Add(r)
		sum.keepLost([]Probe{{Text: fmt.Sprint(i), Position: PositionFirst}})
	}
	if sum.Probes != 10 || sum.Retained != 5 || sum.ByKind[ProbePath] != [2]int{10, 5} || sum.ByPosition[PositionFirst] != [2]int{10, 5} {
		t.Errorf("sum %+v", sum)
	}
	if len(sum.Lost) != maxLost || sum.Lost[len(sum.Lost)-1].Text != "4" {
		t.Errorf("lost %+v: want the latest %d", sum.Lost, maxLost)
	}
	if (Retention{}).Share() != 1 {
		t.Error("no probes: share must be 1")
	}
}

// TestProbesOnFixtures draws the probes of every request of every fixture
// conversation: the uncompressed request keeps every one (eval's
// self-check), none is in the pinned prefix, the cap holds, and long
// histories get probes from each of their thirds.
func TestProbesOnFixtures(t *testing.T) {
	files, err := dataset.FixtureFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		convs, err := dataset.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total, thirds := 0, map[string]int{}
		for _, c := range convs {
			if c.Chat.Validate() != nil {
				continue
			}
			ps := newProbeSet(c.Chat, c.ID, ProbeOptions{})
			pinned := strings.Join(ps.texts[:ps.start], "\n")
			for _, at := range Turns(c.Chat) {
				probes := ps.Draw(at)
				if len(probes) > DefaultProbesPerRequest {
					t.Fatalf("%s@%d: %d probes", c.ID, at, len(probes))
				}
				for _, p := range probes {
					if p.In(pinned) {
						t.Errorf("%s@%d: probe %q is in the system prompt or the task", c.ID, at, p.Text)
					}
					thirds[p.Position]++
				}
				if r := ps.retainSent(probes, dataset.Prefix(c.Chat, at)); r.Retained != r.Probes {
					t.Errorf("%s@%d: the uncompressed request lost %+v", c.ID, at, r.Lost)
				}
				total += len(probes)
			}
		}
		t.Logf("%s: %d probes, by third %v", f, total, thirds)
		if strings.Contains(f, "mini_swe") && (thirds[PositionFirst] == 0 || thirds[PositionMiddle] == 0 || thirds[PositionLast] == 0) {
			t.Errorf("%s: probes by third %v: every third should have some", f, thirds)
		}
	}
}

func TestProbeIn(t *testing.T) {
	tests := []struct {
		probe Probe
		text  string
		want  bool
	}{
		{Probe{Text: "123", Word: true}, "a1234 x123 123.", true},
		{Probe{Text: "123", Word: true}, "a1234 x123 1234", false},
		{Probe{Text: "pyx_f", Word: true}, "__pyx_f_5numpy", false},
		{Probe{Text: "ABC123", Word: true}, `{"id":"ABC123"}`, true},
		{Probe{Text: "src/a.py", Word: true}, "see src/a.py:12", true},
		{Probe{Text: "src/a.py", Word: true}, "see src/a.pyc", false},
		{Probe{Text: "ValueError: bad tok"}, "raise ValueError: bad token", true},
	}
	for _, tt := range tests {
		if got := tt.probe.In(tt.text); got != tt.want {
			t.Errorf("%q in %q = %v, want %v", tt.probe.Text, tt.text, got, tt.want)
		}
	}
}

func TestIsID(t *testing.T) {
	for w, want := range map[string]bool{
		"ZFA04Y": true, "HAT170": true, "mia_li_3668": true, "a1b2c3d": true, "credit_card_4421486": true,
		"address1": false, "utf8": false, "64-bit": false, "RSA-1024": false, "hello": false, "12345": false,
		"4883c480": false, strings.Repeat("a1", 21): false,
	} {
		if got := isID(w); got != want {
			t.Errorf("isID(%q) = %v, want %v", w, got, want)
		}
	}
}

// BenchmarkProbes is eval's own cost of retention on the mini-swe-agent
// fixture, per request, cumulative: finding the facts (once per
// conversation), drawing every request's probes, and checking them
// against the uncompressed request (all kept) or a window of its last 8
// messages (most lost: the slow path).
func BenchmarkProbes(b *testing.B) {
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	requests := 0
	for _, c := range convs {
		requests += len(Turns(c.Chat))
	}
	// A window: the pinned prefix and the last 8 messages, as a compacted
	// request that lost most of its history.
	window := func(c *chat.Conversation, at int) *chat.Conversation {
		keep := min(8, at-2)
		w, err := chat.FromRaw(append(append([]json.RawMessage{}, c.Raw[:2]...), c.Raw[at-keep:at]...))
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	for _, stage := range []string{"extract", "draw", "retain-all", "retain-window"} {
		b.Run(stage, func(b *testing.B) {
			for b.Loop() {
				for _, c := range convs {
					ps := newProbeSet(c.Chat, c.ID, ProbeOptions{})
					if stage == "extract" {
						continue
					}
					for _, at := range Turns(c.Chat) {
						probes := ps.Draw(at)
						switch stage {
						case "retain-all":
							ps.retainSent(probes, dataset.Prefix(c.Chat, at))
						case "retain-window":
							ps.retainSent(probes, window(c.Chat, at))
						}
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(requests)/1e3, "µs/request")
		})
	}
}
