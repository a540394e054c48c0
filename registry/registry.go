// Package registry keeps the policies of a plugins directory: it loads each
// .wasm file through the host, names it by what its describe export says
// (the file name is the fallback), and hands out the version currently
// serving a name. Acquire/release pairs let a replaced or removed version
// finish the calls it started before it is closed.
package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/hashicorp/go-hclog"
)

// Options configure a Registry.
type Options struct {
	// Dir is the plugins directory.
	Dir string
	// Engine loads the modules.
	Engine *host.Engine
	// Limits overrides the engine's limits per policy name.
	Limits map[string]host.Limits
	Logger hclog.Logger
}

// Registry maps policy names to loaded plugins. It is safe for concurrent
// use.
type Registry struct {
	opts   Options
	logger hclog.Logger

	mu      sync.RWMutex
	byName  map[string]*entry // serving plugins by policy name
	byFile  map[string]*fileState
	closed  bool
	closeMu sync.Once
}

// entry is one serving plugin version.
type entry struct {
	plugin *host.Plugin
	file   string
}

// fileState is what the registry knows of one file.
type fileState struct {
	path    string
	sha256  string
	name    string // policy name it serves ("" if it failed to load)
	err     error  // the last load error, if any
	errHash string // the hash that failed, so it is not retried
	loaded  time.Time
}

// New returns an empty registry; call LoadAll or Resolve to fill it.
func New(opts Options) *Registry {
	r := &Registry{opts: opts, logger: opts.Logger, byName: map[string]*entry{}, byFile: map[string]*fileState{}}
	if r.logger == nil {
		r.logger = hclog.NewNullLogger()
	}
	return r
}

var _ compactor.PolicySource = (*Registry)(nil)

// ErrNoDir is returned when the plugins directory does not exist.
var ErrNoDir = errors.New("plugins directory not found")

// wasmFiles lists the .wasm files of the plugins directory, sorted.
func (r *Registry) wasmFiles() ([]string, error) {
	entries, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s (build the plugins with `make plugins`, or pass --plugins DIR)", ErrNoDir, r.opts.Dir)
		}
		return nil, fmt.Errorf("reading plugins directory: %w", err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".wasm") {
			files = append(files, filepath.Join(r.opts.Dir, e.Name()))
		}
	}
	sort.Strings(files)
	return files, nil
}

// LoadAll loads every .wasm file of the directory. A file that fails to
// load is recorded (see Policies) and does not stop the others; the error
// is returned only when the directory cannot be read.
func (r *Registry) LoadAll(ctx context.Context) error {
	files, err := r.wasmFiles()
	if err != nil {
		return err
	}
	for _, f := range files {
		r.loadFile(ctx, f)
	}
	return nil
}

// Resolve makes sure the policy name is loaded, loading as little as it
// can: NAME.wasm first, then every other file until one describes itself
// as name. The one-shot CLI uses it to avoid compiling plugins it does not
// need.
func (r *Registry) Resolve(ctx context.Context, name string) error {
	if r.serving(name) {
		return nil
	}
	guess := filepath.Join(r.opts.Dir, name+".wasm")
	if _, err := os.Stat(guess); err == nil {
		r.loadFile(ctx, guess)
		if r.serving(name) {
			return nil
		}
	}
	files, err := r.wasmFiles()
	if err != nil {
		return err
	}
	for _, f := range files {
		r.mu.RLock()
		_, seen := r.byFile[f]
		r.mu.RUnlock()
		if !seen {
			r.loadFile(ctx, f)
			if r.serving(name) {
				return nil
			}
		}
	}
	return r.unknown(name)
}

func (r *Registry) serving(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.byName[name]
	return ok
}

func (r *Registry) unknown(name string) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var failed []string
	for _, fs := range r.byFile {
		if fs.err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", filepath.Base(fs.path), fs.err))
		}
	}
	sort.Strings(failed)
	var extra string
	if len(names) > 0 {
		extra += " (available: " + strings.Join(names, ", ") + ")"
	}
	if len(failed) > 0 {
		extra += "; files that failed to load: " + strings.Join(failed, "; ")
	}
	return fmt.Errorf("%w %q in %s%s", compactor.ErrUnknownPolicy, name, r.opts.Dir, extra)
}

// LoadFile loads one file (which need not be in the plugins directory)
// and returns the policy name it serves.
func (r *Registry) LoadFile(ctx context.Context, path string) (string, error) {
	r.loadFile(ctx, path)
	r.mu.RLock()
	defer r.mu.RUnlock()
	fs := r.byFile[path]
	if fs == nil || fs.err != nil {
		if fs == nil {
			return "", fmt.Errorf("loading %s: not loaded", path)
		}
		return "", fs.err
	}
	return fs.name, nil
}

// loadFile loads one file and, if it describes a name no other file
// serves, makes it that name's serving version.
func (r *Registry) loadFile(ctx context.Context, path string) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		r.recordError(path, "", fmt.Errorf("reading %s: %w", path, err))
		return
	}
	sum := sha256.Sum256(wasm)
	hash := hex.EncodeToString(sum[:])
	base := strings.TrimSuffix(filepath.Base(path), ".wasm")
	p, err := r.opts.Engine.Load(ctx, wasm, host.LoadOptions{Source: path, Limits: r.opts.Limits[base]})
	if err != nil {
		r.logger.Error("plugin failed to load", "file", path, "error", err)
		r.recordError(path, hash, err)
		return
	}
	if lim, ok := r.opts.Limits[p.Name()]; ok && p.Name() != base {
		// Limits are keyed by policy name; reload with them.
		p.Close(ctx)
		if p, err = r.opts.Engine.Load(ctx, wasm, host.LoadOptions{Source: path, Limits: lim}); err != nil {
			r.recordError(path, hash, err)
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if other, ok := r.byName[p.Name()]; ok && other.file != path {
		err := fmt.Errorf("policy name %q is already served by %s", p.Name(), filepath.Base(other.file))
		r.byFile[path] = &fileState{path: path, sha256: hash, err: err, errHash: hash}
		r.logger.Error("plugin name conflict", "file", path, "name", p.Name(), "served_by", other.file)
		p.Close(ctx)
		return
	}
	r.byName[p.Name()] = &entry{plugin: p, file: path}
	r.byFile[path] = &fileState{path: path, sha256: hash, name: p.Name(), loaded: time.Now()}
	r.logger.Info("plugin loaded", "name", p.Name(), "version", p.Version(), "file", path, "path", p.Path())
}

func (r *Registry) recordError(path, hash string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs := r.byFile[path]
	if fs == nil {
		fs = &fileState{path: path}
		r.byFile[path] = fs
	}
	fs.err, fs.errHash = err, hash
}

// Acquire implements compactor.PolicySource.
func (r *Registry) Acquire(name string) (*host.Plugin, func(), error) {
	r.mu.RLock()
	e, ok := r.byName[name]
	r.mu.RUnlock()
	if !ok {
		return nil, nil, r.unknown(name)
	}
	return e.plugin, func() {}, nil
}

// Info describes one file of the plugins directory.
type Info struct {
	Name     string
	File     string
	SHA256   string
	Plugin   *host.Plugin // nil if the file failed to load
	LoadedAt time.Time
	Error    error
}

// Policies lists the files the registry knows, sorted by file.
func (r *Registry) Policies() []Info {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Info, 0, len(r.byFile))
	for _, fs := range r.byFile {
		info := Info{Name: fs.name, File: fs.path, SHA256: fs.sha256, LoadedAt: fs.loaded, Error: fs.err}
		if e, ok := r.byName[fs.name]; ok && e.file == fs.path {
			info.Plugin = e.plugin
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// Close closes every plugin. A second Close does nothing.
func (r *Registry) Close(ctx context.Context) {
	r.closeMu.Do(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.closed = true
		for _, e := range r.byName {
			e.plugin.Close(ctx)
		}
		r.byName = map[string]*entry{}
	})
}
