package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/compactd/compactd/policyconfig"
	"gopkg.in/yaml.v3"
)

// Options configure a Manager.
type Options struct {
	// Path is the config file. It may not exist yet: the daemon then runs
	// on defaults, and Update creates it.
	Path string
	// Getenv reads the environment (os.Getenv if nil).
	Getenv func(string) string
	// Defaults fill the fields the file leaves unset, before the built-in
	// defaults (the daemon computes its default paths here).
	Defaults Config
	// Override applies what the command line set; it runs on every load,
	// after the file and before the defaults, so a flag always wins.
	Override func(*Config)
	// Check validates a candidate config beyond its syntax (e.g. policy
	// config against the loaded plugins' schemas). It returns warnings,
	// or an error that rejects the config. Nil accepts everything.
	Check func(*Config) (warnings []string, err error)
	// OnChange runs after a new config replaced old (by Reload or Update),
	// before they return. Calls are serialized.
	OnChange func(old, new *Config)
}

// Manager holds the daemon's running config and changes it: Reload reads
// the file again (SIGHUP), Update applies a partial update and writes the
// file back. A failed Reload or Update keeps the running config. It is
// safe for concurrent use; reads never block.
type Manager struct {
	opts Options
	mu   sync.Mutex // serializes Reload and Update
	cur  atomic.Pointer[Config]
}

// Change is the outcome of a successful Reload or Update.
type Change struct {
	// Config is the new effective config; Previous the one it replaced.
	Config   *Config
	Previous *Config
	// RestartRequired names the settings that changed but only take effect
	// on restart (socket, plugins_dir, state_dir, cache_dir, tcp, server
	// read/write/idle timeouts).
	RestartRequired []string
	// Warnings are non-fatal problems (e.g. config for a policy that is not
	// loaded).
	Warnings []string
}

// Open reads the config file (a missing file means defaults) and returns a
// Manager serving it. The Check option is not run here: plugins are not
// loaded yet. Call Check once they are.
func Open(opts Options) (*Manager, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	m := &Manager{opts: opts}
	cfg, _, _, err := m.read()
	if err != nil {
		return nil, err
	}
	eff := m.effective(cfg)
	// The file was validated as it was read; the environment's upstreams
	// are checked here.
	if err := eff.Proxy.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	m.cur.Store(eff)
	return m, nil
}

// SetCheck sets the Check option (the daemon sets it once its plugins are
// loaded). It is not safe to call concurrently with Reload or Update.
func (m *Manager) SetCheck(check func(*Config) ([]string, error)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.opts.Check = check
}

// Check runs the Check option on the running config.
func (m *Manager) Check() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opts.Check == nil {
		return nil, nil
	}
	return m.opts.Check(m.Current())
}

// Path returns the config file's path.
func (m *Manager) Path() string { return m.opts.Path }

// Current returns the running effective config. It must not be modified.
func (m *Manager) Current() *Config { return m.cur.Load() }

// Layers implements compactor.ConfigSource: the environment, then the
// config file (see Config.Layers).
func (m *Manager) Layers(policy string) []policyconfig.Layer {
	return m.Current().Layers(policy, m.opts.Getenv)
}

// Getenv returns the environment reader the manager uses.
func (m *Manager) Getenv() func(string) string { return m.opts.Getenv }

func (m *Manager) effective(file *Config) *Config {
	c := *file
	if m.opts.Override != nil {
		m.opts.Override(&c)
	}
	home := m.opts.Getenv("HOME")
	for _, p := range []*string{&c.Socket, &c.PluginsDir, &c.StateDir, &c.CacheDir, &c.TCP.TokenFile} {
		*p = expandHome(*p, home)
	}
	c.Proxy = c.Proxy.withDefaults(m.opts.Getenv)
	return c.WithDefaults(m.opts.Defaults)
}

// expandHome expands a leading "~/" to the home directory.
func expandHome(path, home string) string {
	if home != "" && (path == "~" || strings.HasPrefix(path, "~/")) {
		return filepath.Join(home, path[1:])
	}
	return path
}

// read parses the file. A missing file is the zero Config; a file over
// MaxFileBytes is refused unread.
func (m *Manager) read() (*Config, *yaml.Node, fs.FileMode, error) {
	if st, err := os.Stat(m.opts.Path); err == nil && st.Size() > MaxFileBytes {
		return nil, nil, 0, fmt.Errorf("%w: %s is %d bytes; the limit is %d", ErrInvalid, m.opts.Path, st.Size(), MaxFileBytes)
	}
	data, err := os.ReadFile(m.opts.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, &yaml.Node{}, 0, nil
	}
	if err != nil {
		return nil, nil, 0, fmt.Errorf("reading config file: %w", err)
	}
	mode := fs.FileMode(0o600)
	if st, err := os.Stat(m.opts.Path); err == nil {
		mode = st.Mode().Perm()
	}
	cfg, doc, err := parse(data, m.opts.Path, true)
	if err != nil {
		return nil, nil, 0, err
	}
	return cfg, doc, mode, nil
}

// Reload reads the file again. On any error the running config stays.
func (m *Manager) Reload() (*Change, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	file, _, _, err := m.read()
	if err != nil {
		return nil, err
	}
	return m.install(file)
}

// install checks a parsed file and makes it the running config.
func (m *Manager) install(file *Config) (*Change, error) {
	next := m.effective(file)
	if err := checkUpstreamChange(m.Current(), next); err != nil {
		return nil, err
	}
	ch := &Change{Config: next}
	if m.opts.Check != nil {
		w, err := m.opts.Check(next)
		if err != nil {
			return nil, err
		}
		ch.Warnings = w
	}
	old := m.cur.Swap(next)
	ch.Previous = old
	ch.RestartRequired = restartRequired(old, next)
	if m.opts.OnChange != nil {
		m.opts.OnChange(old, next)
	}
	return ch, nil
}

// restartRequired lists the settings that differ and only apply on start.
func restartRequired(old, next *Config) []string {
	var out []string
	add := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	add("socket", old.Socket, next.Socket)
	add("plugins_dir", old.PluginsDir, next.PluginsDir)
	add("state_dir", old.StateDir, next.StateDir)
	add("cache_dir", old.CacheDir, next.CacheDir)
	add("tcp", old.TCP, next.TCP)
	add("limits.read_timeout", old.Limits.ReadTimeout, next.Limits.ReadTimeout)
	add("limits.write_timeout", old.Limits.WriteTimeout, next.Limits.WriteTimeout)
	add("limits.idle_timeout", old.Limits.IdleTimeout, next.Limits.IdleTimeout)
	add("limits.conversation_cache_bytes", old.Limits.ConversationCacheBytes, next.Limits.ConversationCacheBytes)
	add("limits.plugin_idle_unload", old.Limits.PluginIdleUnload, next.Limits.PluginIdleUnload)
	add("limits.max_total_memory_mb", old.Limits.MaxTotalMemoryMB, next.Limits.MaxTotalMemoryMB)
	add("limits.max_compile_memory_mb", old.Limits.MaxCompileMemoryMB, next.Limits.MaxCompileMemoryMB)
	add("state.url", old.State.URL, next.State.URL)
	add("state.password_file", old.State.PasswordFile, next.State.PasswordFile)
	add("state.timeout", old.State.Timeout, next.State.Timeout)
	add("state.flush_interval", old.State.FlushInterval, next.State.FlushInterval)
	return out
}

// ErrUpstreamLocked is wrapped by the error of an update or reload that
// would change the proxy's upstreams, or turn
// proxy.allow_upstream_change back on, while the running config has it
// false. Such a change applies only when the daemon starts.
var ErrUpstreamLocked = errors.New("the proxy's upstreams are locked")

// checkUpstreamChange refuses a change of the upstreams from cur to next
// when cur does not allow one (proxy.allow_upstream_change: false).
func checkUpstreamChange(cur, next *Config) error {
	if cur == nil || cur.Proxy.UpstreamChangeAllowed() {
		return nil
	}
	fix := "proxy.allow_upstream_change is false: the upstreams change only when the daemon starts (restart it to apply the config file)"
	for _, u := range []struct{ key, old, new string }{
		{"proxy.openai.upstream", cur.Proxy.OpenAI.Upstream, next.Proxy.OpenAI.Upstream},
		{"proxy.anthropic.upstream", cur.Proxy.Anthropic.Upstream, next.Proxy.Anthropic.Upstream},
	} {
		if u.old != u.new {
			return fmt.Errorf("%w: %s: changing %q to %q is refused; %s", ErrUpstreamLocked, u.key, u.old, u.new, fix)
		}
	}
	if next.Proxy.UpstreamChangeAllowed() {
		return fmt.Errorf("%w: proxy.allow_upstream_change: turning it back on is refused; %s", ErrUpstreamLocked, fix)
	}
	return nil
}

// Update applies a partial update to the config file and, if the result
// is valid, writes the file back atomically (a temporary file renamed over
// it) and makes it the running config. patch is a JSON (or YAML) object
// applied as a JSON merge patch (RFC 7396): objects merge key by key, null
// deletes a key, anything else replaces. The file is read again first, so
// edits made by hand since the last load are kept; comments survive where
// YAML can keep them. The file is written normalized (see normalize), so
// the same update gives the same bytes, and it may not grow past
// MaxFileBytes. The result is checked as a start would check it (parse,
// ranges, then the Check option) before anything is written: on any error
// nothing is saved and nothing changes.
func (m *Manager) Update(patch []byte) (*Change, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, doc, mode, err := m.read()
	if err != nil {
		return nil, fmt.Errorf("%w (fix the file, or send SIGHUP after fixing it, before updating it)", err)
	}
	data, file, err := applyPatch(doc, patch)
	if err != nil {
		return nil, err
	}
	// Check before writing: an update the daemon would reject is not
	// written either.
	next := m.effective(file)
	if err := checkUpstreamChange(m.Current(), next); err != nil {
		return nil, err
	}
	var warnings []string
	if m.opts.Check != nil {
		if warnings, err = m.opts.Check(next); err != nil {
			return nil, err
		}
	}
	if mode == 0 {
		mode = 0o600
	}
	if err := writeAtomic(m.opts.Path, data, mode); err != nil {
		return nil, err
	}
	old := m.cur.Swap(next)
	ch := &Change{Config: next, Previous: old, RestartRequired: restartRequired(old, next), Warnings: warnings}
	if m.opts.OnChange != nil {
		m.opts.OnChange(old, next)
	}
	return ch, nil
}

// applyPatch merges patch (a JSON or YAML object, RFC 7396) into doc, the
// parsed config file (modified in place), and returns the normalized file
// it makes and its parsed config. It fails if the patch is not an object,
// or the result is not a valid config or is over MaxFileBytes.
func applyPatch(doc *yaml.Node, patch []byte) ([]byte, *Config, error) {
	var p yaml.Node
	if err := yaml.Unmarshal(patch, &p); err != nil {
		return nil, nil, fmt.Errorf("%w: update: %v", ErrInvalid, err)
	}
	pr := docRoot(&p)
	if pr == nil || pr.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("%w: update: want an object of settings", ErrInvalid)
	}
	plain(pr)
	root := docRoot(doc)
	if root == nil || root.Kind != yaml.MappingNode {
		root = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	root = mergePatch(root, pr)
	normalize(root, reflect.TypeOf(Config{}))
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if len(root.Content) > 0 {
		out := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
		if doc.Kind == yaml.DocumentNode {
			out.HeadComment, out.FootComment = doc.HeadComment, doc.FootComment
		}
		if err := enc.Encode(out); err != nil {
			return nil, nil, fmt.Errorf("%w: update: %v", ErrInvalid, err)
		}
	}
	enc.Close()
	if buf.Len() > MaxFileBytes {
		return nil, nil, fmt.Errorf("%w: update: the config file would be %d bytes; the limit is %d (delete settings with null)", ErrInvalid, buf.Len(), MaxFileBytes)
	}
	// Range errors name no line: a line of the merged document would
	// mislead the sender of the patch.
	file, _, err := parse(buf.Bytes(), "update", false)
	if err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), file, nil
}

// mergePatch applies patch to dst (RFC 7396 on YAML nodes) and returns the
// result; dst is modified in place when it is a mapping.
func mergePatch(dst, patch *yaml.Node) *yaml.Node {
	if patch.Kind != yaml.MappingNode {
		if dst != nil { // a replaced value keeps its comments
			patch.HeadComment, patch.LineComment, patch.FootComment = dst.HeadComment, dst.LineComment, dst.FootComment
		}
		return patch
	}
	for dst != nil && dst.Kind == yaml.AliasNode {
		dst = dst.Alias
	}
	if dst == nil || dst.Kind != yaml.MappingNode {
		dst = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	for i := 0; i+1 < len(patch.Content); i += 2 {
		k, v := patch.Content[i], patch.Content[i+1]
		at := -1
		for j := 0; j+1 < len(dst.Content); j += 2 {
			if dst.Content[j].Value == k.Value {
				at = j
				break
			}
		}
		if isNull(v) {
			if at >= 0 {
				dst.Content = append(dst.Content[:at], dst.Content[at+2:]...)
			}
			continue
		}
		if at >= 0 {
			dst.Content[at+1] = mergePatch(dst.Content[at+1], v)
		} else {
			dst.Content = append(dst.Content, k, mergePatch(nil, v))
		}
	}
	return dst
}

// normalize puts a merged document in canonical form, so that a file
// written by Update depends only on its settings and stays as small as
// they allow: settings in the order of the Config type (keys of maps, such
// as policy names, in the order they were written), empty mappings and
// lists dropped (absent and empty mean the same), block style throughout.
// Comments travel with their settings.
// t is the Go type n decodes into.
func normalize(n *yaml.Node, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.SequenceNode {
		n.Style = 0
		if t.Kind() == reflect.Slice {
			for _, c := range n.Content {
				normalize(c, t.Elem())
			}
		}
		return
	}
	if n.Kind != yaml.MappingNode || t == nodeType || reflect.PointerTo(t).Implements(unmarshalerType) {
		return
	}
	n.Style = 0
	type pair struct {
		k, v  *yaml.Node
		order int
	}
	var fields map[string]int
	if t.Kind() == reflect.Struct {
		fields = map[string]int{}
		i := 0
		for name := range yamlFieldsInOrder(t) {
			fields[name] = i
			i++
		}
	}
	pairs := make([]pair, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" { // a merge key: kept first, as written
			pairs = append(pairs, pair{k, v, -1})
			continue
		}
		var vt reflect.Type
		switch t.Kind() {
		case reflect.Struct:
			if f, ok := yamlFields(t)[k.Value]; ok {
				vt = f.Type
			}
		case reflect.Map:
			vt = t.Elem()
		}
		if vt != nil {
			normalize(v, vt)
		}
		if isNull(v) || (v.Kind == yaml.MappingNode || v.Kind == yaml.SequenceNode) && len(v.Content) == 0 {
			continue
		}
		pairs = append(pairs, pair{k, v, fields[k.Value]})
	}
	sort.SliceStable(pairs, func(i, j int) bool { return pairs[i].order < pairs[j].order })
	n.Content = n.Content[:0]
	for _, p := range pairs {
		n.Content = append(n.Content, p.k, p.v)
	}
}

// yamlFieldsInOrder yields the yaml names of t's fields in their order.
func yamlFieldsInOrder(t reflect.Type) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if !yield(name) {
				return
			}
		}
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// plain resets the style of a patch's nodes, so that an update sent as
// JSON is written in the file's block style.
func plain(n *yaml.Node) {
	n.Style = 0
	n.Line, n.Column = 0, 0
	for _, c := range n.Content {
		plain(c)
	}
}

// writeAtomic replaces path with data: a temporary file in the same
// directory, synced, then renamed over path, then the directory synced.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("writing config file: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing config file: %w", err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("writing config file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(mode); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing config file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
