package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProxyParse(t *testing.T) {
	cfg, err := Parse([]byte(`
proxy:
  openai: {upstream: "http://127.0.0.1:8000/v1/", stream_usage: false}
  anthropic: {upstream: https://api.anthropic.com}
  pipeline: [toolresult, llm]
  threshold: 0.7
  trigger_tokens: 50000
  context_window: 32768
  timeout: 30s
  max_stored_bytes: 1048576
`), "proxy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	eff := cfg.WithDefaults(Config{})
	p := eff.Proxy
	if p.OpenAI.Upstream != "http://127.0.0.1:8000/v1" || p.Anthropic.Upstream != "https://api.anthropic.com" {
		t.Errorf("upstreams: %+v", p)
	}
	if p.IncludeStreamUsage() || p.Threshold != 0.7 || p.TriggerTokens != 50000 || p.ContextWindow != 32768 ||
		p.Timeout.D() != 30*time.Second || p.MaxStoredBytes != 1<<20 || !p.Enabled() {
		t.Errorf("proxy: %+v", p)
	}
	if got := eff.ProxyPipeline(); strings.Join(got, ",") != "toolresult,llm" {
		t.Errorf("ProxyPipeline = %v", got)
	}
}

func TestProxyDefaults(t *testing.T) {
	eff := (&Config{Policy: "sliding"}).WithDefaults(Config{})
	p := eff.Proxy
	if p.Enabled() || p.Threshold != DefaultProxyThreshold || p.Timeout.D() != DefaultProxyTimeout ||
		p.MaxStoredBytes != DefaultProxyMaxStoredBytes || !p.IncludeStreamUsage() {
		t.Errorf("defaults: %+v", p)
	}
	if got := eff.ProxyPipeline(); len(got) != 1 || got[0] != "sliding" {
		t.Errorf("ProxyPipeline falls back to the default policy: %v", got)
	}
}

func TestProxyInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"scheme", "proxy: {openai: {upstream: ftp://x/v1}}", "proxy.openai.upstream"},
		{"relative", "proxy: {anthropic: {upstream: /v1}}", "proxy.anthropic.upstream"},
		{"credentials", "proxy: {openai: {upstream: 'https://u:p@x/v1'}}", "credentials"},
		{"query", "proxy: {openai: {upstream: 'https://x/v1?a=1'}}", "query"},
		{"threshold high", "proxy: {threshold: 1.5}", "proxy.threshold"},
		{"threshold negative", "proxy: {threshold: -0.1}", "proxy.threshold"},
		{"trigger", "proxy: {trigger_tokens: -1}", "proxy.trigger_tokens"},
		{"window", "proxy: {context_window: 1000000000}", "proxy.context_window"},
		{"timeout", "proxy: {timeout: 10ms}", "proxy.timeout"},
		{"stored", "proxy: {max_stored_bytes: -5}", "proxy.max_stored_bytes"},
		{"both", "proxy: {policy: sliding, pipeline: [lastn]}", "exclusive"},
		{"name", "proxy: {policy: Bad}", "policy name"},
		{"unknown key", "proxy: {upstream: x}", `unknown key "proxy.upstream"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "p.yaml")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}

func TestProxyEnvironment(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{EnvOpenAIUpstream: "http://127.0.0.1:9/v1", EnvAnthropicUpstream: "http://127.0.0.1:9"}
	getenv := func(k string) string { return env[k] }
	m, err := Open(Options{Path: filepath.Join(dir, "none.yaml"), Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if p := m.Current().Proxy; p.OpenAI.Upstream != "http://127.0.0.1:9/v1" || p.Anthropic.Upstream != "http://127.0.0.1:9" {
		t.Errorf("environment upstreams not used: %+v", p)
	}

	// The file wins over the environment.
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("proxy: {openai: {upstream: 'http://127.0.0.1:8/v1'}}\n"), 0o600)
	m, err = Open(Options{Path: path, Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Current().Proxy.OpenAI.Upstream; got != "http://127.0.0.1:8/v1" {
		t.Errorf("openai upstream = %q, want the file's", got)
	}

	// An invalid variable is named at start.
	env[EnvAnthropicUpstream] = "localhost:8000"
	_, err = Open(Options{Path: filepath.Join(dir, "none.yaml"), Getenv: getenv})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvAnthropicUpstream) {
		t.Fatalf("err = %v, want ErrInvalid naming %s", err, EnvAnthropicUpstream)
	}
}
