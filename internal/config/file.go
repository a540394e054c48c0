package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/policyconfig"
	"gopkg.in/yaml.v3"
)

// ErrInvalid is wrapped by every error about the config file's content.
var ErrInvalid = errors.New("invalid config")

// Config is the daemon's config file. A zero field takes its documented
// default (see Defaults and docs/configuration.md, "Where things live"); the file holds
// only what the user set. A *Config returned by a Manager is shared and must
// not be modified.
type Config struct {
	// Socket is the Unix socket path (default DefaultSocketPath).
	Socket string `yaml:"socket,omitempty" json:"socket"`
	// PluginsDir is the plugins directory, watched for changes.
	PluginsDir string `yaml:"plugins_dir,omitempty" json:"plugins_dir"`
	// StateDir holds the store, state.db (default DefaultStateDir).
	StateDir string `yaml:"state_dir,omitempty" json:"state_dir"`
	// CacheDir holds wazero's compilation cache.
	CacheDir string `yaml:"cache_dir,omitempty" json:"cache_dir"`
	// LogLevel is trace, debug, info, warn, error or off (default info).
	LogLevel string `yaml:"log_level,omitempty" json:"log_level"`

	// Policy is the policy a request that names none gets (DefaultPolicy
	// when neither it nor Pipeline is set; see DefaultPipeline).
	Policy string `yaml:"policy,omitempty" json:"policy,omitempty"`
	// Pipeline is the pipeline a request that names none gets (exclusive
	// with Policy).
	Pipeline []string `yaml:"pipeline,omitempty" json:"pipeline,omitempty"`
	// Policies is each policy's config, by policy name. It sits above the
	// environment and the plugin's defaults, below a request's overrides.
	Policies map[string]map[string]any `yaml:"policies,omitempty" json:"policies,omitempty"`
	// Compact is the Context Compaction PRD's block; it is the config of
	// the "llm" policy (policies.llm, if also set, wins key by key).
	Compact *Compact `yaml:"compact,omitempty" json:"compact,omitempty"`
	// LLM is the LLM provider block. It is reserved: kept as raw YAML until
	// the provider code gives it a type.
	LLM *RawYAML `yaml:"llm,omitempty" json:"llm,omitempty"`

	Limits Limits `yaml:"limits,omitempty" json:"limits"`
	State  State  `yaml:"state,omitempty" json:"state"`
	TCP    TCP    `yaml:"tcp,omitempty" json:"tcp"`
	// Proxy configures the OpenAI- and Anthropic-compatible proxy.
	Proxy Proxy `yaml:"proxy,omitempty" json:"proxy"`
	// Log configures the request log (GET /v1/requests) and its access
	// file.
	Log Log `yaml:"log,omitempty" json:"log"`
}

// Compact is the `compact:` block of the Context Compaction PRD. Only the
// keys that are set reach the llm policy; the others take the plugin's
// defaults.
type Compact struct {
	MaxTokens        *int    `yaml:"max_tokens,omitempty" json:"max_tokens,omitempty"`
	TokenThreshold   *int    `yaml:"token_threshold,omitempty" json:"token_threshold,omitempty"`
	MessageThreshold *int    `yaml:"message_threshold,omitempty" json:"message_threshold,omitempty"`
	TurnThreshold    *int    `yaml:"turn_threshold,omitempty" json:"turn_threshold,omitempty"`
	RetentionWindow  *int    `yaml:"retention_window,omitempty" json:"retention_window,omitempty"`
	Model            *string `yaml:"model,omitempty" json:"model,omitempty"`
	Prompt           *string `yaml:"prompt,omitempty" json:"prompt,omitempty"`
	SummaryTag       *string `yaml:"summary_tag,omitempty" json:"summary_tag,omitempty"`
}

// DefaultPolicy is the policy a request that names none gets when the
// config file sets neither policy nor pipeline.
const DefaultPolicy = "ledger"

// LLMPolicy is the policy the `compact:` block configures.
const LLMPolicy = "llm"

// Values returns the keys the block sets, as policy config.
func (c *Compact) Values() map[string]any {
	out := map[string]any{}
	if c == nil {
		return out
	}
	ints := map[string]*int{"max_tokens": c.MaxTokens, "token_threshold": c.TokenThreshold,
		"message_threshold": c.MessageThreshold, "turn_threshold": c.TurnThreshold, "retention_window": c.RetentionWindow}
	for k, v := range ints {
		if v != nil {
			out[k] = *v
		}
	}
	strs := map[string]*string{"model": c.Model, "prompt": c.Prompt, "summary_tag": c.SummaryTag}
	for k, v := range strs {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// Limits bound requests and plugins.
type Limits struct {
	// MaxBodyBytes caps a request body (default 32 MiB): larger is a 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes,omitempty" json:"max_body_bytes"`
	// MaxMessages caps a conversation's length (default 10000): more is a
	// 413.
	MaxMessages int `yaml:"max_messages,omitempty" json:"max_messages"`
	// RequestTimeout bounds one API request, compaction included (default
	// 2m). A compaction cut short returns the input unchanged with a
	// warning.
	RequestTimeout Duration `yaml:"request_timeout,omitempty" json:"request_timeout"`
	// ReadTimeout bounds reading a request, body included (default 1m).
	ReadTimeout Duration `yaml:"read_timeout,omitempty" json:"read_timeout"`
	// WriteTimeout bounds a request from the end of its headers to the end
	// of the response (default request_timeout + 30s).
	WriteTimeout Duration `yaml:"write_timeout,omitempty" json:"write_timeout"`
	// IdleTimeout closes idle keep-alive connections (default 2m).
	IdleTimeout Duration `yaml:"idle_timeout,omitempty" json:"idle_timeout"`
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM
	// (default 30s).
	ShutdownTimeout Duration `yaml:"shutdown_timeout,omitempty" json:"shutdown_timeout"`
	// ConversationCacheBytes bounds the memory of recent conversations the
	// daemon keeps, so a request that repeats one plus a new turn is
	// parsed and counted only for the turn (default 64 MiB).
	ConversationCacheBytes int64 `yaml:"conversation_cache_bytes,omitempty" json:"conversation_cache_bytes"`
	// PluginIdleUnload unloads a plugin's compiled code and instances
	// once it has had no call for this long; its next call compiles it
	// from the compilation cache (default 5m).
	PluginIdleUnload Duration `yaml:"plugin_idle_unload,omitempty" json:"plugin_idle_unload"`
	// MaxTotalMemoryMB is the memory budget of every plugin together, in
	// MiB: each instance holds its memory limit plus a stack reserve of
	// 100 MiB of it, each compile its estimated cost. A request that finds
	// no room within 2s gets its input back with a warning (default: half
	// of the machine's memory or of the daemon's cgroup limit).
	MaxTotalMemoryMB int `yaml:"max_total_memory_mb,omitempty" json:"max_total_memory_mb"`
	// MaxCompileMemoryMB is the compile budget of one plugin module, in
	// MiB: a module whose compile is estimated to cost more is refused
	// before it compiles (default: half of max_total_memory_mb, at most
	// 1024).
	MaxCompileMemoryMB int `yaml:"max_compile_memory_mb,omitempty" json:"max_compile_memory_mb"`
	// Plugin holds every plugin's limits (the host's defaults otherwise).
	Plugin PluginLimits `yaml:"plugin,omitempty" json:"plugin"`
	// Plugins override Plugin field by field, by policy name.
	Plugins map[string]PluginLimits `yaml:"plugins,omitempty" json:"plugins,omitempty"`
}

// PluginLimits are one plugin's host limits; zero fields take the host's
// defaults (256 MiB, 10s, 32 MiB, GOMAXPROCS instances, 10^9 and 5*10^7
// steps of work).
type PluginLimits struct {
	MaxMemoryMB    int      `yaml:"max_memory_mb,omitempty" json:"max_memory_mb,omitempty"`
	CallTimeout    Duration `yaml:"call_timeout,omitempty" json:"call_timeout,omitempty"`
	MaxOutputBytes int      `yaml:"max_output_bytes,omitempty" json:"max_output_bytes,omitempty"`
	MaxInstances   int      `yaml:"max_instances,omitempty" json:"max_instances,omitempty"`
	// WorkBudget and StartWorkBudget bound a call's work and an
	// instantiation's, in steps (host.Limits).
	WorkBudget      int64 `yaml:"work_budget,omitempty" json:"work_budget,omitempty"`
	StartWorkBudget int64 `yaml:"start_work_budget,omitempty" json:"start_work_budget,omitempty"`
}

// Host returns the limits as the host takes them. Out-of-range values
// (which Validate refuses) are passed on as they are, never wrapped, so
// the host refuses them too.
func (l PluginLimits) Host() host.Limits {
	pages := uint32(0)
	switch {
	case l.MaxMemoryMB < 0 || l.MaxMemoryMB > math.MaxUint32/16:
		pages = math.MaxUint32
	default:
		pages = uint32(l.MaxMemoryMB) * 16 // 64 KiB pages
	}
	return host.Limits{
		MaxMemoryPages: pages,
		CallTimeout:    l.CallTimeout.D(),
		MaxOutputBytes: l.MaxOutputBytes,
		MaxInstances:   l.MaxInstances,
		// A negative budget becomes one over the host's range.
		WorkBudget:      uint64(l.WorkBudget),
		StartWorkBudget: uint64(l.StartWorkBudget),
	}
}

// PluginLimits returns the host limits of every plugin (Plugin) and the
// per-policy overrides (Plugins over Plugin).
func (l Limits) PluginLimits() (host.Limits, map[string]host.Limits) {
	per := make(map[string]host.Limits, len(l.Plugins))
	for name, pl := range l.Plugins {
		per[name] = pl.Host()
	}
	return l.Plugin.Host(), per
}

// State bounds the store.
type State struct {
	// TTL expires a conversation (its status and plugin state) this long
	// after its last request (default 168h).
	TTL Duration `yaml:"ttl,omitempty" json:"ttl"`
	// MaxConversations caps tracked conversations; the least recently
	// seen go first (default 10000).
	MaxConversations int `yaml:"max_conversations,omitempty" json:"max_conversations"`
	// MaxStateBytes caps the plugin state kept over all conversations
	// (default 256 MiB); the oldest writes go first.
	MaxStateBytes int64 `yaml:"max_state_bytes,omitempty" json:"max_state_bytes"`
	// URL puts the store on a Redis or Valkey server that the replicas of
	// a fleet share, instead of the embedded state.db: redis://host:port/db,
	// rediss://host:port/db (TLS), unix:///path/redis.sock?db=N, or several
	// comma-separated redis:// addresses for a Redis Cluster. A password
	// may be in the URL (redis://user:pass@host) or in PasswordFile. The
	// COMPACTD_STATE_URL environment variable overrides it. Empty: bbolt.
	URL string `yaml:"url,omitempty" json:"url,omitempty"`
	// PasswordFile holds the Redis password (its first line), so the
	// config need not.
	PasswordFile string `yaml:"password_file,omitempty" json:"password_file,omitempty"`
	// Timeout bounds one call to the shared store (default 1s): a call
	// that waits longer marks the store degraded, and requests are served
	// from themselves alone until a probe finds the server again. It is a
	// wall-clock bound on a network call, so it is generous: a busy CPU
	// delays the answer of a healthy server too (250 ms was tripped under
	// load). No effect on the embedded store.
	Timeout Duration `yaml:"timeout,omitempty" json:"timeout"`
	// FlushInterval is how often the counters of conversations' status and
	// the request log are written behind to the store (default 1s): the
	// most a crash (kill -9, power loss) loses. Shorter costs the store
	// more writes; read at start.
	FlushInterval Duration `yaml:"flush_interval,omitempty" json:"flush_interval"`
	// Titles: false stops deriving a conversation's title from the first
	// line of its task (its first user message), for deployments that
	// keep no prompt text at all; a title sent with X-Compactd-Title (or
	// /v1/compact's "title") is still kept. Default true.
	Titles *bool `yaml:"titles,omitempty" json:"titles,omitempty"`
}

// DeriveTitles reports whether conversations get a title derived from
// their task (state.titles, default true).
func (s *State) DeriveTitles() bool { return s.Titles == nil || *s.Titles }

// Log configures the request log: one record per proxied and
// /v1/compact request (internal/requestlog).
type Log struct {
	// Requests bounds the records held in memory (default 10000).
	Requests int `yaml:"requests,omitempty" json:"requests"`
	// RequestsPerConversation bounds one conversation's records, in
	// memory and in the state store (default 500).
	RequestsPerConversation int `yaml:"requests_per_conversation,omitempty" json:"requests_per_conversation"`
	// AccessFile, if set, gets every record as a JSON line.
	AccessFile string `yaml:"access_file,omitempty" json:"access_file,omitempty"`
	// AccessMaxBytes rotates the access file when a record would take it
	// past this size (default 100 MiB); AccessKeep rotated files are kept
	// (default 3).
	AccessMaxBytes int64 `yaml:"access_max_bytes,omitempty" json:"access_max_bytes"`
	AccessKeep     int   `yaml:"access_keep,omitempty" json:"access_keep"`
}

// EnvStateURL overrides state.url.
const EnvStateURL = "COMPACTD_STATE_URL"

// TCP configures the optional loopback listener. It is off unless Listen
// is set, and it always requires a bearer token.
type TCP struct {
	// Listen is a loopback address such as "127.0.0.1:7077".
	Listen string `yaml:"listen,omitempty" json:"listen,omitempty"`
	// TokenFile holds the bearer token; without it, $COMPACTD_TOKEN does.
	TokenFile string `yaml:"token_file,omitempty" json:"token_file,omitempty"`
}

// Defaults for the fields whose zero value is not "off".
const (
	DefaultLogLevel         = "info"
	DefaultMaxBodyBytes     = 32 << 20
	DefaultMaxMessages      = 10000
	DefaultRequestTimeout   = 2 * time.Minute
	DefaultReadTimeout      = time.Minute
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultStateTTL         = 7 * 24 * time.Hour
	DefaultMaxConversations = 10000
	DefaultMaxStateBytes    = 256 << 20
	DefaultStateTimeout     = time.Second
	DefaultStateFlush       = time.Second
	// Defaults of the log section.
	DefaultLogRequests                = 10000
	DefaultLogRequestsPerConversation = 500
	DefaultAccessMaxBytes             = 100 << 20
	DefaultAccessKeep                 = 3
	// DefaultConversationCacheBytes and DefaultPluginIdleUnload are the
	// defaults of limits.conversation_cache_bytes and
	// limits.plugin_idle_unload.
	DefaultConversationCacheBytes = 64 << 20
	DefaultPluginIdleUnload       = 5 * time.Minute
)

// WithDefaults returns a copy of c with every unset field set: first from
// base (paths the caller computes), then from the constants above.
func (c *Config) WithDefaults(base Config) *Config {
	out := *c
	setS := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	setS(&out.Socket, base.Socket)
	setS(&out.PluginsDir, base.PluginsDir)
	setS(&out.StateDir, base.StateDir)
	setS(&out.CacheDir, base.CacheDir)
	setS(&out.LogLevel, base.LogLevel)
	setS(&out.LogLevel, DefaultLogLevel)
	l := &out.Limits
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxMessages == 0 {
		l.MaxMessages = DefaultMaxMessages
	}
	if l.MaxTotalMemoryMB == 0 {
		l.MaxTotalMemoryMB = max(int(host.DefaultMaxTotalMemory()>>20), MinTotalMemoryMB)
	}
	if l.MaxCompileMemoryMB == 0 {
		l.MaxCompileMemoryMB = max(min(l.MaxTotalMemoryMB/2, host.DefaultMaxCompileMemory>>20), MinCompileMemoryMB)
	}
	setD := func(dst *Duration, v time.Duration) {
		if *dst == 0 {
			*dst = Duration(v)
		}
	}
	setD(&l.RequestTimeout, DefaultRequestTimeout)
	setD(&l.ReadTimeout, DefaultReadTimeout)
	setD(&l.WriteTimeout, l.RequestTimeout.D()+30*time.Second)
	setD(&l.IdleTimeout, DefaultIdleTimeout)
	setD(&l.ShutdownTimeout, DefaultShutdownTimeout)
	setD(&l.PluginIdleUnload, DefaultPluginIdleUnload)
	if l.ConversationCacheBytes == 0 {
		l.ConversationCacheBytes = DefaultConversationCacheBytes
	}
	setD(&out.State.TTL, DefaultStateTTL)
	setD(&out.State.Timeout, DefaultStateTimeout)
	setD(&out.State.FlushInterval, DefaultStateFlush)
	if out.State.MaxConversations == 0 {
		out.State.MaxConversations = DefaultMaxConversations
	}
	if out.State.MaxStateBytes == 0 {
		out.State.MaxStateBytes = DefaultMaxStateBytes
	}
	if out.Log.Requests == 0 {
		out.Log.Requests = DefaultLogRequests
	}
	if out.Log.RequestsPerConversation == 0 {
		out.Log.RequestsPerConversation = DefaultLogRequestsPerConversation
	}
	if out.Log.AccessMaxBytes == 0 {
		out.Log.AccessMaxBytes = DefaultAccessMaxBytes
	}
	if out.Log.AccessKeep == 0 {
		out.Log.AccessKeep = DefaultAccessKeep
	}
	out.Proxy = out.Proxy.withDefaults(nil)
	def, single := out.proxyDefault()
	out.Proxy.compileRoutes(def, single)
	return &out
}

// DefaultPipeline returns the policies a request without policy or
// pipeline runs: the config's policy or pipeline, else DefaultPolicy.
func (c *Config) DefaultPipeline() []string {
	switch {
	case c.Policy != "":
		return []string{c.Policy}
	case len(c.Pipeline) > 0:
		return c.Pipeline
	}
	return []string{DefaultPolicy}
}

// Layers returns the config layers c and the environment give policy,
// lowest precedence first: environment, the `compact:` block (llm only),
// then policies.<name>.
func (c *Config) Layers(policy string, getenv func(string) string) []policyconfig.Layer {
	var out []policyconfig.Layer
	if getenv != nil {
		if l := EnvLayer(policy, getenv); l != nil {
			out = append(out, *l)
		}
	}
	if policy == LLMPolicy && c.Compact != nil {
		if v := c.Compact.Values(); len(v) > 0 {
			out = append(out, policyconfig.Layer{Source: "config file (compact)", Values: v})
		}
	}
	if v := c.Policies[policy]; len(v) > 0 {
		out = append(out, policyconfig.Layer{Source: "config file (policies." + policy + ")", Values: v})
	}
	return out
}

// ConfiguredPolicies lists the policies c names anywhere, sorted.
func (c *Config) ConfiguredPolicies() []string {
	set := map[string]bool{}
	for name := range c.Policies {
		set[name] = true
	}
	// The policies the file names; the implicit DefaultPolicy is not
	// "configured" (no warning when it is not loaded).
	if c.Policy != "" {
		set[c.Policy] = true
	}
	for _, n := range c.Pipeline {
		set[n] = true
	}
	if c.Proxy.Policy != "" {
		set[c.Proxy.Policy] = true
	}
	for _, n := range c.Proxy.Pipeline {
		set[n] = true
	}
	for _, n := range c.Proxy.routePolicies() {
		set[n] = true
	}
	for _, pl := range c.Proxy.ShadowPipelines() {
		for _, n := range pl {
			set[n] = true
		}
	}
	if c.Compact != nil {
		set[LLMPolicy] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Parse reads a config file's bytes. source names the file in errors. An
// empty document is the zero Config. Unknown keys are errors that name the
// key (with its dotted path and line) and list the keys allowed there.
func Parse(data []byte, source string) (*Config, error) {
	cfg, _, err := parse(data, source, true)
	return cfg, err
}

// parse also returns the document, for partial updates. lines says
// whether a range error names its line.
func parse(data []byte, source string, lines bool) (*Config, *yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalid, source, err)
	}
	cfg := &Config{}
	root := docRoot(&doc)
	if root == nil {
		return cfg, &doc, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("%w: %s: line %d: want a mapping of settings at the top level", ErrInvalid, source, root.Line)
	}
	if err := checkKeys(root, reflect.TypeOf(Config{}), ""); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalid, source, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalid, source, strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "))
	}
	if err := cfg.Validate(); err != nil {
		var re *RangeError
		if lines && errors.As(err, &re) {
			re.Line = lineOf(root, re.Key)
		}
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrInvalid, source, err)
	}
	return cfg, &doc, nil
}

func docRoot(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		return doc.Content[0]
	}
	if doc.Kind == 0 {
		return nil
	}
	return doc
}

var (
	unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
	nodeType        = reflect.TypeOf(yaml.Node{})
)

// checkKeys walks n against the Go type t and reports the first mapping
// key t does not know, with its dotted path.
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nodeType || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil // the decoder reports the type mismatch
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" {
				if err := checkKeys(v, t, path); err != nil {
					return err
				}
				continue
			}
			f, ok := fields[k.Value]
			if !ok {
				known := make([]string, 0, len(fields))
				for name := range fields {
					known = append(known, name)
				}
				sort.Strings(known)
				where := "at the top level"
				if path != "" {
					where = "under " + path
				}
				return fmt.Errorf("line %d: unknown key %q (known keys %s: %s)", k.Line, join(path, k.Value), where, strings.Join(known, ", "))
			}
			if err := checkKeys(v, f.Type, join(path, k.Value)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkKeys(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, item := range n.Content {
			if err := checkKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func yamlFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Validate checks what the types cannot: names, exclusive keys, and the
// range of every number (a *RangeError names the key and its range).
func (c *Config) Validate() error {
	if c.Policy != "" && len(c.Pipeline) > 0 {
		return fmt.Errorf("policy and pipeline are exclusive: set one")
	}
	for _, n := range c.DefaultPipeline() {
		if !abi.ValidName(n) {
			return fmt.Errorf("policy name %q: want 1-64 characters of a-z, 0-9, _ and -, starting with a letter", n)
		}
	}
	for name, values := range c.Policies {
		if !abi.ValidName(name) {
			return fmt.Errorf("policies: %q is not a policy name", name)
		}
		if _, err := json.Marshal(values); err != nil {
			return fmt.Errorf("policies.%s: not expressible as JSON (keys must be strings): %v", name, err)
		}
	}
	for name := range c.Limits.Plugins {
		if !abi.ValidName(name) {
			return fmt.Errorf("limits.plugins: %q is not a policy name", name)
		}
	}
	if c.LogLevel != "" {
		switch strings.ToLower(c.LogLevel) {
		case "trace", "debug", "info", "warn", "error", "off":
		default:
			return fmt.Errorf("log_level %q: want trace, debug, info, warn, error or off", c.LogLevel)
		}
	}
	if err := c.checkRanges(); err != nil {
		return err
	}
	if c.TCP.Listen != "" {
		if err := CheckLoopback(c.TCP.Listen); err != nil {
			return fmt.Errorf("tcp.listen: %v", err)
		}
	}
	return c.Proxy.Validate()
}

// CheckLoopback reports whether addr (host:port) is a loopback address:
// the TCP listener never listens beyond this machine.
func CheckLoopback(addr string) error {
	hostPart, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %v", addr, err)
	}
	if hostPart == "localhost" {
		return nil
	}
	ip := net.ParseIP(hostPart)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address (use 127.0.0.1 or [::1]); compactd does not listen beyond this machine", addr)
	}
	return nil
}

// RawYAML keeps a block as written, for a section whose type another part
// of compactd defines (the `llm:` provider block).
type RawYAML struct {
	Node *yaml.Node
}

// UnmarshalYAML keeps the node.
func (r *RawYAML) UnmarshalYAML(n *yaml.Node) error {
	c := *n
	r.Node = &c
	return nil
}

// MarshalYAML writes the node back.
func (r RawYAML) MarshalYAML() (any, error) { return r.Node, nil }

// IsZero reports whether the block is absent.
func (r RawYAML) IsZero() bool { return r.Node == nil }

// Decode decodes the block into v (a typed struct).
func (r *RawYAML) Decode(v any) error {
	if r == nil || r.Node == nil {
		return nil
	}
	return r.Node.Decode(v)
}

// MarshalJSON writes the block as JSON.
func (r RawYAML) MarshalJSON() ([]byte, error) {
	var v any
	if r.Node != nil {
		if err := r.Node.Decode(&v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(v)
}
