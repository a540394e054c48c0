// Package llm answers compactd's llm_complete host function with a real
// provider: an OpenAI-compatible Chat Completions endpoint (OpenAI,
// OpenRouter, vLLM, llama.cpp's server, Ollama) or Anthropic's Messages
// API.
//
// A Client wraps the HTTP call with what a daemon needs: retries with
// exponential backoff and jitter on 408/409/429/5xx, timeouts and
// connection errors (honoring Retry-After); a cap on calls in flight
// across the daemon; a content-addressed cache of completions, so a
// conversation replayed turn by turn is summarized once per new span;
// per-request budgets (Budgeted), so a runaway plugin cannot burn money;
// and counters for /metrics (Stats).
//
// The daemon makes one Client from its config file's `llm:` key and hands
// compactor.Options.NewLLM a function returning client.Budgeted(), one
// budget per compaction request.
package llm

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/host"
	"github.com/hashicorp/go-hclog"
)

// maxResponseBody bounds a provider response read into memory.
const maxResponseBody = 16 << 20

// Backoff between attempts when the provider gives no Retry-After: the
// n-th retry waits a random duration in [d/2, d], d = min(backoffBase *
// 2^(n-1), backoffMax).
const (
	backoffBase = 500 * time.Millisecond
	backoffMax  = 8 * time.Second
)

// provider is one wire format.
type provider interface {
	kind() string
	newRequest(ctx context.Context, baseURL, key, model string, req abi.LLMRequest) (*http.Request, error)
	// parse reads a 2xx body. usage is nil when the body has none.
	parse(body []byte) (text, model string, usage *abi.LLMUsage, err *Error)
	// parseError reads an error body's type and message.
	parseError(body []byte) (typ, msg string)
}

// Client sends completions to the configured provider. It implements
// host.Completer and is safe for concurrent use; it owns no goroutines,
// so it needs no Close.
type Client struct {
	cfg    Config
	prov   provider
	key    string // the API key; never logged, never in an error
	http   *http.Client
	cache  Cache
	logger hclog.Logger
	sem    chan struct{}

	flightMu sync.Mutex
	flight   map[string]*flightCall

	// Test hooks.
	sleep  func(ctx context.Context, d time.Duration) error
	now    func() time.Time
	jitter func(d time.Duration) time.Duration

	stats counters
}

var (
	_ host.Completer = (*Client)(nil)
	_ host.Completer = (*Budget)(nil)
)

// Option configures New.
type Option func(*options)

type options struct {
	http     *http.Client
	cache    Cache
	cacheSet bool
	getenv   func(string) string
	logger   hclog.Logger
}

// WithHTTPClient makes the Client send requests with hc. Its Timeout
// should be zero: Config.Timeout bounds each attempt.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.http = hc } }

// WithCache replaces the in-memory cache New would create (e.g. with the
// daemon's persistent store). nil disables caching.
func WithCache(c Cache) Option {
	return func(o *options) { o.cache, o.cacheSet = c, true }
}

// WithGetenv replaces os.Getenv for reading the API key.
func WithGetenv(getenv func(string) string) Option { return func(o *options) { o.getenv = getenv } }

// WithLogger sets the logger (default: none).
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// New returns a Client for cfg (defaults applied, then validated). It
// reads the API key from the environment variable cfg.APIKeyEnv names.
func New(cfg Config, opts ...Option) (*Client, error) {
	explicitKeyEnv := cfg.APIKeyEnv != ""
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{getenv: os.Getenv}
	for _, opt := range opts {
		opt(&o)
	}
	key := strings.TrimSpace(o.getenv(cfg.APIKeyEnv))
	if key == "" && (explicitKeyEnv || cfg.Provider == KindAnthropic) {
		return nil, &Error{Kind: ErrNoAPIKey, Provider: cfg.Provider, Message: "environment variable " + cfg.APIKeyEnv + " (llm.api_key_env) is empty or unset"}
	}
	c := &Client{
		cfg:    cfg,
		key:    key,
		http:   o.http,
		logger: o.logger,
		sem:    make(chan struct{}, cfg.Concurrency),
		flight: map[string]*flightCall{},
		sleep:  sleepCtx,
		now:    time.Now,
		jitter: func(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) },
	}
	switch cfg.Provider {
	case KindOpenAI:
		c.prov = openAI{}
	case KindAnthropic:
		c.prov = anthropic{}
	}
	if c.http == nil {
		c.http = &http.Client{}
	}
	if c.logger == nil {
		c.logger = hclog.NewNullLogger()
	}
	switch {
	case o.cacheSet:
		c.cache = o.cache
	case cfg.CacheMaxBytes > 0:
		c.cache = NewMemoryCache(cfg.CacheMaxBytes)
	}
	return c, nil
}

// Config returns the client's config with defaults applied.
func (c *Client) Config() Config { return c.cfg }

// Complete implements host.Completer with no budget: every call may reach
// the provider. The daemon uses Budgeted instead.
func (c *Client) Complete(ctx context.Context, req abi.LLMRequest) (abi.LLMResponse, error) {
	return c.complete(ctx, req, nil)
}

// Budgeted returns a Completer that shares c (its cache, concurrency cap
// and counters) under a fresh per-request budget of c's Config.Budget.
// Make one per compaction request: compactor.Options.NewLLM.
func (c *Client) Budgeted() *Budget {
	return &Budget{c: c, limits: c.cfg.Budget}
}

// complete serves one request: from the cache, from an identical call
// already in flight, or from the provider under budget b (nil: none).
func (c *Client) complete(ctx context.Context, req abi.LLMRequest, b *Budget) (abi.LLMResponse, error) {
	c.stats.requests.Add(1)
	model := req.Model
	if model == "" {
		model = c.cfg.Model
	}
	if model == "" {
		return abi.LLMResponse{}, c.fail(&Error{Kind: ErrNoModel, Provider: c.prov.kind(), Message: "the request names no model and llm.model is not set"})
	}
	if len(req.Messages) == 0 {
		return abi.LLMResponse{}, c.fail(&Error{Kind: ErrInvalidRequest, Provider: c.prov.kind(), Message: "no messages"})
	}
	if req.MaxTokens < 0 {
		return abi.LLMResponse{}, c.fail(&Error{Kind: ErrInvalidRequest, Provider: c.prov.kind(), Message: "max_tokens is negative"})
	}
	key := CacheKey(c.prov.kind(), c.cfg.BaseURL, model, req)
	fc, resp, err := c.join(ctx, key)
	if fc == nil {
		return resp, err
	}
	defer func() {
		c.flightMu.Lock()
		delete(c.flight, key)
		c.flightMu.Unlock()
		close(fc.done)
	}()
	if l, ok := c.cache.(Leaser); ok {
		release, resp, found := c.awaitFleet(ctx, l, key)
		if found {
			fc.resp = resp
			return resp, nil
		}
		defer release()
	}

	est := estimateTokens(req)
	if b != nil {
		if err := b.reserve(est); err != nil {
			err.Provider = c.prov.kind()
			c.stats.budgetExceeded.Add(1)
			fc.err = c.fail(err)
			return abi.LLMResponse{}, fc.err
		}
	}
	c.stats.calls.Add(1)
	resp, serr := c.send(ctx, model, req)
	if serr != nil {
		if b != nil {
			b.settle(est, 0)
		}
		fc.err = c.fail(serr)
		return abi.LLMResponse{}, fc.err
	}
	if b != nil {
		b.settle(est, resp.Usage.InputTokens+resp.Usage.OutputTokens)
	}
	c.stats.inputTokens.Add(int64(resp.Usage.InputTokens))
	c.stats.outputTokens.Add(int64(resp.Usage.OutputTokens))
	if c.cache != nil {
		if err := c.cache.Put(ctx, key, encodeEntry(resp)); err != nil {
			c.stats.cacheErrors.Add(1)
			c.logger.Warn("llm cache put failed", "error", err)
		}
	}
	fc.resp = resp
	return resp, nil
}

// join answers key from the cache or from an identical call already in
// flight (as a cached answer: it cost this caller nothing). When neither
// can, it registers the caller's own call and returns it: the caller must
// finish it (set resp or err, close done, remove it from c.flight).
func (c *Client) join(ctx context.Context, key string) (*flightCall, abi.LLMResponse, error) {
	for {
		if resp, ok := c.lookup(ctx, key); ok {
			return nil, resp, nil
		}
		c.flightMu.Lock()
		fc, busy := c.flight[key]
		if !busy {
			fc = &flightCall{done: make(chan struct{})}
			c.flight[key] = fc
			c.flightMu.Unlock()
			return fc, abi.LLMResponse{}, nil
		}
		fc.waiters++
		c.flightMu.Unlock()
		select {
		case <-fc.done:
		case <-ctx.Done():
			return nil, abi.LLMResponse{}, c.fail(&Error{Kind: ErrTimeout, Provider: c.prov.kind(), Message: "the request's context ended: " + ctx.Err().Error()})
		}
		switch {
		case fc.err == nil:
			c.stats.deduplicated.Add(1)
			resp := fc.resp
			resp.Cached = true
			return nil, resp, nil
		case errors.Is(fc.err, ErrBudgetExceeded):
			// The other caller's budget, not ours: try on our own.
			continue
		}
		return nil, abi.LLMResponse{}, fc.err
	}
}

// Leaser is a Cache shared by several daemons (the shared store's summary
// cache) that can also lease a key: the one daemon holding the lease calls
// the provider, the others wait for its answer in the cache. Lease returns
// won=false while another holder's lease lives; release ends one's own
// lease. A lease expires by itself after ttl (a holder that died).
type Leaser interface {
	Cache
	Lease(ctx context.Context, key string, ttl time.Duration) (release func(), won bool, err error)
}

// leasePoll is how often a daemon waiting on another's lease looks in the
// cache.
const leasePoll = 20 * time.Millisecond

// awaitFleet makes a summary computed once fleet-wide: it takes the key's
// lease, or, while another daemon holds it, waits for that daemon's answer
// to land in the cache, at most the provider timeout (the lease's own
// lifetime): past that, or when the lease frees without an answer (the
// holder failed), it takes the lease itself and the caller calls the
// provider. A store that fails is no reason to wait: the caller goes on.
func (c *Client) awaitFleet(ctx context.Context, l Leaser, key string) (release func(), resp abi.LLMResponse, found bool) {
	ttl := c.cfg.Timeout
	if ttl <= 0 {
		ttl = DefaultTimeout
	}
	deadline := time.Now().Add(ttl)
	for {
		rel, won, err := l.Lease(ctx, key, ttl)
		if err != nil {
			return func() {}, abi.LLMResponse{}, false
		}
		if won {
			// Someone may have finished between our miss and the lease.
			if b, ok, err := l.Get(ctx, key); err == nil && ok {
				if resp, valid := decodeEntry(b); valid {
					rel()
					c.stats.cacheHits.Add(1)
					resp.Cached = true
					return func() {}, resp, true
				}
			}
			return rel, abi.LLMResponse{}, false
		}
		if time.Now().After(deadline) {
			return func() {}, abi.LLMResponse{}, false
		}
		select {
		case <-ctx.Done():
			return func() {}, abi.LLMResponse{}, false
		case <-time.After(leasePoll):
		}
		if b, ok, err := l.Get(ctx, key); err == nil && ok {
			if resp, valid := decodeEntry(b); valid {
				c.stats.cacheHits.Add(1)
				c.stats.deduplicated.Add(1)
				resp.Cached = true
				return func() {}, resp, true
			}
		}
	}
}

// lookup answers from the cache.
func (c *Client) lookup(ctx context.Context, key string) (abi.LLMResponse, bool) {
	if c.cache == nil {
		return abi.LLMResponse{}, false
	}
	b, ok, err := c.cache.Get(ctx, key)
	if err != nil {
		c.stats.cacheErrors.Add(1)
		c.logger.Warn("llm cache get failed; calling the provider", "error", err)
		ok = false
	}
	if ok {
		if resp, valid := decodeEntry(b); valid {
			c.stats.cacheHits.Add(1)
			resp.Cached = true
			return resp, true
		}
		c.logger.Warn("llm cache entry unreadable; calling the provider", "key", key)
	}
	c.stats.cacheMisses.Add(1)
	return abi.LLMResponse{}, false
}

func (c *Client) fail(e *Error) *Error {
	c.stats.failures.Add(1)
	c.logger.Debug("llm completion failed", "error", e.Error())
	return e
}

type flightCall struct {
	done    chan struct{}
	resp    abi.LLMResponse
	err     *Error
	waiters int // callers waiting for it (under Client.flightMu)
}

// send makes the HTTP call, retrying as the Config says.
func (c *Client) send(ctx context.Context, model string, req abi.LLMRequest) (abi.LLMResponse, *Error) {
	kind := c.prov.kind()
	var last *Error
	for attempt := 1; ; attempt++ {
		resp, retryable, err := c.attempt(ctx, model, req)
		if err == nil {
			return resp, nil
		}
		err.Provider, err.Attempts = kind, attempt
		last = err
		if !retryable || attempt > c.cfg.MaxRetries || ctx.Err() != nil {
			return abi.LLMResponse{}, last
		}
		wait := c.jitter(min(backoffBase<<(attempt-1), backoffMax))
		if err.RetryAfter > 0 {
			if err.RetryAfter > c.cfg.MaxRetryWait {
				last.Message += " (the provider asked to retry after " + err.RetryAfter.String() + ", more than llm.max_retry_wait)"
				return abi.LLMResponse{}, last
			}
			wait = err.RetryAfter
		}
		if dl, ok := ctx.Deadline(); ok && c.now().Add(wait).After(dl) {
			last.Message += " (no time left to retry)"
			return abi.LLMResponse{}, last
		}
		c.stats.retries.Add(1)
		c.logger.Debug("llm attempt failed; retrying", "attempt", attempt, "wait", wait, "error", err.Error())
		if c.sleep(ctx, wait) != nil {
			return abi.LLMResponse{}, last
		}
	}
}

// attempt makes one HTTP call under the concurrency cap and the
// per-attempt timeout.
func (c *Client) attempt(ctx context.Context, model string, req abi.LLMRequest) (resp abi.LLMResponse, retryable bool, e *Error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return resp, false, &Error{Kind: ErrTimeout, Message: "waiting for a free connection slot: " + ctx.Err().Error()}
	}
	defer func() { <-c.sem }()
	c.stats.attempts.Add(1)
	actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	hr, err := c.prov.newRequest(actx, c.cfg.BaseURL, c.key, model, req)
	if err != nil {
		return resp, false, &Error{Kind: ErrInvalidRequest, Message: err.Error()}
	}
	hr.Header.Set("User-Agent", "compactd")
	hresp, err := c.http.Do(hr)
	if err != nil {
		return resp, ctx.Err() == nil, c.transportError(ctx, actx, err)
	}
	defer hresp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBody+1))
	if err != nil {
		return resp, ctx.Err() == nil, c.transportError(ctx, actx, err)
	}
	if len(body) > maxResponseBody {
		return resp, false, &Error{Kind: ErrBadResponse, Status: hresp.StatusCode, Message: "response body larger than 16 MiB"}
	}
	if hresp.StatusCode < 200 || hresp.StatusCode > 299 {
		typ, msg := c.prov.parseError(body)
		e := &Error{Kind: ErrStatus, Status: hresp.StatusCode, Type: typ, Message: msg}
		switch hresp.StatusCode {
		case http.StatusTooManyRequests:
			e.Kind = ErrRateLimited
		case http.StatusRequestTimeout, http.StatusGatewayTimeout:
			e.Kind = ErrTimeout
		case http.StatusServiceUnavailable, 529:
			e.Kind = ErrUnavailable
		}
		e.RetryAfter = retryAfter(hresp.Header, c.now())
		return resp, shouldRetry(hresp.StatusCode, hresp.Header), e
	}
	text, gotModel, usage, perr := c.prov.parse(body)
	if perr != nil {
		perr.Status = hresp.StatusCode
		return resp, false, perr
	}
	if gotModel == "" {
		gotModel = model
	}
	resp = abi.LLMResponse{Text: text, Model: gotModel}
	if usage != nil {
		resp.Usage = *usage
	} else {
		// Some local servers report no usage; estimate so budgets and
		// metrics still mean something.
		resp.Usage = abi.LLMUsage{InputTokens: inputEstimate(req), OutputTokens: (len(text) + 3) / 4}
	}
	return resp, false, nil
}

// transportError classifies an error from sending or reading: a timeout
// of the attempt (retryable), the caller's context ending (not), or a
// connection failure (retryable).
func (c *Client) transportError(ctx, actx context.Context, err error) *Error {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return &Error{Kind: ErrTimeout, Message: "the request's context ended: " + ctx.Err().Error()}
	case actx.Err() != nil || errors.As(err, &ne) && ne.Timeout():
		return &Error{Kind: ErrTimeout, Message: "no answer within llm.timeout (" + c.cfg.Timeout.String() + ")"}
	}
	return &Error{Kind: ErrUnavailable, Message: redactURL(err.Error())}
}

// redactURL keeps an error readable without echoing request details: Go's
// url.Error already omits headers, so the key cannot appear; this only
// trims the noise.
func redactURL(s string) string { return truncate(s, maxErrorMessage) }

// shouldRetry reports whether a status is worth retrying. The providers'
// x-should-retry header, when present, decides (as their SDKs do).
func shouldRetry(status int, h http.Header) bool {
	switch strings.ToLower(h.Get("x-should-retry")) {
	case "true":
		return true
	case "false":
		return false
	}
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// retryAfter reads how long the provider asks to wait: retry-after-ms
// (milliseconds, OpenAI), else Retry-After as seconds or an HTTP date.
// It returns 0 when there is no usable value, and at most maxRetryAfter.
func retryAfter(h http.Header, now time.Time) time.Duration {
	return min(parseRetryAfter(h, now), maxRetryAfter)
}

// maxRetryAfter caps a parsed Retry-After (anything this long fails the
// call anyway: see Config.MaxRetryWait).
const maxRetryAfter = 24 * time.Hour

func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 && s < 1e6 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// inputEstimate estimates a request's input tokens: a token per four bytes
// plus a few per message.
func inputEstimate(req abi.LLMRequest) int {
	n := 0
	for _, m := range req.Messages {
		n += (len(m.Content)+3)/4 + 4
	}
	return n
}

// estimateTokens is the most a request may cost: its estimated input and
// its completion cap.
func estimateTokens(req abi.LLMRequest) int {
	out := req.MaxTokens
	if out <= 0 {
		out = DefaultMaxTokens
	}
	return inputEstimate(req) + out
}

// Budget is a Completer with a per-request budget over a shared Client.
// It is safe for concurrent use. Only calls that reach the provider are
// counted: cache hits and shared in-flight answers are free. A call that
// would pass a limit is refused with an error whose code is
// budget_exceeded, before anything is sent.
type Budget struct {
	c      *Client
	limits Limits

	mu     sync.Mutex
	calls  int
	tokens int
}

// Complete implements host.Completer.
func (b *Budget) Complete(ctx context.Context, req abi.LLMRequest) (abi.LLMResponse, error) {
	return b.c.complete(ctx, req, b)
}

// Spent returns the calls and tokens spent so far (tokens of calls in
// flight are counted at their estimate).
func (b *Budget) Spent() (calls, tokens int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls, b.tokens
}

// reserve counts a call and its estimated tokens, or refuses it.
func (b *Budget) reserve(est int) *Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.limits.MaxCalls; l >= 0 && b.calls+1 > l {
		return &Error{Kind: ErrBudgetExceeded, Message: "this compaction already made " + strconv.Itoa(b.calls) + " LLM calls (llm.budget.max_calls: " + strconv.Itoa(l) + ")"}
	}
	if l := b.limits.MaxTokens; l >= 0 && b.tokens+est > l {
		return &Error{Kind: ErrBudgetExceeded, Message: "this call could spend ~" + strconv.Itoa(est) + " tokens; the compaction has spent " + strconv.Itoa(b.tokens) + " of " + strconv.Itoa(l) + " (llm.budget.max_tokens)"}
	}
	b.calls++
	b.tokens += est
	return nil
}

// settle replaces a reservation's estimate with what the call cost.
func (b *Budget) settle(est, actual int) {
	b.mu.Lock()
	b.tokens += actual - est
	b.mu.Unlock()
}

// Stats is a snapshot of a Client's counters since it was made, for the
// daemon's /metrics.
type Stats struct {
	// Requests counts Complete calls (all of them, budgeted or not).
	Requests int64 `json:"requests"`
	// CacheHits and CacheMisses count cache lookups; CacheErrors counts
	// failed Gets and Puts.
	CacheHits   int64 `json:"cache_hits"`
	CacheMisses int64 `json:"cache_misses"`
	CacheErrors int64 `json:"cache_errors"`
	// Deduplicated counts requests answered by an identical call that was
	// already in flight.
	Deduplicated int64 `json:"deduplicated"`
	// Calls counts completions sent to the provider; Attempts counts HTTP
	// attempts (Calls plus retries); Retries counts the retries.
	Calls    int64 `json:"calls"`
	Attempts int64 `json:"attempts"`
	Retries  int64 `json:"retries"`
	// Failures counts requests that ended in an error (budget refusals
	// included); BudgetExceeded counts the refusals.
	Failures       int64 `json:"failures"`
	BudgetExceeded int64 `json:"budget_exceeded"`
	// InputTokens and OutputTokens are what successful calls spent, as the
	// provider reported (estimated when it reported nothing).
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

type counters struct {
	requests, cacheHits, cacheMisses, cacheErrors, deduplicated atomic.Int64
	calls, attempts, retries, failures, budgetExceeded          atomic.Int64
	inputTokens, outputTokens                                   atomic.Int64
}

// Stats returns the client's counters. Safe to call at any time.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		Requests: s.requests.Load(), CacheHits: s.cacheHits.Load(), CacheMisses: s.cacheMisses.Load(),
		CacheErrors: s.cacheErrors.Load(), Deduplicated: s.deduplicated.Load(),
		Calls: s.calls.Load(), Attempts: s.attempts.Load(), Retries: s.retries.Load(),
		Failures: s.failures.Load(), BudgetExceeded: s.budgetExceeded.Load(),
		InputTokens: s.inputTokens.Load(), OutputTokens: s.outputTokens.Load(),
	}
}
