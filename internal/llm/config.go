package llm

import (
	"fmt"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Provider kinds.
const (
	// KindOpenAI is the OpenAI Chat Completions API and everything that
	// speaks it: OpenAI, OpenRouter, vLLM, llama.cpp's server, Ollama's
	// /v1 endpoint.
	KindOpenAI = "openai"
	// KindAnthropic is Anthropic's Messages API.
	KindAnthropic = "anthropic"
)

// Defaults applied by Config.WithDefaults to zero fields.
const (
	DefaultOpenAIBaseURL    = "https://api.openai.com/v1"
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
	DefaultOpenAIKeyEnv     = "OPENAI_API_KEY"
	DefaultAnthropicKeyEnv  = "ANTHROPIC_API_KEY"
	DefaultTimeout          = 60 * time.Second
	DefaultMaxRetries       = 2
	DefaultConcurrency      = 4
	DefaultMaxRetryWait     = 30 * time.Second
	DefaultBudgetCalls      = 32
	DefaultBudgetTokens     = 400_000
	DefaultCacheMaxBytes    = 64 << 20
	// DefaultMaxTokens is the completion cap sent when a request sets
	// none: Anthropic requires one, OpenAI-compatible servers get none.
	DefaultMaxTokens = 4096
)

// Config is the daemon's LLM provider: the `llm:` key of its config file.
// Zero fields take the documented defaults (WithDefaults); a negative
// number means "off" where the field says so.
//
//	llm:
//	  provider: anthropic             # openai | anthropic (required)
//	  base_url: https://api.anthropic.com
//	  api_key_env: ANTHROPIC_API_KEY  # the NAME of the variable, never the key
//	  model: claude-3-5-haiku-latest  # used when a policy names no model
//	  timeout: 60s                    # per attempt
//	  max_retries: 2
//	  concurrency: 4                  # calls in flight, whole daemon
//	  budget: {max_calls: 32, max_tokens: 400000}   # per compaction request
//	  cache_max_bytes: 67108864
//
// The API key itself is read from the environment once, by New. It is
// never part of a Config, never logged and never in an error message.
type Config struct {
	// Provider is the wire format: "openai" or "anthropic". Required.
	Provider string `yaml:"provider"`
	// BaseURL is the API root. Requests go to {base_url}/chat/completions
	// (openai) or {base_url}/v1/messages (anthropic). Defaults to the
	// vendor's public API.
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the API key.
	// Defaults to OPENAI_API_KEY or ANTHROPIC_API_KEY. When the default
	// variable is unset, an openai provider sends no Authorization header
	// (local servers need none); an explicitly named variable that is
	// unset, or an unset key for anthropic, is an error in New.
	APIKeyEnv string `yaml:"api_key_env"`
	// Model is used when a request names none. Optional: policies usually
	// name their summarizer model (or pass the agent's).
	Model string `yaml:"model"`
	// Timeout bounds one HTTP attempt (default 60s).
	Timeout time.Duration `yaml:"timeout"`
	// MaxRetries is how many times a failed attempt is retried on 408,
	// 409, 429, 5xx, timeouts and connection errors (default 2; negative:
	// never retry).
	MaxRetries int `yaml:"max_retries"`
	// MaxRetryWait is the longest the client waits before a retry. A
	// Retry-After longer than this fails the call at once instead of
	// holding the compaction (default 30s).
	MaxRetryWait time.Duration `yaml:"max_retry_wait"`
	// Concurrency caps the HTTP calls in flight across the whole daemon
	// (default 4).
	Concurrency int `yaml:"concurrency"`
	// Budget limits what one compaction request may spend (Budgeted).
	Budget Limits `yaml:"budget"`
	// CacheMaxBytes bounds the in-memory summary cache New creates when no
	// WithCache option is given (default 64 MiB; negative: no cache).
	CacheMaxBytes int64 `yaml:"cache_max_bytes"`
}

// Limits is a per-request budget. Only calls that reach the provider
// count: answers from the cache are free.
type Limits struct {
	// MaxCalls is the number of completions one request may send to the
	// provider (default 32; negative: unlimited).
	MaxCalls int `yaml:"max_calls"`
	// MaxTokens is the input plus output tokens one request may spend
	// (default 400000; negative: unlimited). A call is refused up front
	// when its estimated input (bytes/4) plus its max_tokens would pass
	// the limit.
	MaxTokens int `yaml:"max_tokens"`
}

// UnmarshalYAML decodes the `llm:` block strictly: a key Config does not
// have (a typo such as "tmeout") is an error naming its line, however the
// caller decodes (yaml.Node.Decode has no strict mode of its own).
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	if err := checkKeys(n, "llm", reflect.TypeFor[Config]()); err != nil {
		return err
	}
	type plain Config // without this method
	var p plain
	if err := n.Decode(&p); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	*c = Config(p)
	return nil
}

// checkKeys reports a mapping key of n that is not a yaml tag of t's
// fields, recursing into struct fields.
func checkKeys(n *yaml.Node, path string, t reflect.Type) error {
	if n.Kind != yaml.MappingNode {
		return nil // the decoder reports the type error
	}
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		ft, ok := fields[key]
		if !ok {
			names := make([]string, 0, len(fields))
			for name := range fields {
				names = append(names, name)
			}
			sort.Strings(names)
			return fmt.Errorf("%w: line %d: %s.%s is not a setting (want one of %s)", ErrInvalidConfig, n.Content[i].Line, path, key, strings.Join(names, ", "))
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]() {
			if err := checkKeys(n.Content[i+1], path+"."+key, ft); err != nil {
				return err
			}
		}
	}
	return nil
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Provider = strings.ToLower(strings.TrimSpace(c.Provider))
	switch c.Provider {
	case KindOpenAI:
		if c.BaseURL == "" {
			c.BaseURL = DefaultOpenAIBaseURL
		}
		if c.APIKeyEnv == "" {
			c.APIKeyEnv = DefaultOpenAIKeyEnv
		}
	case KindAnthropic:
		if c.BaseURL == "" {
			c.BaseURL = DefaultAnthropicBaseURL
		}
		if c.APIKeyEnv == "" {
			c.APIKeyEnv = DefaultAnthropicKeyEnv
		}
	}
	c.BaseURL = strings.TrimRight(strings.TrimSpace(c.BaseURL), "/")
	if c.Provider == KindAnthropic {
		// {base_url}/v1/messages: accept a base URL written with /v1.
		c.BaseURL = strings.TrimSuffix(c.BaseURL, "/v1")
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.MaxRetryWait == 0 {
		c.MaxRetryWait = DefaultMaxRetryWait
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Budget.MaxCalls == 0 {
		c.Budget.MaxCalls = DefaultBudgetCalls
	}
	if c.Budget.MaxTokens == 0 {
		c.Budget.MaxTokens = DefaultBudgetTokens
	}
	if c.CacheMaxBytes == 0 {
		c.CacheMaxBytes = DefaultCacheMaxBytes
	}
	return c
}

// Validate reports the first problem with c (after WithDefaults), as an
// error wrapping ErrInvalidConfig that names the key.
func (c Config) Validate() error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: llm.%s: %s", ErrInvalidConfig, key, fmt.Sprintf(format, args...))
	}
	switch c.Provider {
	case KindOpenAI, KindAnthropic:
	case "":
		return bad("provider", "not set (want %q or %q)", KindOpenAI, KindAnthropic)
	default:
		return bad("provider", "%q is not a provider (want %q or %q)", c.Provider, KindOpenAI, KindAnthropic)
	}
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil:
		return bad("base_url", "%v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("base_url", "%q: want an http:// or https:// URL", c.BaseURL)
	case u.Host == "":
		return bad("base_url", "%q has no host", c.BaseURL)
	case u.RawQuery != "" || u.Fragment != "":
		return bad("base_url", "%q: no query or fragment allowed", c.BaseURL)
	case u.User != nil:
		return bad("base_url", "credentials in the URL are not allowed (use api_key_env)")
	}
	if !validEnvName(c.APIKeyEnv) {
		// The value is not echoed: it may be a key pasted by mistake.
		return bad("api_key_env", "not an environment variable name: it names the variable holding the key, never the key itself")
	}
	switch {
	case c.Timeout < 0 || c.Timeout > MaxTimeout:
		return bad("timeout", "%v is out of range (allowed: 1ns to %v)", c.Timeout, MaxTimeout)
	case c.MaxRetryWait < 0 || c.MaxRetryWait > MaxTimeout:
		return bad("max_retry_wait", "%v is out of range (allowed: 1ns to %v)", c.MaxRetryWait, MaxTimeout)
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return bad("concurrency", "%d is out of range (allowed: 1 to %d)", c.Concurrency, MaxConcurrency)
	case c.MaxRetries > MaxRetries:
		return bad("max_retries", "%d is out of range (allowed: negative for none, 1 to %d)", c.MaxRetries, MaxRetries)
	case c.CacheMaxBytes > MaxCacheBytes:
		return bad("cache_max_bytes", "%d is out of range (allowed: negative for none, 1 to %d)", c.CacheMaxBytes, int64(MaxCacheBytes))
	}
	return nil
}

// Upper bounds of the provider's settings (Validate).
const (
	MaxTimeout     = time.Hour
	MaxConcurrency = 256
	MaxRetries     = 10
	MaxCacheBytes  = 16 << 30
)

// validEnvName reports whether s is a POSIX environment variable name.
func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
