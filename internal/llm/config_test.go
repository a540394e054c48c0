package llm

import (
	"context"
	"errors"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestConfigDefaults(t *testing.T) {
	got := Config{Provider: "Anthropic", BaseURL: "https://api.anthropic.com/v1/"}.WithDefaults()
	want := Config{
		Provider: KindAnthropic, BaseURL: "https://api.anthropic.com", APIKeyEnv: DefaultAnthropicKeyEnv,
		Timeout: DefaultTimeout, MaxRetries: DefaultMaxRetries, MaxRetryWait: DefaultMaxRetryWait,
		Concurrency: DefaultConcurrency, Budget: Limits{MaxCalls: DefaultBudgetCalls, MaxTokens: DefaultBudgetTokens},
		CacheMaxBytes: DefaultCacheMaxBytes,
	}
	if got != want {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	o := Config{Provider: "openai"}.WithDefaults()
	if o.BaseURL != DefaultOpenAIBaseURL || o.APIKeyEnv != DefaultOpenAIKeyEnv {
		t.Fatalf("openai defaults %+v", o)
	}
	if o := (Config{Provider: "openai", BaseURL: "http://localhost:11434/v1"}).WithDefaults(); o.BaseURL != "http://localhost:11434/v1" {
		t.Fatalf("an openai base URL keeps its /v1: %q", o.BaseURL)
	}
	if o := (Config{Provider: "openai", MaxRetries: -1, Budget: Limits{MaxCalls: -1}}).WithDefaults(); o.MaxRetries != -1 || o.Budget.MaxCalls != -1 {
		t.Fatalf("negative values must stay: %+v", o)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		key  string // "" = valid
	}{
		{"openai defaults", Config{Provider: "openai"}, ""},
		{"local server", Config{Provider: "openai", BaseURL: "http://127.0.0.1:8080/v1"}, ""},
		{"no provider", Config{}, "llm.provider"},
		{"unknown provider", Config{Provider: "gemini"}, "llm.provider"},
		{"relative url", Config{Provider: "openai", BaseURL: "api.openai.com"}, "llm.base_url"},
		{"ftp url", Config{Provider: "openai", BaseURL: "ftp://x"}, "llm.base_url"},
		{"credentials in url", Config{Provider: "openai", BaseURL: "https://user:pw@x"}, "llm.base_url"},
		{"a key where a name belongs", Config{Provider: "openai", APIKeyEnv: "sk-abc123"}, "llm.api_key_env"},
		{"negative timeout", Config{Provider: "openai", Timeout: -time.Second}, "llm.timeout"},
		{"negative concurrency", Config{Provider: "openai", Concurrency: -2}, "llm.concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.WithDefaults().Validate()
			if tt.key == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !contains(err.Error(), tt.key) {
				t.Fatalf("err = %v, want one naming %s", err, tt.key)
			}
			if contains(err.Error(), "sk-abc123") {
				t.Fatal("a key pasted into api_key_env is echoed in the error")
			}
		})
	}
}

// TestConfigFromYAML decodes the daemon's `llm:` key the way the config
// package will (yaml.v3): durations are written "300ms".
func TestConfigFromYAML(t *testing.T) {
	doc := `
provider: anthropic
base_url: https://api.anthropic.com
api_key_env: MY_KEY
model: claude-3-5-haiku-latest
timeout: 300ms
max_retries: 3
max_retry_wait: 1m
concurrency: 8
budget:
  max_calls: 5
  max_tokens: 100000
cache_max_bytes: 1048576
`
	var cfg Config
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	want := Config{Provider: "anthropic", BaseURL: "https://api.anthropic.com", APIKeyEnv: "MY_KEY", Model: "claude-3-5-haiku-latest",
		Timeout: 300 * time.Millisecond, MaxRetries: 3, MaxRetryWait: time.Minute, Concurrency: 8,
		Budget: Limits{MaxCalls: 5, MaxTokens: 100000}, CacheMaxBytes: 1 << 20}
	if cfg != want {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
}

func TestConfigYAMLUnknownKeys(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"provider: openai\ntmeout: 3s\n", "line 2: llm.tmeout is not a setting"},
		{"provider: openai\nbudget:\n  max_call: 3\n", "line 3: llm.budget.max_call is not a setting"},
		{"provider: openai\ntimeout: 30\n", "invalid llm config"},
	} {
		var node yaml.Node
		if err := yaml.Unmarshal([]byte(tt.doc), &node); err != nil {
			t.Fatal(err)
		}
		var cfg Config
		err := node.Content[0].Decode(&cfg) // as internal/config's RawYAML.Decode does
		if !errors.Is(err, ErrInvalidConfig) || !contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %q", tt.doc, err, tt.want)
		}
	}
}

func TestAPIKeyFromEnvironment(t *testing.T) {
	env := func(vars map[string]string) Option {
		return WithGetenv(func(k string) string { return vars[k] })
	}
	// The default variable for openai may be unset: local servers need no key.
	f := newFake(t, KindOpenAI)
	c, err := New(Config{Provider: KindOpenAI, BaseURL: f.baseURL(), Model: "m"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(context.Background(), request("x")); err != nil {
		t.Fatal(err)
	}
	if h := f.requests()[0].header.Get("Authorization"); h != "" {
		t.Fatalf("Authorization %q sent without a key", h)
	}
	// A variable named explicitly must be set.
	_, err = New(Config{Provider: KindOpenAI, APIKeyEnv: "MY_KEY"}, env(nil))
	if !errors.Is(err, ErrNoAPIKey) || !contains(err.Error(), "MY_KEY") {
		t.Fatalf("err = %v", err)
	}
	// Anthropic always needs one.
	if _, err = New(Config{Provider: KindAnthropic}, env(nil)); !errors.Is(err, ErrNoAPIKey) {
		t.Fatalf("err = %v", err)
	}
	c, err = New(Config{Provider: KindAnthropic, APIKeyEnv: "MY_KEY"}, env(map[string]string{"MY_KEY": " k-1 \n"}))
	if err != nil || c.key != "k-1" {
		t.Fatalf("%v key=%q", err, c.key)
	}
	// An invalid config is refused before the environment is read.
	if _, err = New(Config{Provider: "x"}, env(nil)); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
}
