package compactor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/compactd/compactd/policyconfig"
	"github.com/compactd/compactd/registry"
)

// The plugins these tests run, built from source and loaded once per test
// binary. hostile-trap traps on every compact call.
var testPlugins = []string{
	"plugins/sliding",
	"plugins/deterministic",
	"plugins/hierarchical",
	"plugins/recap",
	"host/testdata/hostile/hostile.c#HOSTILE_TRAP",
}

// source is a PolicySource over loaded plugins. (The registry adds
// discovery, reload and a smoke test that would refuse hostile-trap.)
type source map[string]*host.Plugin

var _ compactor.PolicySource = source(nil)

func (s source) Acquire(_ context.Context, name string) (*host.Plugin, func(), error) {
	p, ok := s[name]
	if !ok {
		return nil, nil, fmt.Errorf("%w %q", registry.ErrUnknownPolicy, name)
	}
	return p, func() {}, nil
}

var (
	setupOnce sync.Once
	loaded    source
	setupErr  error
	engine    *host.Engine
)

func TestMain(m *testing.M) {
	code := m.Run()
	ctx := context.Background()
	for _, p := range loaded {
		p.Close(ctx)
	}
	if engine != nil {
		engine.Close(ctx)
	}
	os.Exit(code)
}

// policies returns the source serving testPlugins.
func policies(t *testing.T) source {
	t.Helper()
	setupOnce.Do(func() {
		ctx := context.Background()
		engine, setupErr = host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(t)})
		if setupErr != nil {
			return
		}
		// Built and loaded side by side: each is a go build (or clang)
		// and a compile, waiting on child processes and the disk.
		plugins := make([]*host.Plugin, len(testPlugins))
		errs := make([]error, len(testPlugins))
		var wg sync.WaitGroup
		for i, rel := range testPlugins {
			wg.Go(func() {
				path, err := wasmbuild.ForTestMain(rel)
				if err != nil {
					errs[i] = err
					return
				}
				wasm, err := os.ReadFile(path)
				if err != nil {
					errs[i] = err
					return
				}
				if plugins[i], err = engine.Load(ctx, wasm, host.LoadOptions{Source: rel}); err != nil {
					errs[i] = fmt.Errorf("%s: %w", rel, err)
				}
			})
		}
		wg.Wait()
		loaded = source{}
		for _, p := range plugins {
			if p != nil {
				loaded[p.Name()] = p // TestMain closes them, even after an error
			}
		}
		setupErr = errors.Join(errs...)
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return loaded
}

var counter = tokens.New(tokens.Options{})

func newCompactor(t *testing.T, opts compactor.Options) *compactor.Compactor {
	opts.Policies = policies(t)
	opts.Tokens = counter
	return compactor.New(opts)
}

// realConversation returns a copy of a long mini-swe-agent conversation
// (the data file is read once per test binary).
func realConversation(t *testing.T) *chat.Conversation {
	t.Helper()
	c, err := firstMiniSWE()
	if err != nil {
		t.Fatal(err)
	}
	return dataset.Prefix(c, c.Len())
}

var firstMiniSWE = sync.OnceValues(func() (*chat.Conversation, error) {
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		return nil, err
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return convs[0].Chat, nil
})

// chatOf builds a conversation from messages given as JSON objects.
func chatOf(t *testing.T, msgs ...string) *chat.Conversation {
	t.Helper()
	c, err := chat.Parse([]byte("[" + strings.Join(msgs, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// recapConversation has n user/assistant pairs whose assistant messages
// carry recap lines.
func recapConversation(t *testing.T, n int) *chat.Conversation {
	var msgs []string
	msgs = append(msgs, `{"role":"system","content":"You are a Playbooks agent."}`)
	for i := 1; i <= n; i++ {
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"user","content":"step %d please"}`, i),
			fmt.Sprintf(`{"role":"assistant","content":"working\nrecap - did step %d\nlogs"}`, i))
	}
	return chatOf(t, msgs...)
}

func compact(t *testing.T, c *compactor.Compactor, req compactor.Request) *compactor.Response {
	t.Helper()
	if req.Model == "" {
		req.Model = "gpt-4o"
	}
	resp, err := c.Compact(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Conversation.Validate(); err != nil {
		t.Fatalf("invalid output: %v", err)
	}
	return resp
}

// TestPipelineRunsStagesInOrder runs sliding then deterministic: each
// stage runs on the previous one's result, the stats chain up, and the
// result is what running the two policies one after the other gives.
func TestPipelineRunsStagesInOrder(t *testing.T) {
	c := newCompactor(t, compactor.Options{})
	in := realConversation(t)
	inBytes := in.Encode()
	overrides := map[string]map[string]any{"sliding": {"window_size": 30, "step": 1}}
	resp := compact(t, c, compactor.Request{Conversation: in, Pipeline: []string{"sliding", "deterministic"}, Overrides: overrides})
	if !bytes.Equal(inBytes, in.Encode()) {
		t.Fatal("the input changed")
	}
	st := resp.Stats
	if len(st.Stages) != 2 || st.Stages[0].Policy != "sliding" || st.Stages[1].Policy != "deterministic" {
		t.Fatalf("stages %+v", st.Stages)
	}
	for _, s := range st.Stages {
		if !s.Compacted || s.Version == "" || s.Path == "" || s.Duration <= 0 || s.Error != "" || s.Skipped != "" {
			t.Errorf("stage %+v", s)
		}
		if s.TokensAfter >= s.TokensBefore || s.MessagesAfter >= s.MessagesBefore || len(s.Dropped) == 0 || s.EntriesSummarized == 0 {
			t.Errorf("%s: %d → %d tokens, %d → %d messages, dropped %d", s.Policy, s.TokensBefore, s.TokensAfter, s.MessagesBefore, s.MessagesAfter, len(s.Dropped))
		}
	}
	first, second := st.Stages[0], st.Stages[1]
	if first.TokensBefore != st.TokensBefore || first.MessagesBefore != in.Len() ||
		second.TokensBefore != first.TokensAfter || second.MessagesBefore != first.MessagesAfter ||
		st.TokensAfter != second.TokensAfter || st.MessagesAfter != resp.Conversation.Len() {
		t.Fatalf("stats do not chain: %+v", st)
	}
	if want := counter.ForModel("gpt-4o").CountMessages(resp.Conversation.Messages); st.TokensAfter != want {
		t.Fatalf("tokens after %d, counted %d", st.TokensAfter, want)
	}
	if !resp.Compacted || !strings.Contains(resp.Summary, "sliding: ") || !strings.Contains(resp.Summary, "; deterministic: Previous ") {
		t.Fatalf("summary %q", resp.Summary)
	}
	// Origin names, through both stages, the input message each kept one is.
	if len(resp.Origin) != resp.Conversation.Len() {
		t.Fatalf("%d origins for %d messages", len(resp.Origin), resp.Conversation.Len())
	}
	kept, last := 0, -1
	for i, src := range resp.Origin {
		if src < 0 {
			continue
		}
		if src <= last || !bytes.Equal(resp.Conversation.Raw[i], in.Raw[src]) {
			t.Fatalf("output %d: source %d (after %d) is not that input message", i, src, last)
		}
		kept, last = kept+1, src
	}
	if kept == 0 || kept == resp.Conversation.Len() || resp.Origin[len(resp.Origin)-1] != in.Len()-1 {
		t.Fatalf("origin %v", resp.Origin)
	}

	// The same two policies, one request each.
	one := compact(t, c, compactor.Request{Conversation: realConversation(t), Pipeline: []string{"sliding"}, Overrides: overrides})
	if one.Stats.TokensAfter != first.TokensAfter || fmt.Sprint(one.Stats.Stages[0].Dropped) != fmt.Sprint(first.Dropped) {
		t.Fatalf("sliding alone: %+v, in the pipeline %+v", one.Stats.Stages[0], first)
	}
	two := compact(t, c, compactor.Request{Conversation: one.Conversation, Pipeline: []string{"deterministic"}})
	if !bytes.Equal(two.Conversation.Encode(), resp.Conversation.Encode()) {
		t.Fatal("the pipeline's result differs from running its stages one after the other")
	}

	// The other order gives another conversation.
	rev := compact(t, c, compactor.Request{Conversation: realConversation(t), Pipeline: []string{"deterministic", "sliding"}, Overrides: overrides})
	if bytes.Equal(rev.Conversation.Encode(), resp.Conversation.Encode()) {
		t.Fatal("the stage order made no difference")
	}
}

func TestTargetTokensStopsEarly(t *testing.T) {
	c := newCompactor(t, compactor.Options{})
	full := compact(t, c, compactor.Request{Conversation: realConversation(t), Pipeline: []string{"sliding", "deterministic"}})
	before, afterFirst := full.Stats.TokensBefore, full.Stats.Stages[0].TokensAfter
	tests := []struct {
		name   string
		target int
		ran    string // stages that ran: "rr", "rs", "ss"
	}{
		{"no target: every stage runs", 0, "rr"},
		{"the input fits: nothing runs", before, "ss"},
		{"fits after the first stage", afterFirst, "rs"},
		{"still too big after the first stage", afterFirst - 1, "rr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := realConversation(t)
			resp := compact(t, c, compactor.Request{Conversation: in, Pipeline: []string{"sliding", "deterministic"}, TargetTokens: tt.target})
			var ran string
			for _, s := range resp.Stats.Stages {
				if s.Skipped != "" {
					ran += "s"
					if !strings.Contains(s.Skipped, fmt.Sprint(tt.target)) || s.TokensAfter != s.TokensBefore || s.Compacted {
						t.Errorf("skipped stage %+v", s)
					}
				} else {
					ran += "r"
				}
			}
			if ran != tt.ran {
				t.Fatalf("stages %s, want %s", ran, tt.ran)
			}
			if tt.ran == "ss" && (resp.Compacted || !bytes.Equal(resp.Conversation.Encode(), in.Encode())) {
				t.Fatal("nothing ran but the conversation changed")
			}
		})
	}
}

// TestFailedStageKeepsPreviousResult: a stage that traps is skipped with a
// warning; the next stage runs on the result before it.
func TestFailedStageKeepsPreviousResult(t *testing.T) {
	c := newCompactor(t, compactor.Options{})
	resp := compact(t, c, compactor.Request{Conversation: realConversation(t), Pipeline: []string{"sliding", "hostile-trap", "deterministic"},
		Overrides: map[string]map[string]any{"sliding": {"window_size": 20, "step": 1}}})
	s := resp.Stats.Stages
	if len(s) != 3 || s[1].Error == "" || s[1].Compacted || s[1].TokensAfter != s[1].TokensBefore || s[1].MessagesAfter != s[1].MessagesBefore {
		t.Fatalf("stages %+v", s)
	}
	if s[1].TokensBefore != s[0].TokensAfter || s[2].TokensBefore != s[0].TokensAfter || !s[0].Compacted || !s[2].Compacted {
		t.Fatalf("the stage after the failure did not run on the result before it: %+v", s)
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "hostile-trap") || !strings.Contains(resp.Warnings[0], "input kept unchanged") {
		t.Fatalf("warnings %q", resp.Warnings)
	}
	if strings.Contains(resp.Summary, "hostile") || !resp.Compacted {
		t.Fatalf("summary %q", resp.Summary)
	}

	// Alone, the failing stage returns the input itself.
	in := realConversation(t)
	alone := compact(t, c, compactor.Request{Conversation: in, Pipeline: []string{"hostile-trap"}})
	if alone.Compacted || len(alone.Warnings) != 1 || !bytes.Equal(alone.Conversation.Encode(), in.Encode()) {
		t.Fatalf("compacted %v, warnings %q", alone.Compacted, alone.Warnings)
	}
}

func TestRequestErrors(t *testing.T) {
	c := newCompactor(t, compactor.Options{})
	conv := recapConversation(t, 3)
	tests := []struct {
		name string
		req  compactor.Request
		want error
	}{
		{"no conversation", compactor.Request{Pipeline: []string{"sliding"}}, compactor.ErrBadRequest},
		{"no policy", compactor.Request{Conversation: conv}, compactor.ErrBadRequest},
		{"unknown policy", compactor.Request{Conversation: conv, Pipeline: []string{"nope"}}, registry.ErrUnknownPolicy},
		{"unknown policy later in the pipeline", compactor.Request{Conversation: conv, Pipeline: []string{"sliding", "nope"}}, registry.ErrUnknownPolicy},
		{"config of the wrong type", compactor.Request{Conversation: conv, Pipeline: []string{"recap"}, Overrides: map[string]map[string]any{"recap": {"batch_size": "four"}}}, policyconfig.ErrInvalid},
		{"config out of range", compactor.Request{Conversation: conv, Pipeline: []string{"sliding", "deterministic"}, Overrides: map[string]map[string]any{"deterministic": {"step": 0}}}, policyconfig.ErrInvalid},
		{"unknown config key", compactor.Request{Conversation: conv, Pipeline: []string{"hierarchical"}, Overrides: map[string]map[string]any{"hierarchical": {"window": 3}}}, policyconfig.ErrInvalid},
		{"config for a policy not in the pipeline", compactor.Request{Conversation: conv, Pipeline: []string{"sliding"}, Overrides: map[string]map[string]any{"recap": {"batch_size": 2}}}, compactor.ErrBadRequest},
		{"invalid conversation", compactor.Request{Conversation: chatOf(t, `{"role":"tool","tool_call_id":"x","content":"orphan"}`), Pipeline: []string{"sliding"}}, chat.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Compact(context.Background(), tt.req)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if resp != nil {
				t.Fatal("a response with the error")
			}
		})
	}
}

// memState is a StateStore in memory that counts its calls.
type memState struct {
	mu           sync.Mutex
	m            map[string]json.RawMessage
	loads, saves int
}

func (s *memState) LoadState(_ context.Context, id, policy string) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	return s.m[id+"/"+policy], nil
}

func (s *memState) SaveState(_ context.Context, id, policy string, state json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves++
	s.m[id+"/"+policy] = append(json.RawMessage(nil), state...)
	return nil
}

// TestStatefulStage grows a conversation turn by turn through the
// hierarchical policy with a state store: its state is loaded and saved
// under the conversation's id, and the results equal the stateless ones.
func TestStatefulStage(t *testing.T) {
	store := &memState{m: map[string]json.RawMessage{}}
	withState := newCompactor(t, compactor.Options{State: store})
	without := newCompactor(t, compactor.Options{})
	full := realConversation(t)
	turns := dataset.TurnPrefixes(full)
	if len(turns) > 40 {
		turns = turns[:40]
	}
	var id string
	for _, n := range turns {
		a := compact(t, withState, compactor.Request{Conversation: dataset.Prefix(full, n), Pipeline: []string{"hierarchical"}})
		b := compact(t, without, compactor.Request{Conversation: dataset.Prefix(full, n), Pipeline: []string{"hierarchical"}})
		if !bytes.Equal(a.Conversation.Encode(), b.Conversation.Encode()) || len(a.Warnings) > 0 || strings.Contains(a.Summary, "recomputed") {
			t.Fatalf("prefix %d: the state changed the result (%s, warnings %q)", n, a.Summary, a.Warnings)
		}
		if id != "" && a.ConversationID != id {
			t.Fatalf("the conversation id changed: %s, %s", id, a.ConversationID)
		}
		id = a.ConversationID
	}
	if store.loads != len(turns) || store.saves < 2 || store.m[id+"/hierarchical"] == nil {
		t.Fatalf("%d loads, %d saves, state %s", store.loads, store.saves, store.m[id+"/hierarchical"])
	}
}

// layers is a ConfigSource: the environment under a config file.
type layers struct {
	getenv func(string) string
	file   map[string]map[string]any
}

func (l layers) Layers(policy string) []policyconfig.Layer {
	var out []policyconfig.Layer
	if env := config.EnvLayer(policy, l.getenv); env != nil {
		out = append(out, *env)
	}
	if v := l.file[policy]; v != nil {
		out = append(out, policyconfig.Layer{Source: "config file", Values: v})
	}
	return out
}

// TestRecapConfigPrecedence: request override > config file > environment
// (LLM_COMPACTION_*) > the plugin's defaults, seen in what recap does.
func TestRecapConfigPrecedence(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	tests := []struct {
		name     string
		env      map[string]string
		file     map[string]any
		override map[string]any
		want     int // assistant messages rewritten to their recap line
	}{
		{"plugin defaults: min 1, batch 8", nil, nil, nil, 8},
		{"environment", map[string]string{"LLM_COMPACTION_BATCH_SIZE": "1", "LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES": "2"}, nil, nil, 7},
		{"environment, Playbooks spelling", map[string]string{"LLM_COMPACTION_ENABLED": "False"}, nil, nil, 0},
		// 7 compactable (9 less the 2 preserved): the environment's batch
		// of 1 would rewrite 7, the file's batch of 2 rewrites 6.
		{"config file over environment", map[string]string{"LLM_COMPACTION_BATCH_SIZE": "1", "LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES": "2"}, map[string]any{"batch_size": 2}, nil, 6},
		{"request over config file", map[string]string{"LLM_COMPACTION_BATCH_SIZE": "1", "LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES": "2"}, map[string]any{"batch_size": 2}, map[string]any{"batch_size": 5}, 5},
		{"request re-enables", map[string]string{"LLM_COMPACTION_ENABLED": "false"}, nil, map[string]any{"enabled": true}, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompactor(t, compactor.Options{Config: layers{getenv: env(tt.env), file: map[string]map[string]any{"recap": tt.file}}})
			req := compactor.Request{Conversation: recapConversation(t, 9), Pipeline: []string{"recap"}}
			if tt.override != nil {
				req.Overrides = map[string]map[string]any{"recap": tt.override}
			}
			resp := compact(t, c, req)
			if got := len(resp.Stats.Stages[0].Rewritten); got != tt.want {
				t.Fatalf("%d recap lines, want %d (%s)", got, tt.want, resp.Summary)
			}
		})
	}

	// A value of the wrong type is an invalid config, not a silent default.
	c := newCompactor(t, compactor.Options{Config: layers{getenv: env(map[string]string{"LLM_COMPACTION_BATCH_SIZE": "four"})}})
	_, err := c.Compact(context.Background(), compactor.Request{Conversation: recapConversation(t, 9), Pipeline: []string{"recap"}})
	if !errors.Is(err, policyconfig.ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
}

// TestSummaryMetadata: the stats carry what each policy reports about its
// work (entries summarized, rewritten indices, its summary) next to the
// indices the host found dropped; the messages carry no extra fields.
func TestSummaryMetadata(t *testing.T) {
	c := newCompactor(t, compactor.Options{})
	in := recapConversation(t, 7) // S, then U1 A1 … U7 A7; U1 is the task, kept
	// recap's earlier defaults (3 preserved, batches of 4): 4 rewritten.
	resp := compact(t, c, compactor.Request{Conversation: in, Pipeline: []string{"recap"},
		Overrides: map[string]map[string]any{"recap": {"min_preserved_assistant_messages": 3, "batch_size": 4}}})
	s := resp.Stats.Stages[0]
	if fmt.Sprint(s.Rewritten) != "[2 4 6 8]" || fmt.Sprint(s.Dropped) != "[2 3 4 5 6 7 8]" || s.EntriesSummarized != 7 || !strings.Contains(s.Summary, "removed 3 user messages") {
		t.Fatalf("stage %+v", s)
	}
	out := string(resp.Conversation.Encode())
	if strings.Contains(out, "tokens") || strings.Contains(out, "ref") || !strings.Contains(out, `{"role":"assistant","content":"recap - did step 1"}`) {
		t.Fatalf("output %s", out)
	}
}

// TestOnlyNewMessagesCounted: after a stage, the messages it kept keep
// their counts and only the ones it wrote are counted (one cache lookup
// each), and every output message's count is its own.
func TestOnlyNewMessagesCounted(t *testing.T) {
	t.Parallel()
	own := tokens.New(tokens.Options{})
	c := compactor.New(compactor.Options{Policies: policies(t), Tokens: own})
	in := realConversation(t)
	resp := compact(t, c, compactor.Request{Conversation: in, Pipeline: []string{"deterministic"}, Model: "gpt-4o"})
	written := 0
	for _, o := range resp.Origin {
		if o < 0 {
			written++
		}
	}
	if !resp.Compacted || written == 0 {
		t.Fatalf("deterministic wrote %d messages (compacted %v): the test needs a new message", written, resp.Compacted)
	}
	st := own.Stats()
	if got, want := st.Hits+st.Misses, uint64(in.Len()+written); got != want {
		t.Errorf("%d messages counted, want the %d input messages and the %d new ones", got, in.Len(), written)
	}
	fresh := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	sum := 0
	for i := range resp.Conversation.Messages {
		m := resp.Conversation.Messages[i]
		if want := fresh.CountMessage(&m); m.Tokens != want {
			t.Fatalf("message %d (origin %d): %d tokens, counted %d", i, resp.Origin[i], m.Tokens, want)
		}
		sum += m.Tokens
	}
	if resp.Stats.TokensAfter != sum {
		t.Errorf("tokens after %d, the messages hold %d", resp.Stats.TokensAfter, sum)
	}
}
