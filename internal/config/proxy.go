package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/compactd/compactd/abi"
)

// Proxy configures the provider-compatible proxy (docs/proxy.md): POST /v1/chat/completions and POST /v1/messages are forwarded
// to an upstream per provider, compacted on the way when a conversation
// passes its trigger. A provider whose upstream is unset (here and in the
// environment) is not proxied.
type Proxy struct {
	// OpenAI is the Chat Completions upstream (COMPACTD_OPENAI_UPSTREAM
	// when unset).
	OpenAI ProxyUpstream `yaml:"openai,omitempty" json:"openai"`
	// Anthropic is the Messages API upstream (COMPACTD_ANTHROPIC_UPSTREAM
	// when unset).
	Anthropic ProxyUpstream `yaml:"anthropic,omitempty" json:"anthropic"`
	// Policy or Pipeline is what runs when a proxied conversation is
	// compacted; neither: the config's default (policy or pipeline).
	Policy   string   `yaml:"policy,omitempty" json:"policy,omitempty"`
	Pipeline []string `yaml:"pipeline,omitempty" json:"pipeline,omitempty"`
	// Routes choose the policy or pipeline, and the ratios, by the
	// request's model: the first entry whose pattern matches runs; none:
	// Policy or Pipeline and the ratios below (docs/proxy.md, "Routes").
	Routes []ProxyRoute `yaml:"routes,omitempty" json:"routes,omitempty"`
	// Threshold is the usage ratio (tokens / context window) at which a
	// conversation is compacted: the provider's usage of the last response
	// (the deferred trigger) or the pre-flight count of a request
	// (default 0.8; 0 < threshold <= 1).
	Threshold float64 `yaml:"threshold,omitempty" json:"threshold"`
	// Target is the share of the context window a compaction the proxy
	// decides on aims at: the policy is handed the host's decision with
	// target_tokens = target × window, less what the provider counted
	// beyond compactd's own count last time (default 0.5; above 0 and at
	// most threshold, which it is lowered to when above).
	Target float64 `yaml:"target,omitempty" json:"target"`
	// TriggerTokens, if > 0, also triggers a compaction at this many
	// tokens, whatever the window (for models whose window is unknown).
	TriggerTokens int `yaml:"trigger_tokens,omitempty" json:"trigger_tokens,omitempty"`
	// PrepareThreshold, if > 0, is the usage ratio (pre-flight count /
	// context window, below Threshold) at which a conversation's
	// compaction is prepared in the background, off the request path, so
	// that the request reaching the trigger uses it at once (0, the
	// default: off; docs/proxy.md, "Background preparation").
	PrepareThreshold float64 `yaml:"prepare_threshold,omitempty" json:"prepare_threshold,omitempty"`
	// PrepareWait bounds how long a request reaching the trigger waits for
	// its conversation's preparation still running (default 0: it does
	// not wait).
	PrepareWait Duration `yaml:"prepare_wait,omitempty" json:"prepare_wait,omitempty"`
	// PrepareMiss is what a request reaching the trigger does when its
	// preparation is not ready after PrepareWait: "compact" (default)
	// compacts it synchronously, as without preparation; "forward"
	// forwards it uncompacted and the next request uses the prepared
	// result.
	PrepareMiss string `yaml:"prepare_miss,omitempty" json:"prepare_miss,omitempty"`
	// PrepareWorkers is how many preparations run at once (default 2;
	// read at start).
	PrepareWorkers int `yaml:"prepare_workers,omitempty" json:"prepare_workers,omitempty"`
	// PrepareQueue bounds the preparations waiting for a worker (default
	// 64); past it a preparation is dropped, and counted.
	PrepareQueue int `yaml:"prepare_queue,omitempty" json:"prepare_queue,omitempty"`
	// Shadow lists policies or pipelines that run beside the live one on
	// every proxied request, off the request path, for comparison only:
	// their results are never forwarded (docs/proxy.md, "Shadow
	// policies"). Each entry is a policy name or a pipeline "a,b".
	Shadow []string `yaml:"shadow,omitempty" json:"shadow,omitempty"`
	// ShadowWorkers is how many shadow runs go at once (default 1; read
	// at start).
	ShadowWorkers int `yaml:"shadow_workers,omitempty" json:"shadow_workers,omitempty"`
	// ShadowQueue bounds the shadow runs waiting for a worker (default
	// 64; read at start); past it a run is dropped, and counted.
	ShadowQueue int `yaml:"shadow_queue,omitempty" json:"shadow_queue,omitempty"`
	// ContextWindow overrides the model's context window for every
	// proxied request (0: the model's, from the model table).
	ContextWindow int `yaml:"context_window,omitempty" json:"context_window,omitempty"`
	// Timeout bounds the wait for an upstream's answer: from sending the
	// request (its body included) to the response's headers (default
	// 10m). A non-streamed answer's headers come when the model is done,
	// so this is the longest a model may think.
	Timeout Duration `yaml:"timeout,omitempty" json:"timeout"`
	// ReadTimeout bounds each silence of an upstream once its headers
	// arrived: the longest wait for the next bytes of its body (default
	// 5m). It is not a limit on the whole answer: a stream that keeps
	// sending runs as long as it sends. Past it, a non-streamed answer
	// is a 504 and a stream ends with an error event.
	ReadTimeout Duration `yaml:"read_timeout,omitempty" json:"read_timeout"`
	// MaxEventBytes bounds what the proxy holds of one upstream answer at
	// a time (default 16 MiB): one event of a stream (a line or an event
	// that runs past it ends the stream with an error event), or a
	// non-streamed answer, which is held whole until it ends (a larger
	// one passes through as it comes, its usage unread).
	MaxEventBytes int64 `yaml:"max_event_bytes,omitempty" json:"max_event_bytes"`
	// MaxStoredBytes caps the memory holding each proxied conversation's
	// last request, for manual compaction (default 64 MiB); the least
	// recently used go first.
	MaxStoredBytes int64 `yaml:"max_stored_bytes,omitempty" json:"max_stored_bytes"`
	// AllowUpstreamChange (default true) lets PUT /v1/config and SIGHUP
	// change the upstreams of a running daemon. Anyone who may update the
	// config (the socket's owner, anyone with the TCP token) may point
	// the proxy elsewhere, and the agents' provider keys follow; on a
	// shared machine set it false: such a change (and turning this back
	// on) is then refused until the daemon restarts with the file.
	AllowUpstreamChange *bool `yaml:"allow_upstream_change,omitempty" json:"allow_upstream_change"`
	// RecoverOverflow (default true): when an upstream refuses a proxied
	// request as too long (OpenAI's context_length_exceeded, Anthropic's
	// "prompt is too long", a 413), the request is compacted with the
	// proxy's pipeline, ignoring the trigger, and sent once more.
	RecoverOverflow *bool `yaml:"recover_overflow,omitempty" json:"recover_overflow"`

	// table is Routes resolved (Config.WithDefaults builds it once per
	// config load; Config.ProxyRoute reads it).
	table *routeTable
}

// ProxyUpstream is one provider's upstream.
type ProxyUpstream struct {
	// Upstream is the base URL, as the provider's SDK takes it:
	// "https://api.openai.com/v1" (requests go to {upstream}/chat/completions),
	// "https://api.anthropic.com" (requests go to {upstream}/v1/messages).
	Upstream string `yaml:"upstream,omitempty" json:"upstream,omitempty"`
	// StreamUsage (OpenAI only; default true) adds
	// stream_options.include_usage to streamed requests that lack it, so
	// the response's usage can be read, and removes the extra usage chunk
	// from the stream again. Turn it off for an upstream that rejects
	// stream_options.
	StreamUsage *bool `yaml:"stream_usage,omitempty" json:"stream_usage,omitempty"`
}

// Environment variables that set the upstreams when the config file does
// not.
const (
	EnvOpenAIUpstream    = "COMPACTD_OPENAI_UPSTREAM"
	EnvAnthropicUpstream = "COMPACTD_ANTHROPIC_UPSTREAM"
)

// Proxy defaults and bounds (docs/configuration.md documents them).
const (
	DefaultProxyThreshold      = 0.8
	DefaultProxyTarget         = 0.5
	DefaultProxyTimeout        = 10 * time.Minute
	DefaultProxyReadTimeout    = 5 * time.Minute
	DefaultProxyMaxEventBytes  = 16 << 20
	DefaultProxyMaxStoredBytes = 64 << 20
	DefaultPrepareWorkers      = 2
	DefaultPrepareQueue        = 64
	// DefaultShadowWorkers and DefaultShadowQueue are proxy.shadow_workers
	// and proxy.shadow_queue's defaults; MaxShadowWorkers and
	// MaxShadowQueue their bounds.
	DefaultShadowWorkers = 1
	DefaultShadowQueue   = 64
	MaxShadowWorkers     = 64
	MaxShadowQueue       = 100_000
	// MaxPrepareWorkers, MaxPrepareQueue and MaxPrepareWait bound the
	// background preparation's settings.
	MaxPrepareWorkers = 64
	MaxPrepareQueue   = 100_000
	MaxPrepareWait    = 10 * time.Minute
	// PrepareMissCompact and PrepareMissForward are proxy.prepare_miss's
	// values.
	PrepareMissCompact = "compact"
	PrepareMissForward = "forward"
	// MaxProxyContextWindow bounds proxy.context_window.
	MaxProxyContextWindow = 100_000_000
)

// withDefaults fills the proxy's unset fields, upstreams from getenv.
func (p Proxy) withDefaults(getenv func(string) string) Proxy {
	if p.OpenAI.Upstream == "" && getenv != nil {
		p.OpenAI.Upstream = strings.TrimSpace(getenv(EnvOpenAIUpstream))
	}
	if p.Anthropic.Upstream == "" && getenv != nil {
		p.Anthropic.Upstream = strings.TrimSpace(getenv(EnvAnthropicUpstream))
	}
	p.OpenAI.Upstream = strings.TrimRight(p.OpenAI.Upstream, "/")
	p.Anthropic.Upstream = strings.TrimRight(p.Anthropic.Upstream, "/")
	if p.Threshold == 0 {
		p.Threshold = DefaultProxyThreshold
	}
	if p.Target == 0 {
		p.Target = DefaultProxyTarget
	}
	p.Target = min(p.Target, p.Threshold)
	if p.Timeout == 0 {
		p.Timeout = Duration(DefaultProxyTimeout)
	}
	if p.ReadTimeout == 0 {
		p.ReadTimeout = Duration(DefaultProxyReadTimeout)
	}
	if p.MaxEventBytes == 0 {
		p.MaxEventBytes = DefaultProxyMaxEventBytes
	}
	if p.MaxStoredBytes == 0 {
		p.MaxStoredBytes = DefaultProxyMaxStoredBytes
	}
	if p.PrepareMiss == "" {
		p.PrepareMiss = PrepareMissCompact
	}
	if p.PrepareWorkers == 0 {
		p.PrepareWorkers = DefaultPrepareWorkers
	}
	if p.PrepareQueue == 0 {
		p.PrepareQueue = DefaultPrepareQueue
	}
	if p.ShadowWorkers == 0 {
		p.ShadowWorkers = DefaultShadowWorkers
	}
	if p.ShadowQueue == 0 {
		p.ShadowQueue = DefaultShadowQueue
	}
	if p.AllowUpstreamChange == nil {
		allow := true
		p.AllowUpstreamChange = &allow
	}
	if p.RecoverOverflow == nil {
		on := true
		p.RecoverOverflow = &on
	}
	return p
}

// UpstreamChangeAllowed reports whether a running daemon may change the
// upstreams (proxy.allow_upstream_change, default true).
func (p *Proxy) UpstreamChangeAllowed() bool {
	return p.AllowUpstreamChange == nil || *p.AllowUpstreamChange
}

// RecoverOverflowOn reports whether context-length errors are recovered
// from (proxy.recover_overflow, default true).
func (p *Proxy) RecoverOverflowOn() bool { return p.RecoverOverflow == nil || *p.RecoverOverflow }

// Enabled reports whether any provider is proxied.
func (p *Proxy) Enabled() bool { return p.OpenAI.Upstream != "" || p.Anthropic.Upstream != "" }

// IncludeStreamUsage reports whether OpenAI streams get
// stream_options.include_usage added (proxy.openai.stream_usage).
func (p *Proxy) IncludeStreamUsage() bool {
	return p.OpenAI.StreamUsage == nil || *p.OpenAI.StreamUsage
}

// ProxyPipeline returns what a proxied compaction runs when no route
// matches: proxy.policy or proxy.pipeline, else the config's default
// (ProxyRoute gives a request's).
func (c *Config) ProxyPipeline() []string {
	p, _ := c.proxyDefault()
	return p
}

// Validate checks the block's URLs, names and ranges.
func (p *Proxy) Validate() error {
	for _, u := range []struct{ key, env, value string }{
		{"proxy.openai.upstream", EnvOpenAIUpstream, p.OpenAI.Upstream},
		{"proxy.anthropic.upstream", EnvAnthropicUpstream, p.Anthropic.Upstream},
	} {
		if u.value == "" {
			continue
		}
		if err := CheckUpstream(u.value); err != nil {
			return fmt.Errorf("%s (or $%s): %v", u.key, u.env, err)
		}
	}
	if t, at := p.PrepareThreshold, p.Threshold; t > 0 && at > 0 && t >= at {
		return fmt.Errorf("proxy.prepare_threshold (%g) must be below proxy.threshold (%g): preparation runs ahead of the trigger", t, at)
	}
	switch p.PrepareMiss {
	case "", PrepareMissCompact, PrepareMissForward:
	default:
		return fmt.Errorf("proxy.prepare_miss: %q is not %q or %q", p.PrepareMiss, PrepareMissCompact, PrepareMissForward)
	}
	if err := p.validateShadow(); err != nil {
		return err
	}
	if p.Policy != "" && len(p.Pipeline) > 0 {
		return fmt.Errorf("proxy.policy and proxy.pipeline are exclusive: set one")
	}
	names := p.Pipeline
	if p.Policy != "" {
		names = []string{p.Policy}
	}
	for _, n := range names {
		if !abi.ValidName(n) {
			return fmt.Errorf("proxy: policy name %q: want 1-64 characters of a-z, 0-9, _ and -, starting with a letter", n)
		}
	}
	if err := p.validateRoutes(); err != nil {
		return err
	}
	// The numbers' ranges are checked with every other setting's
	// (checkRanges), so that their errors name the line.
	return p.checkRanges()
}

// CheckUpstream reports whether s is a usable upstream base URL: absolute
// http or https with a host, no query, fragment or credentials.
func CheckUpstream(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", s, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http:// or https:// base URL such as https://api.openai.com/v1", s)
	case u.Host == "":
		return fmt.Errorf("%q has no host", s)
	case u.User != nil:
		return fmt.Errorf("%q carries credentials; the caller's own auth headers are passed through instead", s)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q: a base URL has no query or fragment", s)
	}
	return nil
}

// LLMModel returns the llm: block's model, the daemon's summarizer model
// ("" when the block or its model is unset).
func (c *Config) LLMModel() string {
	var b struct {
		Model string `yaml:"model"`
	}
	if c.LLM == nil || c.LLM.Node == nil || c.LLM.Node.Decode(&b) != nil {
		return ""
	}
	return strings.TrimSpace(b.Model)
}

// ShadowPipelines returns proxy.shadow's entries as pipelines (an entry
// "a,b" is the pipeline a then b).
func (p *Proxy) ShadowPipelines() [][]string {
	out := make([][]string, 0, len(p.Shadow))
	for _, e := range p.Shadow {
		var names []string
		for _, n := range strings.Split(e, ",") {
			names = append(names, strings.TrimSpace(n))
		}
		out = append(out, names)
	}
	return out
}

// validateShadow checks proxy.shadow's names and its pool's bounds.
func (p *Proxy) validateShadow() error {
	if p.ShadowWorkers < 0 || p.ShadowWorkers > MaxShadowWorkers {
		return fmt.Errorf("proxy.shadow_workers: %d is outside 1..%d", p.ShadowWorkers, MaxShadowWorkers)
	}
	if p.ShadowQueue < 0 || p.ShadowQueue > MaxShadowQueue {
		return fmt.Errorf("proxy.shadow_queue: %d is outside 1..%d", p.ShadowQueue, MaxShadowQueue)
	}
	seen := map[string]bool{}
	for i, pl := range p.ShadowPipelines() {
		for _, n := range pl {
			if !abi.ValidName(n) {
				return fmt.Errorf("proxy.shadow[%d]: policy name %q: want 1-64 characters of a-z, 0-9, _ and -, starting with a letter", i, n)
			}
		}
		key := strings.Join(pl, ",")
		if seen[key] {
			return fmt.Errorf("proxy.shadow[%d]: %q is listed twice", i, key)
		}
		seen[key] = true
	}
	return nil
}
