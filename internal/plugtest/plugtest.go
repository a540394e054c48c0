// Package plugtest holds what the built-in policies' native tests share:
// building small conversations from a spec, running a compact function
// with the host's result checks, golden files, the real-data sweep, and a
// turn-by-turn replay that measures token reduction and prompt-cache
// stability. Only tests import it (it is never built into a plugin).
package plugtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/pdk"
)

// Build makes a conversation from a compact spec: "s" system, "d"
// developer, "u" user, "a" assistant, "c" assistant with one tool call, "p"
// assistant with two parallel calls, "t" tool result (ids follow the
// calls). Contents are "<role> <index>" ("result <index>" for tools); each
// message has tokens = 10 unless tok says otherwise.
func Build(spec string, tok ...int) []abi.Message {
	var msgs []abi.Message
	var pending []string
	call := 0
	for i, r := range spec {
		m := abi.Message{Tokens: 10}
		if i < len(tok) {
			m.Tokens = tok[i]
		}
		switch r {
		case 's':
			m.Role, m.Content = abi.RoleSystem, abi.TextContent("system")
		case 'd':
			m.Role, m.Content = abi.RoleDeveloper, abi.TextContent(fmt.Sprintf("developer %d", i))
		case 'u':
			m.Role, m.Content = abi.RoleUser, abi.TextContent(fmt.Sprintf("user %d", i))
		case 'a':
			m.Role, m.Content = abi.RoleAssistant, abi.TextContent(fmt.Sprintf("assistant %d", i))
		case 'c', 'p':
			m.Role, m.Content = abi.RoleAssistant, abi.TextContent(fmt.Sprintf("assistant %d", i))
			n := 1
			if r == 'p' {
				n = 2
			}
			for k := 0; k < n; k++ {
				call++
				id := fmt.Sprintf("call%d", call)
				m.ToolCalls = append(m.ToolCalls, abi.ToolCall{ID: id, Type: "function", Function: abi.FunctionCall{Name: fmt.Sprintf("f%d", k), Arguments: "{}"}})
				pending = append(pending, id)
			}
		case 't':
			m.Role, m.ToolCallID, m.Content = abi.RoleTool, pending[0], abi.TextContent(fmt.Sprintf("result %d", i))
			pending = pending[1:]
		default:
			panic(fmt.Sprintf("plugtest.Build: unknown spec letter %q", r))
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// Deterministic runs p through its JSON export three times, each on a
// fresh copy of the policy value (as a fresh instance would), and fails
// unless every call returns the same bytes.
func Deterministic(t *testing.T, p func() pdk.Policy, req *abi.CompactRequest) {
	t.Helper()
	input, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	for i := 0; i < 3; i++ {
		pol := p()
		out, err := pdk.Call(&pol, &pdk.TestHost{}, abi.ExportCompact, input)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = out
		} else if !bytes.Equal(out, first) {
			t.Fatalf("call %d differs:\n%s\n%s", i, first, out)
		}
	}
}

// Func is a policy's compact function.
type Func = pdk.CompactFunc

// Request returns a request for msgs with cfg (nil for the plugin's
// defaults) and state.
func Request(msgs []abi.Message, cfg map[string]any, state json.RawMessage) *abi.CompactRequest {
	req := &abi.CompactRequest{ABI: abi.Version, Messages: msgs, Context: abi.Context{State: state}}
	if cfg != nil {
		req.Config, _ = json.Marshal(cfg)
	}
	for i := range msgs {
		req.Context.TotalTokens += msgs[i].Tokens
	}
	return req
}

// Run calls compact natively on msgs and fails the test if it errs or its
// result breaks the host's checks (convo.CheckResult).
func Run(tb testing.TB, compact Func, msgs []abi.Message, cfg map[string]any, state json.RawMessage) *abi.CompactResult {
	tb.Helper()
	res, err := compact(&pdk.TestHost{}, Request(msgs, cfg, state))
	if err != nil {
		tb.Fatal(err)
	}
	if err := convo.CheckResult(msgs, res.Messages); err != nil {
		tb.Fatalf("invalid result: %v", err)
	}
	return res
}

// Shape renders items as "r0 m r7 r8": refs and new messages.
func Shape(items []abi.Item) string {
	parts := make([]string, len(items))
	for i, it := range items {
		if it.IsRef() {
			parts[i] = fmt.Sprintf("r%d", it.Ref)
		} else {
			parts[i] = "m"
		}
	}
	return strings.Join(parts, " ")
}

// Golden runs p through its JSON encoding (pdk.Call, exactly what the Wasm
// export does) on testdata/*.input.json and compares the output with
// testdata/*.golden.json; with update it rewrites the golden files first.
// It also checks that the fast-path encoding of each request gives the same
// bytes.
func Golden(t *testing.T, p *pdk.Policy, update bool) {
	t.Helper()
	GoldenWith(t, p, update, func(string) pdk.Host { return &pdk.TestHost{} })
}

// GoldenWith is Golden with a host per case: newHost gets the case name
// (the input file name without .input.json) and is called once for each
// encoding, so a stateful fake starts afresh for both.
func GoldenWith(t *testing.T, p *pdk.Policy, update bool, newHost func(name string) pdk.Host) {
	t.Helper()
	inputs, err := filepath.Glob("testdata/*.input.json")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.json")
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := pdk.Call(p, newHost(name), abi.ExportCompact, input)
			if err != nil {
				t.Fatal(err)
			}
			var req abi.CompactRequest
			if err := json.Unmarshal(input, &req); err != nil {
				t.Fatal(err)
			}
			fast, err := pdk.CallFast(p, newHost(name), abi.ExportCompact, abi.AppendFastRequest(nil, req.Config, &req.Context, req.Messages))
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
			if update {
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

// Conversation is one conversation of the shared data, ready for native
// runs: contents are decoded text (as the fast path delivers them) and
// tokens are counted with gpt-4o's tokenizer.
type Conversation struct {
	ID, File string
	Messages []abi.Message
}

// Sample returns convs, or every n-th of them under -short or -race.
func Sample(convs []Conversation, n int) []Conversation {
	if !testing.Short() && !Race {
		return convs
	}
	var out []Conversation
	for i := 0; i < len(convs); i += n {
		out = append(out, convs[i])
	}
	return out
}

// Load reads the named fixture files (base names, as in the full data set;
// none means every file) from the repository's testdata/conversations and
// prepares their conversations. With exact, tokens are counted with
// gpt-4o's tokenizer (cached across calls in one test binary); otherwise a
// message's tokens are its content length / 4 + 4, enough for policies that
// only compare counts.
func Load(tb testing.TB, exact bool, names ...string) []Conversation {
	tb.Helper()
	return load(tb, dataset.FixtureFiles, dataset.Fixture, exact, names)
}

// LoadFull is Load over the full data set ($COMPACTD_DATA or
// ../shared/data), for reports; it skips the test when the data set is not
// there.
func LoadFull(tb testing.TB, exact bool, names ...string) []Conversation {
	tb.Helper()
	if _, err := dataset.Dir(); err != nil {
		tb.Skip(err)
	}
	return load(tb, dataset.Files, dataset.File, exact, names)
}

func load(tb testing.TB, all func() ([]string, error), one func(string) (string, error), exact bool, names []string) []Conversation {
	tb.Helper()
	var files []string
	if len(names) == 0 {
		f, err := all()
		if err != nil {
			tb.Fatal(err)
		}
		files = f
	}
	for _, n := range names {
		f, err := one(n)
		if err != nil {
			tb.Fatal(err)
		}
		files = append(files, f)
	}
	tok := tokenizer()
	var out []Conversation
	for _, f := range files {
		convs, err := readFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, c := range convs {
			msgs := make([]abi.Message, len(c.Chat.Messages))
			for i, m := range c.Chat.Messages {
				if m.Content.IsString() {
					m.Content = abi.TextContent(m.Content.Text())
				}
				msgs[i] = m
			}
			if exact {
				tok.CountMessages(msgs)
			} else {
				for i := range msgs {
					msgs[i].Tokens = msgs[i].Content.Len()/4 + 4
				}
			}
			out = append(out, Conversation{ID: c.ID, File: c.File, Messages: msgs})
		}
	}
	return out
}

// TurnPrefixes returns the prefix lengths an agent sends turn by turn: the
// history before each assistant message, and the whole conversation.
func TurnPrefixes(msgs []abi.Message) []int {
	var out []int
	for i := 1; i < len(msgs); i++ {
		if msgs[i].Role == abi.RoleAssistant {
			out = append(out, i)
		}
	}
	return append(out, len(msgs))
}

// SamplePrefixes returns up to k of TurnPrefixes spread evenly, the first
// and the last included (as dataset.SamplePrefixes).
func SamplePrefixes(msgs []abi.Message, k int) []int {
	all := TurnPrefixes(msgs)
	if len(all) <= k || k < 2 {
		return all
	}
	out := make([]int, 0, k)
	for i := 0; i < k; i++ {
		out = append(out, all[i*(len(all)-1)/(k-1)])
	}
	return out
}

// RealData runs compact with each config on up to k turn prefixes of
// every conversation of every data file, without state, and fails the test
// on an error or a result that breaks the host's checks. check, if not
// nil, adds the policy's own contract. With -short or -race, k is at most 3.
func RealData(t *testing.T, compact Func, configs []map[string]any, k int, check func(tb testing.TB, id string, in []abi.Message, res *abi.CompactResult, cfg map[string]any)) {
	t.Helper()
	if testing.Short() || Race {
		k = min(k, 3)
	}
	for _, c := range Load(t, false) {
		for _, n := range SamplePrefixes(c.Messages, k) {
			msgs := c.Messages[:n:n]
			for _, cfg := range configs {
				res, err := compact(&pdk.TestHost{}, Request(msgs, cfg, nil))
				if err != nil {
					t.Fatalf("%s prefix %d, config %v: %v", c.ID, n, cfg, err)
				}
				if err := convo.CheckResult(msgs, res.Messages); err != nil {
					t.Fatalf("%s prefix %d, config %v: %v", c.ID, n, cfg, err)
				}
				if check != nil {
					check(t, c.ID, msgs, res, cfg)
				}
			}
		}
	}
}

// Turn is one request of a replay and its result.
type Turn struct {
	Conv     *Conversation
	N        int // the prefix length
	Request  *abi.CompactRequest
	Result   *abi.CompactResult
	Out      []abi.Message // the resolved output
	Before   int           // tokens in
	After    int           // tokens out
	Extended bool          // the previous turn's output is a prefix of Out
}

// Replay runs compact on every turn prefix of each conversation in order,
// as a stateless agent would call it, passing the state each result
// returns to the next request (as the daemon does). Every result must pass
// the host's checks. visit, if not nil, sees every turn.
func Replay(tb testing.TB, compact Func, convs []Conversation, cfg map[string]any, visit func(*Turn)) ReplayStats {
	tb.Helper()
	var rawCfg json.RawMessage
	if cfg != nil {
		rawCfg, _ = json.Marshal(cfg)
	}
	tok := tokenizer()
	h := &pdk.TestHost{Tokens: tok.Count}
	var st ReplayStats
	for ci := range convs {
		c := &convs[ci]
		var state json.RawMessage
		var prev []abi.Message
		for k, n := range TurnPrefixes(c.Messages) {
			msgs := c.Messages[:n:n]
			req := &abi.CompactRequest{ABI: abi.Version, Messages: msgs, Config: rawCfg,
				Context: abi.Context{Model: "gpt-4o", Encoding: tok.Encoding(), ConversationID: c.ID, State: state}}
			for i := range msgs {
				req.Context.TotalTokens += msgs[i].Tokens
			}
			res, err := compact(h, req)
			if err != nil {
				tb.Fatalf("%s prefix %d: %v", c.ID, n, err)
			}
			if err := convo.CheckResult(msgs, res.Messages); err != nil {
				tb.Fatalf("%s prefix %d: %v", c.ID, n, err)
			}
			out, _ := convo.Resolve(msgs, res.Messages)
			after := 0
			for i := range out {
				if !res.Messages[i].IsRef() {
					out[i].Tokens = tok.CountMessage(&out[i])
				}
				after += out[i].Tokens
			}
			turn := &Turn{Conv: c, N: n, Request: req, Result: res, Out: out, Before: req.Context.TotalTokens, After: after}
			turn.Extended = k > 0 && isPrefix(prev, out)
			st.add(turn, k == 0)
			if visit != nil {
				visit(turn)
			}
			if len(res.State) > 0 && string(res.State) != "null" {
				state = res.State
			}
			prev = out
		}
	}
	return st
}

// isPrefix reports whether a's messages begin b.
func isPrefix(a, b []abi.Message) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if !SameMessage(&a[i], &b[i]) {
			return false
		}
	}
	return true
}

// SameMessage reports whether two messages would be sent identically.
func SameMessage(a, b *abi.Message) bool {
	return a.Role == b.Role && a.Name == b.Name && a.ToolCallID == b.ToolCallID &&
		slices.Equal(a.ToolCalls, b.ToolCalls) && a.Content.Text() == b.Content.Text() && a.Content.IsNull() == b.Content.IsNull()
}

// ReplayStats sums up a replay.
type ReplayStats struct {
	Conversations int
	Turns         int // requests made
	Compacted     int // requests whose result differs from the input
	// Followups counts the turns after each conversation's first, and
	// Extended those whose output begins with the previous turn's output
	// (so a provider's prompt cache can reuse all of it).
	Followups, Extended int
	TokensBefore        int
	TokensAfter         int
	reductions          []float64
}

func (s *ReplayStats) add(t *Turn, first bool) {
	s.Turns++
	if first {
		s.Conversations++
	} else {
		s.Followups++
		if t.Extended {
			s.Extended++
		}
	}
	if t.Result.Compacted {
		s.Compacted++
	}
	s.TokensBefore += t.Before
	s.TokensAfter += t.After
	r := 0.0
	if t.Before > 0 {
		r = 1 - float64(t.After)/float64(t.Before)
	}
	s.reductions = append(s.reductions, r)
}

// MedianReduction is the median over turns of 1 - tokens out / tokens in.
func (s *ReplayStats) MedianReduction() float64 {
	if len(s.reductions) == 0 {
		return 0
	}
	r := append([]float64(nil), s.reductions...)
	sort.Float64s(r)
	if len(r)%2 == 1 {
		return r[len(r)/2]
	}
	return (r[len(r)/2-1] + r[len(r)/2]) / 2
}

// TotalReduction is 1 - all tokens out / all tokens in.
func (s *ReplayStats) TotalReduction() float64 {
	if s.TokensBefore == 0 {
		return 0
	}
	return 1 - float64(s.TokensAfter)/float64(s.TokensBefore)
}

// Unchanged is the share of follow-up turns whose output extends the
// previous turn's: the cache-friendliness figure.
func (s *ReplayStats) Unchanged() float64 {
	if s.Followups == 0 {
		return 1
	}
	return float64(s.Extended) / float64(s.Followups)
}

func (s *ReplayStats) String() string {
	return fmt.Sprintf("%d conversations, %d turns (%d compacted): median token reduction %.1f%%, total %.1f%%; prefix unchanged on %.1f%% of follow-up turns",
		s.Conversations, s.Turns, s.Compacted, 100*s.MedianReduction(), 100*s.TotalReduction(), 100*s.Unchanged())
}

// readFile is dataset.ReadFile, once per file and test binary (parsing the
// data takes seconds under the race detector). Callers copy what they
// change.
func readFile(path string) ([]dataset.Conversation, error) {
	parsedMu.Lock()
	defer parsedMu.Unlock()
	if c, ok := parsed[path]; ok {
		return c, nil
	}
	c, err := dataset.ReadFile(path)
	if err == nil {
		parsed[path] = c
	}
	return c, err
}

var (
	parsedMu sync.Mutex
	parsed   = map[string][]dataset.Conversation{}
)

// The tokenizer the helpers count with: gpt-4o's, shared by the tests of
// one binary so that its cache makes a second pass over the data cheap.
var tokenizer = sync.OnceValue(func() *tokens.Tokenizer {
	return tokens.New(tokens.Options{}).ForModel("gpt-4o")
})

// ReplayFiles are the data files the replay report covers.
var ReplayFiles = []string{"mini_swe_agent_deepseek_swebench.jsonl", "tau_bench_gpt4o_airline.jsonl"}

// Report replays compact with its defaults on each of ReplayFiles of the
// full data set and logs the figures. It is skipped with -short, under the
// race detector and when the full data set is absent.
func Report(t *testing.T, name string, compact Func) {
	t.Helper()
	if testing.Short() || Race {
		t.Skip("replays whole data files (run without -short and -race)")
	}
	for _, f := range ReplayFiles {
		st := Replay(t, compact, LoadFull(t, true, f), nil, nil)
		t.Logf("%s on %s: %s", name, f, &st)
	}
}
