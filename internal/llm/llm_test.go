package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/abi"
	tokenusage "github.com/compactd/compactd/internal/usage"
	"github.com/hashicorp/go-hclog"
)

func TestOpenAIRequestAndResponse(t *testing.T) {
	f := newFake(t, KindOpenAI, reply{body: (&fakeProvider{kind: KindOpenAI}).success("<summary>ok</summary>", "gpt-4o-mini-2024-07-18", 5012, 380)})
	c, _ := f.client(t, nil)
	req := request("long history")
	req.Stop = []string{"</summary>"}
	resp, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := abi.LLMResponse{Text: "<summary>ok</summary>", Model: "gpt-4o-mini-2024-07-18", Usage: abi.LLMUsage{InputTokens: 5012, OutputTokens: 380}}
	if resp != want {
		t.Fatalf("response = %+v\nwant %+v", resp, want)
	}
	got := f.requests()[0]
	if got.method != http.MethodPost || got.path != "/v1/chat/completions" {
		t.Fatalf("%s %s, want POST /v1/chat/completions", got.method, got.path)
	}
	if h := got.header.Get("Authorization"); h != "Bearer "+testKey {
		t.Fatalf("Authorization = %q", h)
	}
	if got.header.Get("x-api-key") != "" || got.header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers = %v", got.header)
	}
	b := got.body
	if b["model"] != "summarizer-1" || b["max_tokens"] != 500.0 || b["temperature"] != 0.0 {
		t.Fatalf("body = %s", got.raw)
	}
	msgs := b["messages"].([]any)
	if len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" || msgs[1].(map[string]any)["content"] != "long history" {
		t.Fatalf("messages = %v", msgs)
	}
	if stop := b["stop"].([]any); len(stop) != 1 || stop[0] != "</summary>" {
		t.Fatalf("stop = %v", b["stop"])
	}
}

func TestAnthropicRequestAndResponse(t *testing.T) {
	body := `{"id":"msg_01","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022",
	  "content":[{"type":"text","text":"<summary>part one"},{"type":"text","text":" and two</summary>"}],
	  "stop_reason":"end_turn","stop_sequence":null,
	  "usage":{"input_tokens":2095,"output_tokens":503,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`
	f := newFake(t, KindAnthropic, reply{body: body})
	c, _ := f.client(t, nil)
	req := abi.LLMRequest{
		Model: "claude-3-5-haiku-latest",
		Messages: []abi.LLMMessage{
			{Role: abi.RoleSystem, Content: "You summarize."},
			{Role: abi.RoleDeveloper, Content: "Be terse."},
			{Role: abi.RoleUser, Content: "part A"},
			{Role: abi.RoleUser, Content: "part B"},
			{Role: abi.RoleAssistant, Content: "<summary>"},
		},
		Temperature: 0.2,
		Stop:        []string{"</summary>"},
	}
	resp, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "<summary>part one and two</summary>" || resp.Usage != (abi.LLMUsage{InputTokens: 2095, OutputTokens: 503}) || resp.Model != "claude-3-5-haiku-20241022" {
		t.Fatalf("response = %+v", resp)
	}
	got := f.requests()[0]
	if got.path != "/v1/messages" {
		t.Fatalf("path %s", got.path)
	}
	if got.header.Get("x-api-key") != testKey || got.header.Get("anthropic-version") != "2023-06-01" || got.header.Get("Authorization") != "" {
		t.Fatalf("headers = %v", got.header)
	}
	b := got.body
	if b["system"] != "You summarize.\n\nBe terse." {
		t.Fatalf("system = %q", b["system"])
	}
	if b["max_tokens"] != float64(DefaultMaxTokens) || b["temperature"] != 0.2 || b["model"] != "claude-3-5-haiku-latest" {
		t.Fatalf("body = %s", got.raw)
	}
	msgs := b["messages"].([]any)
	if len(msgs) != 2 {
		t.Fatalf("messages = %v (system must not be a message; consecutive user turns joined)", msgs)
	}
	if m := msgs[0].(map[string]any); m["role"] != "user" || m["content"] != "part A\n\npart B" {
		t.Fatalf("first message = %v", m)
	}
	if m := msgs[1].(map[string]any); m["role"] != "assistant" {
		t.Fatalf("second message = %v", m)
	}
	if stop := b["stop_sequences"].([]any); len(stop) != 1 {
		t.Fatalf("stop_sequences = %v", b["stop_sequences"])
	}
	if _, ok := b["stop"]; ok {
		t.Fatal("anthropic request carries an openai field")
	}
}

// TestModelReachesTheWire checks that the model a policy names is the one
// sent (the llms extension silently sent the agent's), and that the
// configured model is used only when the request names none.
func TestModelReachesTheWire(t *testing.T) {
	for _, kind := range kinds() {
		t.Run(kind, func(t *testing.T) {
			f := newFake(t, kind)
			c, _ := f.client(t, func(cfg *Config) { cfg.Model = "configured-default" })
			req := request("a")
			req.Model = "policy-summarizer"
			if _, err := c.Complete(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			req = request("b")
			req.Model = ""
			resp, err := c.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got := f.requests()
			if got[0].body["model"] != "policy-summarizer" || got[1].body["model"] != "configured-default" {
				t.Fatalf("models on the wire: %v, %v", got[0].body["model"], got[1].body["model"])
			}
			if resp.Model != "configured-default" {
				t.Fatalf("response model %q", resp.Model)
			}

			c2, _ := f.client(t, func(cfg *Config) { cfg.Model = "" })
			_, err = c2.Complete(context.Background(), req)
			if !errors.Is(err, ErrNoModel) {
				t.Fatalf("err = %v, want ErrNoModel", err)
			}
			if n := len(f.requests()); n != 2 {
				t.Fatalf("a request without a model reached the provider (%d requests)", n)
			}
		})
	}
}

func TestFailures(t *testing.T) {
	type tc struct {
		name     string
		replies  func(f *fakeProvider) []reply
		mod      func(*Config)
		wantErr  error  // nil: success
		wantText string // on success
		calls    int    // HTTP requests the server sees
		slept    []time.Duration
		contains string // in the error message
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []tc{
		{
			name: "429 with Retry-After seconds, then success",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 429, header: map[string]string{"Retry-After": "2"}, body: f.errorBody("rate_limit_error", "slow down")}, {}}
			},
			calls: 2, slept: []time.Duration{2 * time.Second}, wantText: "summary of x",
		},
		{
			name: "429 with Retry-After as an HTTP date",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 429, header: map[string]string{"Retry-After": now.Add(7 * time.Second).Format(http.TimeFormat)}}, {}}
			},
			calls: 2, slept: []time.Duration{7 * time.Second}, wantText: "summary of x",
		},
		{
			name: "retry-after-ms wins over Retry-After",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 429, header: map[string]string{"retry-after-ms": "250", "Retry-After": "1"}}, {}}
			},
			calls: 2, slept: []time.Duration{250 * time.Millisecond}, wantText: "summary of x",
		},
		{
			name: "500 then success, exponential backoff",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 500, body: f.errorBody("api_error", "boom")}, {status: 502, body: "<html>bad gateway</html>"}, {}}
			},
			calls: 3, slept: []time.Duration{backoffBase, 2 * backoffBase}, wantText: "summary of x",
		},
		{
			name: "529 overloaded is retried",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 529, body: f.errorBody("overloaded_error", "Overloaded")}, {}}
			},
			calls: 2, slept: []time.Duration{backoffBase}, wantText: "summary of x",
		},
		{
			name: "5xx until retries run out",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 503, body: f.errorBody("overloaded_error", "try later")}}
			},
			wantErr: ErrUnavailable, calls: 3, slept: []time.Duration{backoffBase, 2 * backoffBase}, contains: "try later (after 3 attempts)",
		},
		{
			name: "no retries when max_retries is negative",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 500, body: f.errorBody("api_error", "boom")}}
			},
			mod:     func(c *Config) { c.MaxRetries = -1 },
			wantErr: ErrStatus, calls: 1,
		},
		{
			name: "Retry-After beyond max_retry_wait fails at once",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 429, header: map[string]string{"Retry-After": "600"}, body: f.errorBody("rate_limit_error", "quota")}}
			},
			wantErr: ErrRateLimited, calls: 1, contains: "more than llm.max_retry_wait",
		},
		{
			name: "x-should-retry false is honored",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 500, header: map[string]string{"x-should-retry": "false"}}}
			},
			wantErr: ErrStatus, calls: 1,
		},
		{
			name: "401 error body: not retried, provider's message kept",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 401, body: f.errorBody("authentication_error", "invalid x-api-key")}}
			},
			wantErr: ErrStatus, calls: 1, contains: "HTTP 401 authentication_error: invalid x-api-key",
		},
		{
			name: "400 with a body that is not JSON",
			replies: func(f *fakeProvider) []reply {
				return []reply{{status: 400, body: "Bad Request"}}
			},
			wantErr: ErrStatus, calls: 1, contains: "HTTP 400: Bad Request",
		},
		{
			name:    "malformed JSON",
			replies: func(f *fakeProvider) []reply { return []reply{{body: `{"choices": [`}} },
			wantErr: ErrBadResponse, calls: 1,
		},
		{
			name: "empty completion",
			replies: func(f *fakeProvider) []reply {
				if f.kind == KindAnthropic {
					return []reply{{body: `{"type":"message","role":"assistant","content":[],"stop_reason":"max_tokens","usage":{"input_tokens":10,"output_tokens":0}}`}}
				}
				return []reply{{body: `{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":0}}`}}
			},
			wantErr: ErrEmptyCompletion, calls: 1,
		},
		{
			name: "null or blank content",
			replies: func(f *fakeProvider) []reply {
				if f.kind == KindAnthropic {
					return []reply{{body: `{"type":"message","content":[{"type":"text","text":"  "}],"usage":{"input_tokens":1,"output_tokens":1}}`}}
				}
				return []reply{{body: `{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"length"}]}`}}
			},
			wantErr: ErrEmptyCompletion, calls: 1,
		},
		{
			name: "an error object in a 200 answer",
			replies: func(f *fakeProvider) []reply {
				return []reply{{body: f.errorBody("server_error", "upstream failed")}}
			},
			wantErr: ErrStatus, calls: 1, contains: "upstream failed",
		},
		{
			name: "timeout, then success",
			replies: func(f *fakeProvider) []reply {
				return []reply{{delay: 5 * time.Second}, {}}
			},
			mod:   func(c *Config) { c.Timeout = 100 * time.Millisecond },
			calls: 2, slept: []time.Duration{backoffBase}, wantText: "summary of x",
		},
		{
			name:    "every attempt times out",
			replies: func(f *fakeProvider) []reply { return []reply{{delay: 5 * time.Second}} },
			mod:     func(c *Config) { c.Timeout = 50 * time.Millisecond; c.MaxRetries = 1 },
			wantErr: ErrTimeout, calls: 2, slept: []time.Duration{backoffBase}, contains: "no answer within llm.timeout",
		},
	}
	for _, kind := range kinds() {
		for _, tt := range tests {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				f := newFake(t, kind)
				f.replies = tt.replies(f)
				c, slept := f.client(t, tt.mod)
				c.now = func() time.Time { return now }
				resp, err := c.Complete(context.Background(), request("x"))
				if n := len(f.requests()); n != tt.calls {
					t.Errorf("server saw %d requests, want %d", n, tt.calls)
				}
				if fmt.Sprint(*slept) != fmt.Sprint(tt.slept) {
					t.Errorf("slept %v, want %v", *slept, tt.slept)
				}
				if tt.wantErr == nil {
					if err != nil || resp.Text != tt.wantText {
						t.Fatalf("got %+v, %v; want %q", resp, err, tt.wantText)
					}
					return
				}
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if tt.contains != "" && !contains(err.Error(), tt.contains) {
					t.Fatalf("error %q does not contain %q", err, tt.contains)
				}
				var ae *abi.Error
				if !errors.As(err, &ae) || ae.Code != abi.CodeProviderError {
					t.Fatalf("as abi.Error: %+v", ae)
				}
				if contains(err.Error(), testKey) {
					t.Fatal("the API key is in an error message")
				}
				if st := c.Stats(); st.Failures != 1 || st.Calls != 1 || st.Attempts != int64(tt.calls) {
					t.Fatalf("stats = %+v", st)
				}
			})
		}
	}
}

// TestContextEndsDuringRetryWait: a retry the caller's deadline leaves
// no time for is not waited for. The Retry-After (29 s, inside
// max_retry_wait) is past the deadline (20 s), so the client gives up at
// once; the test
// asserts that it returned before the deadline, not how soon, which a
// busy machine stretches.
func TestContextEndsDuringRetryWait(t *testing.T) {
	f := newFake(t, KindOpenAI, reply{status: 429, header: map[string]string{"Retry-After": "29"}})
	c, _ := f.client(t, nil)
	c.sleep = sleepCtx
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.Complete(ctx, request("x"))
	if !errors.Is(err, ErrRateLimited) || !contains(err.Error(), "no time left to retry") {
		t.Fatalf("err = %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("waited until the deadline for a retry that could not finish before it")
	}
}

func TestCache(t *testing.T) {
	for _, kind := range kinds() {
		t.Run(kind, func(t *testing.T) {
			f := newFake(t, kind)
			c, _ := f.client(t, nil)
			ctx := context.Background()
			first, err := c.Complete(ctx, request("history"))
			if err != nil || first.Cached {
				t.Fatalf("first: %+v %v", first, err)
			}
			second, err := c.Complete(ctx, request("history"))
			if err != nil || !second.Cached || second.Text != first.Text || second.Usage != first.Usage {
				t.Fatalf("second: %+v %v", second, err)
			}
			if n := len(f.requests()); n != 1 {
				t.Fatalf("%d provider calls for two identical requests", n)
			}
			// Anything that changes the answer misses.
			variants := []func(*abi.LLMRequest){
				func(r *abi.LLMRequest) { r.Model = "other" },
				func(r *abi.LLMRequest) { r.MaxTokens = 501 },
				func(r *abi.LLMRequest) { r.Temperature = 0.5 },
				func(r *abi.LLMRequest) { r.Stop = []string{"x"} },
				func(r *abi.LLMRequest) { r.Messages[0].Content += " " },
				func(r *abi.LLMRequest) { r.Messages[1].Role = abi.RoleAssistant },
			}
			for i, v := range variants {
				r := request("history")
				v(&r)
				resp, err := c.Complete(ctx, r)
				if err != nil || resp.Cached {
					t.Fatalf("variant %d: %+v %v", i, resp, err)
				}
			}
			st := c.Stats()
			if st.CacheHits != 1 || st.CacheMisses != int64(1+len(variants)) || st.Calls != int64(1+len(variants)) || st.Requests != int64(2+len(variants)) {
				t.Fatalf("stats = %+v", st)
			}
			if st.InputTokens != 120*int64(st.Calls) || st.OutputTokens != 30*int64(st.Calls) {
				t.Fatalf("token stats = %+v", st)
			}
		})
	}
}

func TestCacheKeyCoversEndpointAndKind(t *testing.T) {
	r := request("x")
	keys := map[string]string{}
	for _, k := range []struct{ kind, url, model string }{
		{KindOpenAI, "http://a", "m"}, {KindAnthropic, "http://a", "m"}, {KindOpenAI, "http://b", "m"}, {KindOpenAI, "http://a", "n"},
	} {
		key := CacheKey(k.kind, k.url, k.model, r)
		if len(key) != 64 {
			t.Fatalf("key %q", key)
		}
		if prev, dup := keys[key]; dup {
			t.Fatalf("%v and %s share a key", k, prev)
		}
		keys[key] = fmt.Sprint(k)
	}
	// Length prefixes: moving bytes between fields changes the key.
	a := abi.LLMRequest{Messages: []abi.LLMMessage{{Role: "user", Content: "ab"}, {Role: "user", Content: "c"}}}
	b := abi.LLMRequest{Messages: []abi.LLMMessage{{Role: "user", Content: "a"}, {Role: "user", Content: "bc"}}}
	if CacheKey("openai", "u", "m", a) == CacheKey("openai", "u", "m", b) {
		t.Fatal("ambiguous key")
	}
	if k1, k2 := CacheKey("openai", "u", "m", a), CacheKey("openai", "u", "m", a); k1 != k2 {
		t.Fatal("unstable key")
	}
}

// failingCache fails every operation.
type failingCache struct{}

func (failingCache) Get(context.Context, string) ([]byte, bool, error) {
	return nil, false, errors.New("disk gone")
}
func (failingCache) Put(context.Context, string, []byte) error { return errors.New("disk gone") }

func TestBrokenCacheNeverFailsACall(t *testing.T) {
	f := newFake(t, KindOpenAI)
	c, _ := f.client(t, nil, WithCache(failingCache{}))
	for i := 0; i < 2; i++ {
		if _, err := c.Complete(context.Background(), request("x")); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.CacheErrors != 4 || st.Calls != 2 {
		t.Fatalf("stats = %+v", st)
	}
	// An unreadable entry is a miss, then overwritten.
	mc := NewMemoryCache(1 << 20)
	c2, _ := f.client(t, nil, WithCache(mc))
	key := CacheKey(KindOpenAI, f.baseURL(), "summarizer-1", request("y"))
	_ = mc.Put(context.Background(), key, []byte("garbage"))
	if resp, err := c2.Complete(context.Background(), request("y")); err != nil || resp.Cached {
		t.Fatalf("%+v %v", resp, err)
	}
	if resp, err := c2.Complete(context.Background(), request("y")); err != nil || !resp.Cached {
		t.Fatalf("%+v %v", resp, err)
	}
}

func TestNoCache(t *testing.T) {
	f := newFake(t, KindOpenAI)
	c, _ := f.client(t, func(cfg *Config) { cfg.CacheMaxBytes = -1 })
	for i := 0; i < 3; i++ {
		if resp, err := c.Complete(context.Background(), request("x")); err != nil || resp.Cached {
			t.Fatalf("%+v %v", resp, err)
		}
	}
	if n := len(f.requests()); n != 3 {
		t.Fatalf("%d calls", n)
	}
}

func TestMemoryCacheEvictsLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	val := bytes.Repeat([]byte("v"), 100)
	per := entryCost("k0", val)
	c := NewMemoryCache(3 * per)
	for i := 0; i < 3; i++ {
		_ = c.Put(ctx, fmt.Sprintf("k%d", i), val)
	}
	if _, ok, _ := c.Get(ctx, "k0"); !ok { // k0 is now the most recent
		t.Fatal("k0 missing")
	}
	_ = c.Put(ctx, "k3", val) // evicts k1
	for key, want := range map[string]bool{"k0": true, "k1": false, "k2": true, "k3": true} {
		if _, ok, _ := c.Get(ctx, key); ok != want {
			t.Errorf("%s present = %v, want %v", key, ok, want)
		}
	}
	if c.Len() != 3 || c.Bytes() != 3*per {
		t.Fatalf("len %d bytes %d", c.Len(), c.Bytes())
	}
	_ = c.Put(ctx, "k2", val[:10]) // replacing adjusts the size
	if c.Bytes() != 2*per+entryCost("k2", val[:10]) {
		t.Fatalf("bytes %d after replace", c.Bytes())
	}
	_ = c.Put(ctx, "huge", bytes.Repeat([]byte("x"), int(4*per)))
	if _, ok, _ := c.Get(ctx, "huge"); ok || c.Len() != 3 {
		t.Fatal("an entry larger than the cache was stored")
	}
	// Values are copied in and out.
	got, _, _ := c.Get(ctx, "k0")
	got[0] = 'X'
	if again, _, _ := c.Get(ctx, "k0"); again[0] != 'v' {
		t.Fatal("Get returned the cache's own slice")
	}
}

func TestBudget(t *testing.T) {
	f := newFake(t, KindAnthropic)
	c, _ := f.client(t, func(cfg *Config) { cfg.Budget = Limits{MaxCalls: 2, MaxTokens: -1} })
	ctx := context.Background()
	b := c.Budgeted()
	for i := 0; i < 2; i++ {
		if _, err := b.Complete(ctx, request(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// A cached answer is free, even with the budget spent.
	if resp, err := b.Complete(ctx, request("0")); err != nil || !resp.Cached {
		t.Fatalf("%+v %v", resp, err)
	}
	_, err := b.Complete(ctx, request("new"))
	var ae *abi.Error
	if !errors.Is(err, ErrBudgetExceeded) || !errors.As(err, &ae) || ae.Code != abi.CodeBudgetExceeded {
		t.Fatalf("err = %v (%+v)", err, ae)
	}
	if calls, tokens := b.Spent(); calls != 2 || tokens != 300 {
		t.Fatalf("spent %d calls %d tokens", calls, tokens)
	}
	if n := len(f.requests()); n != 2 {
		t.Fatalf("%d provider calls", n)
	}
	// A new request gets a new budget; the unbudgeted Complete has none.
	if _, err := c.Budgeted().Complete(ctx, request("new")); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.BudgetExceeded != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestBudgetTokens(t *testing.T) {
	f := newFake(t, KindOpenAI)
	c, _ := f.client(t, func(cfg *Config) { cfg.Budget = Limits{MaxCalls: -1, MaxTokens: 1000} })
	b := c.Budgeted()
	ctx := context.Background()
	// Estimate: 2 messages (~4+4 tokens of text, +4 each) + max_tokens 500 = 517.
	if _, err := b.Complete(ctx, request("a")); err != nil {
		t.Fatal(err)
	}
	// Settled at the real usage (150), so a second call still fits.
	if _, tokens := b.Spent(); tokens != 150 {
		t.Fatalf("spent %d", tokens)
	}
	if _, err := b.Complete(ctx, request("b")); err != nil {
		t.Fatal(err)
	}
	// 300 spent + ~517 estimated > 1000? No: 817. A third fits too; a big
	// one does not.
	big := request(string(bytes.Repeat([]byte("x"), 4000)))
	if _, err := b.Complete(ctx, big); !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.requests()); n != 2 {
		t.Fatalf("%d provider calls", n)
	}
}

// TestLyingUsage: a provider's usage counts outside 0 to 2^53 (negative,
// huge, fractional) are not believed: the call is estimated, so a budget
// is neither refunded nor overflowed by them, and the stats stay sane.
func TestLyingUsage(t *testing.T) {
	for _, kind := range []string{KindOpenAI, KindAnthropic} {
		for _, lie := range []string{"-1000000", "9223372036854775807", "1.5"} {
			t.Run(kind+"/"+lie, func(t *testing.T) {
				body := `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":` + lie + `,"completion_tokens":` + lie + `}}`
				if kind == KindAnthropic {
					body = `{"type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":` + lie + `,"cache_read_input_tokens":` + lie + `,"output_tokens":` + lie + `}}`
				}
				f := newFake(t, kind, reply{body: body})
				c, _ := f.client(t, func(cfg *Config) { cfg.Budget = Limits{MaxCalls: -1, MaxTokens: 100000} })
				b := c.Budgeted()
				resp, err := b.Complete(context.Background(), request("a"))
				if err != nil {
					t.Fatal(err)
				}
				_, spent := b.Spent()
				if u := resp.Usage; u.InputTokens <= 0 || u.InputTokens > tokenusage.Max || u.OutputTokens <= 0 || u.OutputTokens > tokenusage.Max || spent != u.InputTokens+u.OutputTokens {
					t.Fatalf("usage %+v, %d tokens spent", u, spent)
				}
				if st := c.Stats(); st.InputTokens <= 0 || st.OutputTokens <= 0 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	}
}

func TestConcurrencyCap(t *testing.T) {
	var inFlight, peak atomic.Int64
	f := newFake(t, KindOpenAI)
	f.replies = []reply{{handler: func(w http.ResponseWriter, r *http.Request, body []byte) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		inFlight.Add(-1)
		_, _ = w.Write([]byte(f.success("ok", "m", 1, 1)))
	}}}
	c, _ := f.client(t, func(cfg *Config) { cfg.Concurrency = 2 })
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Complete(context.Background(), request(fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 2 || p < 1 {
		t.Fatalf("peak concurrency %d, cap 2", p)
	}
}

func TestIdenticalCallsInFlightShareOneProviderCall(t *testing.T) {
	release := make(chan struct{})
	f := newFake(t, KindOpenAI)
	f.replies = []reply{{handler: func(w http.ResponseWriter, r *http.Request, body []byte) {
		<-release
		_, _ = w.Write([]byte(f.success("shared", "m", 10, 5)))
	}}}
	c, _ := f.client(t, nil)
	const n = 5
	var wg sync.WaitGroup
	results := make([]abi.LLMResponse, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Complete(context.Background(), request("same"))
			if err != nil {
				t.Error(err)
			}
			results[i] = resp
		}()
	}
	// The first call is at the provider; the others wait for it.
	for waiting := 0; waiting < n-1; {
		time.Sleep(time.Millisecond)
		c.flightMu.Lock()
		waiting = 0
		for _, fc := range c.flight {
			waiting += fc.waiters
		}
		c.flightMu.Unlock()
	}
	close(release)
	wg.Wait()
	if got := len(f.requests()); got != 1 {
		t.Fatalf("%d provider calls", got)
	}
	fresh := 0
	for _, r := range results {
		if r.Text != "shared" {
			t.Fatalf("result %+v", r)
		}
		if !r.Cached {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d answers not marked cached, want 1", fresh)
	}
}

func TestKeyNeverLogged(t *testing.T) {
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})
	f := newFake(t, KindOpenAI)
	f.replies = []reply{{status: 401, body: f.errorBody("invalid_api_key", "Incorrect API key provided")}}
	c, _ := f.client(t, nil, WithLogger(logger))
	_, err := c.Complete(context.Background(), request("x"))
	if err == nil {
		t.Fatal("want an error")
	}
	if contains(logs.String(), testKey) || contains(err.Error(), testKey) || contains(fmt.Sprintf("%+v %#v", c.Config(), c.Config()), testKey) {
		t.Fatal("the API key leaked into logs, errors or the config")
	}
	if !contains(logs.String(), "Incorrect API key provided") {
		t.Fatalf("failure not logged: %s", logs.String())
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"none", nil, 0},
		{"seconds", map[string]string{"Retry-After": "3"}, 3 * time.Second},
		{"fractional seconds", map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{"http date", map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second},
		{"date in the past", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0},
		{"negative", map[string]string{"Retry-After": "-4"}, 0},
		{"milliseconds", map[string]string{"retry-after-ms": "1500"}, 1500 * time.Millisecond},
		{"bad milliseconds fall back", map[string]string{"retry-after-ms": "x", "Retry-After": "2"}, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if got := retryAfter(h, now); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInvalidRequests(t *testing.T) {
	f := newFake(t, KindOpenAI)
	c, _ := f.client(t, nil)
	_, err := c.Complete(context.Background(), abi.LLMRequest{Model: "m"})
	var ae *abi.Error
	if !errors.Is(err, ErrInvalidRequest) || !errors.As(err, &ae) || ae.Code != abi.CodeInvalidRequest {
		t.Fatalf("err = %v", err)
	}
	if len(f.requests()) != 0 {
		t.Fatal("an invalid request reached the provider")
	}
}

func TestBackoffIsJittered(t *testing.T) {
	c, err := New(Config{Provider: KindOpenAI}, WithGetenv(func(string) string { return "" }))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		d := c.jitter(time.Second)
		if d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("jitter %v outside [d/2, d]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct waits: not jittered", len(seen))
	}
}
