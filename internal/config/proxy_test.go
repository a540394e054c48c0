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
		p.ReadTimeout.D() != DefaultProxyReadTimeout || p.MaxEventBytes != DefaultProxyMaxEventBytes ||
		p.MaxStoredBytes != DefaultProxyMaxStoredBytes || !p.IncludeStreamUsage() || !p.UpstreamChangeAllowed() ||
		p.AllowUpstreamChange == nil {
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
		{"read timeout", "proxy: {read_timeout: 25h}", "proxy.read_timeout"},
		{"event bytes", "proxy: {max_event_bytes: 4096}", "proxy.max_event_bytes"},
		{"stored", "proxy: {max_stored_bytes: -5}", "proxy.max_stored_bytes"},
		{"both", "proxy: {policy: sliding, pipeline: [lastn]}", "exclusive"},
		{"name", "proxy: {policy: Bad}", "policy name"},
		{"shadow name", "proxy: {shadow: [sliding, 'toolresult,Bad']}", "proxy.shadow[1]"},
		{"shadow twice", "proxy: {shadow: [sliding, ' sliding']}", "listed twice"},
		{"shadow workers", "proxy: {shadow_workers: 65}", "proxy.shadow_workers"},
		{"shadow queue", "proxy: {shadow_queue: -1}", "proxy.shadow_queue"},
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

// TestUpstreamChangeLocked: with proxy.allow_upstream_change false, an
// update or a reload that changes an upstream, or turns the setting back
// on, is refused (ErrUpstreamLocked, naming the key) and changes
// nothing; other changes go through, and a start applies the file.
func TestUpstreamChangeLocked(t *testing.T) {
	const locked = "proxy:\n  openai: {upstream: 'https://api.openai.com/v1'}\n  allow_upstream_change: false\n"
	m := newManager(t, locked, Options{})
	for _, tc := range []struct{ name, patch, key string }{
		{"new upstream", `{"proxy":{"openai":{"upstream":"https://evil.example/v1"}}}`, "proxy.openai.upstream"},
		{"added upstream", `{"proxy":{"anthropic":{"upstream":"https://evil.example"}}}`, "proxy.anthropic.upstream"},
		{"removed upstream", `{"proxy":{"openai":null}}`, "proxy.openai.upstream"},
		{"unlock", `{"proxy":{"allow_upstream_change":true}}`, "proxy.allow_upstream_change"},
		{"unlock by deleting the key", `{"proxy":{"allow_upstream_change":null}}`, "proxy.allow_upstream_change"},
		{"unlock and change at once", `{"proxy":{"allow_upstream_change":true,"openai":{"upstream":"https://evil.example/v1"}}}`, "proxy.openai.upstream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Update([]byte(tc.patch))
			if !errors.Is(err, ErrUpstreamLocked) || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), "restart") {
				t.Fatalf("Update = %v", err)
			}
			if b, _ := os.ReadFile(m.Path()); string(b) != locked {
				t.Fatalf("the refused update was written: %q", b)
			}
			if p := m.Current().Proxy; p.OpenAI.Upstream != "https://api.openai.com/v1" || p.UpstreamChangeAllowed() {
				t.Fatalf("the refused update applied: %+v", p)
			}
		})
	}
	// Other settings, and the same upstream written again, go through.
	ch, err := m.Update([]byte(`{"proxy":{"threshold":0.5,"openai":{"upstream":"https://api.openai.com/v1/"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Previous.Proxy.Threshold != DefaultProxyThreshold || ch.Config.Proxy.Threshold != 0.5 {
		t.Errorf("Change: previous %v, new %v", ch.Previous.Proxy.Threshold, ch.Config.Proxy.Threshold)
	}
	// A reload of a file edited to another upstream is refused too.
	os.WriteFile(m.Path(), []byte("proxy: {openai: {upstream: 'https://evil.example/v1'}, allow_upstream_change: false}\n"), 0o600)
	if _, err := m.Reload(); !errors.Is(err, ErrUpstreamLocked) {
		t.Fatalf("Reload = %v", err)
	}
	if got := m.Current().Proxy.OpenAI.Upstream; got != "https://api.openai.com/v1" {
		t.Fatalf("upstream after a refused reload: %q", got)
	}
	// A start applies the file.
	m2, err := Open(Options{Path: m.Path(), Getenv: func(string) string { return "" }})
	if err != nil || m2.Current().Proxy.OpenAI.Upstream != "https://evil.example/v1" {
		t.Fatalf("Open = %v", err)
	}

	// Unlocked (the default), changes go through, and locking is one.
	m3 := newManager(t, "proxy: {openai: {upstream: 'https://api.openai.com/v1'}}\n", Options{})
	if _, err := m3.Update([]byte(`{"proxy":{"openai":{"upstream":"http://127.0.0.1:9/v1"}}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := m3.Update([]byte(`{"proxy":{"allow_upstream_change":false}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := m3.Update([]byte(`{"proxy":{"openai":{"upstream":"https://api.openai.com/v1"}}}`)); !errors.Is(err, ErrUpstreamLocked) {
		t.Fatalf("after locking: %v", err)
	}
}
