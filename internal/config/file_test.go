package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/policyconfig"
)

var _ compactor.ConfigSource = (*Manager)(nil)

const fullConfig = `# compactd config
socket: /run/compactd.sock
plugins_dir: /opt/compactd/plugins
state_dir: /var/lib/compactd
cache_dir: /var/cache/compactd
log_level: debug
policy: sliding
policies:
  sliding:
    window_size: 8   # keep more
    step: 2
  lastn: {n: 4}
compact:
  max_tokens: 2000
  token_threshold: 60000
  message_threshold: 40
  turn_threshold: 10
  retention_window: 6
  model: gpt-4o-mini
  prompt: "Summarize: {conversation}"
  summary_tag: summary
llm:
  provider: openai
  base_url: http://localhost:8080/v1
limits:
  max_body_bytes: 1048576
  max_messages: 500
  request_timeout: 5s
  read_timeout: 2s
  idle_timeout: 1m
  shutdown_timeout: 3s
  plugin:
    call_timeout: 300ms
    max_memory_mb: 64
  plugins:
    llm:
      call_timeout: 90s
      max_instances: 2
state:
  ttl: 24h
  max_conversations: 100
  max_state_bytes: 1000000
tcp:
  listen: 127.0.0.1:7077
  token_file: /etc/compactd/token
`

func TestParseFull(t *testing.T) {
	cfg, err := Parse([]byte(fullConfig), "full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Socket != "/run/compactd.sock" || cfg.Policy != "sliding" || cfg.LogLevel != "debug" {
		t.Errorf("paths: %+v", cfg)
	}
	if got := cfg.Policies["sliding"]["window_size"]; got != 8 {
		t.Errorf("policies.sliding.window_size = %v (%T)", got, got)
	}
	if got := cfg.Limits.Plugin.CallTimeout.D(); got != 300*time.Millisecond {
		t.Errorf("call_timeout = %v", got)
	}
	def, per := cfg.Limits.PluginLimits()
	if def != (host.Limits{CallTimeout: 300 * time.Millisecond, MaxMemoryPages: 64 * 16}) {
		t.Errorf("plugin limits = %+v", def)
	}
	if per["llm"] != (host.Limits{CallTimeout: 90 * time.Second, MaxInstances: 2}) {
		t.Errorf("llm limits = %+v", per["llm"])
	}
	var llm struct {
		Provider string `yaml:"provider"`
		BaseURL  string `yaml:"base_url"`
	}
	if err := cfg.LLM.Decode(&llm); err != nil || llm.Provider != "openai" || llm.BaseURL != "http://localhost:8080/v1" {
		t.Errorf("llm block = %+v, %v", llm, err)
	}
	want := map[string]any{"max_tokens": 2000, "token_threshold": 60000, "message_threshold": 40, "turn_threshold": 10,
		"retention_window": 6, "model": "gpt-4o-mini", "prompt": "Summarize: {conversation}", "summary_tag": "summary"}
	if got := cfg.Compact.Values(); !reflect.DeepEqual(got, want) {
		t.Errorf("compact values = %v", got)
	}
	// The effective config renders as JSON with durations as strings.
	b, err := json.Marshal(cfg.WithDefaults(Config{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"call_timeout":"300ms"`, `"ttl":"24h0m0s"`, `"write_timeout":"35s"`, `"llm":{"base_url":"http://localhost:8080/v1","provider":"openai"}`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("JSON lacks %s:\n%s", s, b)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"unknown top-level key", "sockett: /x\n", []string{`line 1: unknown key "sockett"`, "known keys at the top level", "socket"}},
		{"unknown nested key", "limits:\n  plugin:\n    call_timeot: 1s\n", []string{`line 3: unknown key "limits.plugin.call_timeot"`, "call_timeout"}},
		{"unknown per-plugin limit", "limits:\n  plugins:\n    llm: {max_mem: 3}\n", []string{`unknown key "limits.plugins.llm.max_mem"`}},
		{"unknown compact key", "compact:\n  max_token: 3\n", []string{`unknown key "compact.max_token"`, "retention_window"}},
		{"unknown state key", "state: {tll: 1h}\n", []string{`unknown key "state.tll"`}},
		{"bare number duration", "limits:\n  request_timeout: 300\n", []string{`line 2`, `"300" is not a duration`}},
		{"bad duration", "state:\n  ttl: forever\n", []string{`"forever" is not a duration`}},
		{"negative duration", "state:\n  ttl: -1h\n", []string{"negative"}},
		{"wrong type", "limits:\n  max_messages: lots\n", []string{"line 2", "lots"}},
		{"policy and pipeline", "policy: a\npipeline: [b]\n", []string{"exclusive"}},
		{"bad policy name", "pipeline: [Sliding]\n", []string{`"Sliding"`}},
		{"bad policies key", "policies:\n  BAD: {}\n", []string{`"BAD" is not a policy name`}},
		{"top level not a mapping", "- a\n- b\n", []string{"want a mapping"}},
		{"not yaml", "a: [\n", []string{"invalid config"}},
		{"non-loopback tcp", "tcp: {listen: 0.0.0.0:7077}\n", []string{"not a loopback address"}},
		{"bad log level", "log_level: loud\n", []string{"log_level"}},
		{"negative limit", "limits: {max_messages: -1}\n", []string{"line 1", "limits.max_messages: -1 is out of range", "1 to 1000000"}},
		{"negative compact", "compact: {max_tokens: -5}\n", []string{"compact.max_tokens"}},
		// F4: limits that once crashed a reload or wrapped around.
		{"negative instances", "limits:\n  plugin:\n    max_instances: -3\n", []string{"line 3", "limits.plugin.max_instances: -3 is out of range", "1 to 256"}},
		{"memory budget too small", "limits: {max_total_memory_mb: 64}\n", []string{"line 1", "limits.max_total_memory_mb: 64 is out of range", "128 to 4194304"}},
		{"compile budget over the memory budget", "limits:\n  max_total_memory_mb: 512\n  max_compile_memory_mb: 1024\n", []string{"line 3", "limits.max_compile_memory_mb: 1024 is out of range", "64 to 512"}},
		{"negative output", "limits:\n  plugin: {max_output_bytes: -1}\n", []string{"line 2", "limits.plugin.max_output_bytes: -1", "4096 to 1073741824"}},
		{"negative memory", "limits:\n  plugin: {max_memory_mb: -1}\n", []string{"limits.plugin.max_memory_mb: -1", "16 to 4096"}},
		{"tiny memory", "limits:\n  plugins:\n    sliding:\n      max_memory_mb: 1\n", []string{"line 4", "limits.plugins.sliding.max_memory_mb: 1", "16 to 4096"}},
		{"memory over 4 GiB", "limits: {plugin: {max_memory_mb: 5000}}\n", []string{"max_memory_mb: 5000"}},
		{"short call timeout", "limits: {plugin: {call_timeout: 1ms}}\n", []string{"call_timeout: 1ms", "10ms to 1h0m0s"}},
		{"huge body", "limits: {max_body_bytes: 4294967296}\n", []string{"limits.max_body_bytes: 4294967296"}},
		{"zero ttl is the default, one second is not", "state: {ttl: 1s}\n", []string{"state.ttl: 1s", "1m0s to"}},
		{"a store timeout under 10ms", "state: {timeout: 1ms}\n", []string{"state.timeout: 1ms", "10ms to 1m0s"}},
		{"a write-behind over a minute", "state: {flush_interval: 2m}\n", []string{"state.flush_interval: 2m0s", "10ms to 1m0s"}},
		{"float for an integer", "limits: {max_messages: 1e100}\n", []string{"line 1", "1e100"}},
		{"long pipeline", "pipeline: [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q]\n", []string{"pipeline: a list of 17 policies", "1 to 16"}},
		{"long socket path", "socket: /" + strings.Repeat("s", 120) + "\n", []string{"socket: a path of 121 bytes"}},
		{"non-string nested keys", "policies:\n  sliding:\n    a: {1: x}\n", []string{"keys must be strings"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), "c.yaml")
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "\n", "# only a comment\n", "{}"} {
		cfg, err := Parse([]byte(in), "c.yaml")
		if err != nil || !reflect.DeepEqual(cfg, &Config{}) {
			t.Errorf("Parse(%q) = %+v, %v", in, cfg, err)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	c := (&Config{}).WithDefaults(Config{Socket: "/s", PluginsDir: "/p"})
	if c.Socket != "/s" || c.PluginsDir != "/p" || c.LogLevel != "info" {
		t.Errorf("paths: %+v", c)
	}
	l := c.Limits
	if l.MaxBodyBytes != DefaultMaxBodyBytes || l.MaxMessages != DefaultMaxMessages || l.RequestTimeout.D() != DefaultRequestTimeout ||
		l.WriteTimeout.D() != DefaultRequestTimeout+30*time.Second || l.ShutdownTimeout.D() != DefaultShutdownTimeout {
		t.Errorf("limits: %+v", l)
	}
	if c.State.TTL.D() != DefaultStateTTL || c.State.MaxConversations != DefaultMaxConversations || c.State.MaxStateBytes != DefaultMaxStateBytes {
		t.Errorf("state: %+v", c.State)
	}
}

func TestLayers(t *testing.T) {
	cfg, err := Parse([]byte(fullConfig+"\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policies["llm"] = map[string]any{"max_tokens": 500}
	env := map[string]string{"LLM_COMPACTION_BATCH_SIZE": "6"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name, policy string
		want         []policyconfig.Layer
	}{
		{"file only", "sliding", []policyconfig.Layer{{Source: "config file (policies.sliding)", Values: map[string]any{"window_size": 8, "step": 2}}}},
		{"env only", "recap", []policyconfig.Layer{{Source: "environment", Values: map[string]any{"batch_size": int64(6)}}}},
		{"compact block below policies.llm", "llm", []policyconfig.Layer{
			{Source: "config file (compact)", Values: cfg.Compact.Values()},
			{Source: "config file (policies.llm)", Values: map[string]any{"max_tokens": 500}}}},
		{"nothing", "other", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cfg.Layers(tt.policy, getenv); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Layers(%s) = %#v\nwant %#v", tt.policy, got, tt.want)
			}
		})
	}
	if got := cfg.ConfiguredPolicies(); !reflect.DeepEqual(got, []string{"lastn", "llm", "sliding"}) {
		t.Errorf("ConfiguredPolicies = %v", got)
	}
}

func TestDefaultPaths(t *testing.T) {
	tests := []struct {
		name                 string
		env                  map[string]string
		socket, state, conff string
	}{
		{"home only", map[string]string{"HOME": "/h"}, "/h/.local/state/compactd/compactd.sock", "/h/.local/state/compactd", "/h/.config/compactd/config.yaml"},
		{"xdg", map[string]string{"HOME": "/h", "XDG_RUNTIME_DIR": "/run/user/1", "XDG_STATE_HOME": "/st", "XDG_CONFIG_HOME": "/cf"},
			"/run/user/1/compactd.sock", "/st/compactd", "/cf/compactd/config.yaml"},
		{"explicit", map[string]string{"COMPACTD_SOCKET": "/x.sock", "COMPACTD_CONFIG": "/c.yaml", "HOME": "/h"}, "/x.sock", "/h/.local/state/compactd", "/c.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			if got := DefaultSocketPath(getenv); got != tt.socket {
				t.Errorf("socket = %s", got)
			}
			if got := DefaultStateDir(getenv); got != tt.state {
				t.Errorf("state = %s", got)
			}
			if got := DefaultConfigPath(getenv); got != tt.conff {
				t.Errorf("config = %s", got)
			}
		})
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:1", "[::1]:7077", "localhost:80", "127.0.0.2:9"} {
		if err := CheckLoopback(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:1", ":7077", "10.0.0.1:80", "example.com:80", "nope"} {
		if err := CheckLoopback(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func newManager(t *testing.T, content string, opts Options) *Manager {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "config.yaml")
	}
	if content != "" {
		if err := os.WriteFile(opts.Path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	opts.Getenv = func(string) string { return "" }
	m, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestManagerMissingFile(t *testing.T) {
	m := newManager(t, "", Options{Defaults: Config{Socket: "/d.sock"}})
	if c := m.Current(); c.Socket != "/d.sock" || c.Limits.MaxMessages != DefaultMaxMessages {
		t.Errorf("defaults not applied: %+v", c)
	}
	// Update creates the file, owner-only.
	if _, err := m.Update([]byte(`{"policy":"sliding"}`)); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(m.Path())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("created file: %v %v", st, err)
	}
	b, _ := os.ReadFile(m.Path())
	if string(b) != "policy: sliding\n" {
		t.Errorf("file = %q", b)
	}
}

func TestManagerOpenInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("bogus: 1\n"), 0o600)
	if _, err := Open(Options{Path: path}); err == nil || !strings.Contains(err.Error(), `unknown key "bogus"`) {
		t.Errorf("Open = %v", err)
	}
}

func TestManagerReload(t *testing.T) {
	var changes [][2]*Config
	m := newManager(t, "policy: sliding\nlimits: {max_messages: 5}\n", Options{
		OnChange: func(old, new *Config) { changes = append(changes, [2]*Config{old, new}) },
		Override: func(c *Config) { c.Socket = "/flag.sock" },
	})
	if c := m.Current(); c.Policy != "sliding" || c.Limits.MaxMessages != 5 || c.Socket != "/flag.sock" {
		t.Fatalf("initial: %+v", c)
	}
	// An invalid file keeps the running config.
	os.WriteFile(m.Path(), []byte("policy: lastn\nlimits: {max_mesages: 9}\n"), 0o600)
	if _, err := m.Reload(); err == nil || !strings.Contains(err.Error(), "limits.max_mesages") {
		t.Fatalf("Reload of a bad file = %v", err)
	}
	if m.Current().Policy != "sliding" || len(changes) != 0 {
		t.Fatalf("bad reload changed the config")
	}
	// A valid one replaces it; the flag still wins; restart-only settings
	// are reported.
	os.WriteFile(m.Path(), []byte("policy: lastn\nsocket: /file.sock\nstate_dir: /elsewhere\nlimits: {max_messages: 9}\nstate: {url: \"redis://r:6379/0\", timeout: 2s, flush_interval: 50ms}\n"), 0o600)
	ch, err := m.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Current(); c.Policy != "lastn" || c.Limits.MaxMessages != 9 || c.Socket != "/flag.sock" {
		t.Errorf("after reload: %+v", c)
	}
	if !reflect.DeepEqual(ch.RestartRequired, []string{"state_dir", "state.url", "state.timeout", "state.flush_interval"}) {
		t.Errorf("restart required = %v", ch.RestartRequired)
	}
	if len(changes) != 1 || changes[0][0].Policy != "sliding" || changes[0][1].Policy != "lastn" {
		t.Errorf("OnChange calls: %v", changes)
	}
	// The check can reject a reload.
	m.SetCheck(func(c *Config) ([]string, error) {
		if c.Policy == "nope" {
			return nil, errors.New("rejected")
		}
		return []string{"a warning"}, nil
	})
	os.WriteFile(m.Path(), []byte("policy: nope\n"), 0o600)
	if _, err := m.Reload(); err == nil || err.Error() != "rejected" {
		t.Errorf("checked reload = %v", err)
	}
	if w, err := m.Check(); err != nil || len(w) != 1 {
		t.Errorf("Check = %v, %v", w, err)
	}
}

func TestManagerUpdate(t *testing.T) {
	const file = `# my settings
policy: sliding # the default
policies:
  sliding:
    window_size: 8
    step: 2
limits:
  max_messages: 100
`
	tests := []struct {
		name, patch string
		wantFile    string // "" = unchanged
		wantErr     string
	}{
		{"merge nested key, keep comments", `{"policies":{"sliding":{"step":4}}}`,
			"# my settings\npolicy: sliding # the default\npolicies:\n  sliding:\n    window_size: 8\n    step: 4\nlimits:\n  max_messages: 100\n", ""},
		{"replaced value keeps its comment", `{"policy":"lastn"}`,
			"# my settings\npolicy: lastn # the default\npolicies:\n  sliding:\n    window_size: 8\n    step: 2\nlimits:\n  max_messages: 100\n", ""},
		{"add new block in block style", `{"policies":{"lastn":{"n":3}},"limits":{"plugin":{"call_timeout":"250ms"}}}`,
			"# my settings\npolicy: sliding # the default\npolicies:\n  sliding:\n    window_size: 8\n    step: 2\n  lastn:\n    n: 3\nlimits:\n  max_messages: 100\n  plugin:\n    call_timeout: 250ms\n", ""},
		{"null deletes", `{"policies":{"sliding":{"step":null}},"limits":null}`,
			"# my settings\npolicy: sliding # the default\npolicies:\n  sliding:\n    window_size: 8\n", ""},
		// The file's head comment belonged to the deleted key. Settings
		// are written in the documented order.
		{"replace policy with pipeline", `{"policy":null,"pipeline":["sliding","lastn"]}`,
			"pipeline:\n  - sliding\n  - lastn\npolicies:\n  sliding:\n    window_size: 8\n    step: 2\nlimits:\n  max_messages: 100\n", ""},
		{"strings that look like numbers stay strings", `{"compact":{"model":"4","prompt":"true"}}`,
			"# my settings\npolicy: sliding # the default\npolicies:\n  sliding:\n    window_size: 8\n    step: 2\ncompact:\n  model: \"4\"\n  prompt: \"true\"\nlimits:\n  max_messages: 100\n", ""},
		{"emptied blocks go", `{"policies":{"sliding":null},"limits":{"max_messages":null}}`,
			"# my settings\npolicy: sliding # the default\n", ""},
		{"out of range rejected, nothing saved", `{"limits":{"plugin":{"max_instances":-3}}}`, "", "update: limits.plugin.max_instances: -3 is out of range (allowed: 1 to 256"},
		{"too large rejected", `{"compact":{"prompt":"` + strings.Repeat("p", MaxFileBytes) + `"}}`, "", "the limit is 1048576"},
		{"yaml patch", "limits:\n  max_messages: 7\n",
			"# my settings\npolicy: sliding # the default\npolicies:\n  sliding:\n    window_size: 8\n    step: 2\nlimits:\n  max_messages: 7\n", ""},
		{"unknown key rejected", `{"limits":{"max_mesages":7}}`, "", `unknown key "limits.max_mesages"`},
		{"invalid value rejected", `{"limits":{"request_timeout":"soon"}}`, "", `"soon" is not a duration`},
		{"exclusive keys rejected", `{"pipeline":["a"]}`, "", "exclusive"},
		{"not an object", `[1,2]`, "", "want an object"},
		{"not JSON", `{"a":`, "", "invalid config"},
		{"check rejects", `{"policy":"forbidden"}`, "", "forbidden policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, file, Options{Check: func(c *Config) ([]string, error) {
				if c.Policy == "forbidden" {
					return nil, errors.New("forbidden policy")
				}
				return nil, nil
			}})
			before := m.Current()
			ch, err := m.Update([]byte(tt.patch))
			got, _ := os.ReadFile(m.Path())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Update = %v, want error with %q", err, tt.wantErr)
				}
				if string(got) != file || m.Current() != before {
					t.Errorf("a rejected update changed something:\n%s", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.wantFile {
				t.Errorf("file:\n%s\nwant:\n%s", got, tt.wantFile)
			}
			if st, _ := os.Stat(m.Path()); st.Mode().Perm() != 0o640 {
				t.Errorf("mode changed to %v", st.Mode().Perm())
			}
			reparsed, err := Parse(got, "x")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m.Current(), m.effective(reparsed)) || ch.Config != m.Current() {
				t.Errorf("running config differs from the file")
			}
			if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(m.Path()), ".*tmp*")); len(leftovers) > 0 {
				t.Errorf("temporary files left: %v", leftovers)
			}
		})
	}
}

func TestManagerUpdateReadsFileAgain(t *testing.T) {
	m := newManager(t, "policy: sliding\n", Options{})
	// An edit by hand, not yet reloaded, is kept by an update.
	os.WriteFile(m.Path(), []byte("policy: sliding\nlimits: {max_messages: 3}\n"), 0o600)
	if _, err := m.Update([]byte(`{"state":{"ttl":"1h"}}`)); err != nil {
		t.Fatal(err)
	}
	c := m.Current()
	if c.Limits.MaxMessages != 3 || c.State.TTL.D() != time.Hour {
		t.Errorf("config = %+v", c)
	}
	// A broken file on disk blocks updates, naming the problem.
	os.WriteFile(m.Path(), []byte("oops: 1\n"), 0o600)
	if _, err := m.Update([]byte(`{"policy":"x"}`)); err == nil || !strings.Contains(err.Error(), `unknown key "oops"`) {
		t.Errorf("Update over a broken file = %v", err)
	}
}

func TestManagerConcurrent(t *testing.T) {
	m := newManager(t, "limits: {max_messages: 1}\n", Options{})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if _, err := m.Update([]byte(`{"policies":{"sliding":{"step":2}}}`)); err != nil {
					t.Error(err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				_ = m.Layers("sliding")
				_ = m.Current().Limits.MaxMessages
			}
		}()
	}
	wg.Wait()
	if _, err := m.Reload(); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(fullConfig))
	f.Add([]byte("limits: {plugin: {call_timeout: 1s}}"))
	f.Add([]byte("a: &x {b: 1}\nc: *x\n"))
	f.Add([]byte("<<: {socket: /x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, "fuzz")
		if err != nil {
			return
		}
		if _, err := json.Marshal(cfg.WithDefaults(Config{})); err != nil {
			t.Fatalf("accepted config does not render as JSON: %v", err)
		}
	})
}

// TestConfigDocExample parses the config file example of
// docs/configuration.md ("The config file"), so the reference stays true.
func TestConfigDocExample(t *testing.T) {
	const doc = "docs/configuration.md"
	b, err := os.ReadFile("../../" + doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n## The config file\n")
	if i < 0 {
		t.Fatalf("%s has no \"## The config file\" section", doc)
	}
	start := strings.Index(text[i:], "```yaml\n")
	if start < 0 {
		t.Fatalf("%s: no yaml block after \"## The config file\"", doc)
	}
	block := text[i+start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	cfg, err := Parse([]byte(block), doc)
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{opts: Options{Getenv: func(k string) string { return map[string]string{"HOME": "/home/u"}[k] }}}
	eff := m.effective(cfg)
	if eff.PluginsDir != "/home/u/.local/share/compactd/plugins" || eff.TCP.TokenFile != "/home/u/.config/compactd/token" {
		t.Errorf("~ not expanded: %s, %s", eff.PluginsDir, eff.TCP.TokenFile)
	}
	if eff.Limits.WriteTimeout.D() != 150*time.Second || eff.State.TTL.D() != DefaultStateTTL || eff.Limits.MaxBodyBytes != DefaultMaxBodyBytes {
		t.Errorf("%s's values are not the defaults it claims: %+v", doc, eff.Limits)
	}
}
