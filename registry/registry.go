// Package registry keeps the policies of a plugins directory: it loads each
// .wasm file through the host, names it by what its describe export says
// (the file name is the fallback), and hands out the version currently
// serving a name.
//
// Started with Start, it watches the directory (fsnotify) and reloads a
// file when it is created, written, renamed into place or removed. Bursts
// of events are debounced, and a file whose bytes did not change (same
// SHA-256) is left alone. A new version is compiled, described and smoke
// tested (Options.Smoke; the daemon's makes one compact call on a sample
// conversation) before it is swapped in; until then, and if it fails, the
// old version keeps serving. A failure is recorded with the file's hash (Policies shows
// it) and the same bytes are not tried again. Two files claiming one
// policy name is a conflict: the first keeps the name, the second is
// reported; when the first goes away the second is tried again.
//
// The registry contains plugins that misbehave: a panic while loading a
// file or serving a watch event is recovered and recorded as that file's
// load error, a file over Options.MaxFileBytes is refused unread, and with
// Options.StateDir a file that was being loaded when the daemon died is
// quarantined at the next start (see quarantine.go).
//
// Acquire hands out a plugin with a reference; the caller releases it when
// its calls are over. A replaced or removed version is closed when its
// last reference is released, so calls in flight finish on the version
// they started with and no caller ever gets a closed plugin.
package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/host"
	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"
)

// Errors. Test with errors.Is.
var (
	// ErrNoDir is returned when the plugins directory does not exist.
	ErrNoDir = errors.New("plugins directory not found")
	// ErrUnknownPolicy: no loaded plugin serves the name (Acquire,
	// Resolve).
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrConflict: a file describes a policy name another file serves.
	ErrConflict = errors.New("policy name conflict")
	// ErrSmoke: a plugin loaded but failed the smoke test.
	ErrSmoke = errors.New("plugin failed the smoke test")
	// ErrClosed: the registry was closed.
	ErrClosed = errors.New("registry is closed")
	// ErrQuarantined: the daemon died while loading these bytes; they are
	// not loaded again until the file changes.
	ErrQuarantined = errors.New("plugin file quarantined")
	// ErrTooLarge: the file is over Options.MaxFileBytes.
	ErrTooLarge = errors.New("plugin file too large")
	// ErrPanic: loading the file made the registry panic (recovered).
	ErrPanic = errors.New("loading the plugin file panicked")
)

// Options configure a Registry.
type Options struct {
	// Dir is the plugins directory.
	Dir string
	// Engine loads the modules. The registry does not close it.
	Engine *host.Engine
	// DefaultLimits apply to every plugin, over the engine's defaults.
	DefaultLimits host.Limits
	// Limits override DefaultLimits field by field, per policy name.
	Limits map[string]host.Limits
	// Smoke, if set, checks every new version before it serves: a
	// non-nil error refuses the version (ErrSmoke) and the old one keeps
	// serving. It runs once per load, with the load's context. Nil checks
	// nothing beyond loading and describe. The daemon passes a check that
	// makes one compact call on a sample conversation.
	Smoke func(ctx context.Context, p *host.Plugin) error
	// Debounce is how long the directory must be quiet after an event
	// before the registry acts on it (default 20ms: a file written in one
	// go or renamed into place is complete by then; one written slowly
	// that fails to load while still changing is not reported, its next
	// event brings the rest).
	Debounce time.Duration
	// MaxDelay bounds how long a steady stream of events can hold a reload
	// back (default 1s).
	MaxDelay time.Duration
	// Logger receives load, reload and failure logs (discarded if nil).
	Logger hclog.Logger
	// DescribedDir, if set, keeps the description of every file that
	// loaded and passed the smoke test, by SHA-256 (see described.go):
	// the same bytes later serve at once, compiled on first use.
	DescribedDir string
	// IdleUnload unloads a plugin's compiled code and instances once it
	// has had no call for this long (host.Plugin.ReleaseIdle); its next
	// call compiles it again from the compilation cache. 0 means
	// DefaultIdleUnload; a negative value keeps everything loaded.
	IdleUnload time.Duration
	// Quick loads new bytes with the host's interpreter first
	// (host.LoadOptions.Quick): a new version serves in a fraction of a
	// second and the compiled module replaces it in the background.
	Quick bool
	// StateDir, if set, holds the crash-loop protection's load markers
	// and quarantine records (see quarantine.go). The daemon sets it to its
	// state directory; one-shot commands leave it empty.
	StateDir string
	// MaxFileBytes refuses plugin files larger than this, unread (default
	// DefaultMaxFileBytes).
	MaxFileBytes int64
}

// Default debounce settings.
const (
	DefaultDebounce = 20 * time.Millisecond
	DefaultMaxDelay = time.Second
	// DefaultIdleUnload: a plugin unused for this long gives its memory
	// back.
	DefaultIdleUnload = 5 * time.Minute
)

// DefaultMaxFileBytes is the largest plugin file loaded by default: 64
// MiB, some fifteen times a Go plugin with encoding/json. Compiling a
// module takes memory in proportion to its code, so a cap on the file is
// a cap on what one file can make the daemon allocate before any limit
// of the sandbox applies.
const DefaultMaxFileBytes = 64 << 20

// Registry maps policy names to loaded plugins. It is safe for concurrent
// use.
type Registry struct {
	opts   Options
	logger hclog.Logger

	loadMu sync.Mutex // one load at a time; held across compile and swap

	mu       sync.RWMutex
	byName   map[string]*version // the serving version of each name
	byFile   map[string]*fileState
	draining []*version // retired versions, closed after their last release
	closed   bool
	// quarantine holds the files the daemon died loading, by path;
	// suspects the files it may have died loading (path → hash), loaded
	// one at a time. See quarantine.go.
	quarantine map[string]loadRecord
	suspects   map[string]string
	markersOff bool

	watcher *fsnotify.Watcher
	cancel  context.CancelFunc
	done    chan struct{}

	closeOnce sync.Once
	counters  struct{ loads, failures, reloads, unloads, conflicts atomic.Uint64 }
}

// version is one loaded plugin version and the references callers hold.
type version struct {
	plugin  *host.Plugin
	file    string
	limits  host.Limits
	refs    atomic.Int64
	retired atomic.Bool
	once    sync.Once
}

func (v *version) release() {
	if v.refs.Add(-1) == 0 && v.retired.Load() {
		v.close()
	}
}

// retire marks v as no longer serving; it closes now if nobody holds it,
// or at its last release. The caller holds the registry's write lock, so
// no Acquire can take a new reference to v after this.
func (v *version) retire() {
	v.retired.Store(true)
	if v.refs.Load() == 0 {
		v.close()
	}
}

func (v *version) close() {
	v.once.Do(func() { v.plugin.Close(context.Background()) })
}

// fileState is what the registry knows of one file.
type fileState struct {
	path    string
	sha256  string // hash of the serving version ("" if none)
	name    string // policy name it serves ("" if none)
	loaded  time.Time
	limits  host.Limits
	err     error // last load error; nil when the file's bytes serve
	errHash string
	errAt   time.Time
	// conflict is the name this file could not take; it is tried again
	// when that name is freed.
	conflict string
}

// New returns an empty registry; call Start (daemon), LoadAll or Resolve
// (one-shot commands) to fill it.
func New(opts Options) *Registry {
	if opts.Dir != "" {
		opts.Dir = filepath.Clean(opts.Dir)
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = DefaultMaxDelay
	}
	if opts.IdleUnload == 0 {
		opts.IdleUnload = DefaultIdleUnload
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	r := &Registry{opts: opts, logger: opts.Logger, byName: map[string]*version{}, byFile: map[string]*fileState{},
		quarantine: map[string]loadRecord{}, suspects: map[string]string{}}
	if r.logger == nil {
		r.logger = hclog.NewNullLogger()
	}
	return r
}

// Acquire returns the plugin serving name and a release function to call
// when the caller's calls on it are over; it fails with an error wrapping
// ErrUnknownPolicy when no plugin serves name. The reference is taken under
// the registry's lock, so a version being replaced is closed only after
// every caller that got it has called release. release may be called once;
// further calls do nothing.
func (r *Registry) Acquire(name string) (*host.Plugin, func(), error) {
	r.mu.RLock()
	v, ok := r.byName[name]
	if ok {
		v.refs.Add(1)
	}
	closed := r.closed
	r.mu.RUnlock()
	if !ok {
		if closed {
			return nil, nil, ErrClosed
		}
		return nil, nil, r.unknown(name)
	}
	var released atomic.Bool
	return v.plugin, func() {
		if released.CompareAndSwap(false, true) {
			v.release()
		}
	}, nil
}

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
		if e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0 {
			if isPluginFile(e.Name()) {
				files = append(files, filepath.Join(r.opts.Dir, e.Name()))
			}
		}
	}
	sort.Strings(files)
	return files, nil
}

// isPluginFile reports whether a file name is a plugin's: NAME.wasm, not
// hidden (editors and copy tools write hidden temporary files).
func isPluginFile(name string) bool {
	return strings.HasSuffix(name, ".wasm") && !strings.HasPrefix(name, ".")
}

// LoadAll loads every .wasm file of the directory and unloads the files
// that are gone. A file that fails to load is recorded (see Policies) and
// does not stop the others; the error is returned only when the directory
// cannot be read.
func (r *Registry) LoadAll(ctx context.Context) error {
	files, err := r.wasmFiles()
	if err != nil {
		return err
	}
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	defer r.opts.Engine.HoldCompiles()() // the compiler waits for the quick loads
	// Compile and check the files in parallel (a cold compile of a Go
	// plugin takes seconds), then swap them in in file order, so that of
	// two files claiming one name the first by name wins. Files suspected
	// of having crashed the last daemon are prepared one at a time, after
	// the others (see quarantine.go).
	ready := make([]*prepared, len(files))
	r.mu.RLock()
	var suspects []int
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, f := range files {
		if _, ok := r.suspects[f]; ok {
			suspects = append(suspects, i)
			continue
		}
		wg.Add(1)
		go func() {
			sem <- struct{}{}
			defer func() { <-sem; wg.Done() }()
			ready[i] = r.safePrepare(ctx, f, false)
		}()
	}
	r.mu.RUnlock()
	wg.Wait()
	for _, i := range suspects {
		ready[i] = r.safePrepare(ctx, files[i], false)
	}
	present := map[string]bool{}
	for i, f := range files {
		present[f] = true
		r.commit(ctx, ready[i])
	}
	r.mu.RLock()
	var gone []string
	for path := range r.byFile {
		if filepath.Dir(path) == r.opts.Dir && !present[path] {
			gone = append(gone, path)
		}
	}
	r.mu.RUnlock()
	for _, path := range gone {
		r.loadLocked(ctx, path, false) // finds it missing and unloads it
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
		r.loadFile(ctx, guess, false)
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
			r.loadFile(ctx, f, false)
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
		if fs.err != nil && fs.name == "" {
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
	return fmt.Errorf("%w %q in %s%s", ErrUnknownPolicy, name, r.opts.Dir, extra)
}

// LoadFile loads one file (which need not be in the plugins directory)
// and returns the policy name it serves.
func (r *Registry) LoadFile(ctx context.Context, path string) (string, error) {
	r.loadFile(ctx, path, false)
	r.mu.RLock()
	defer r.mu.RUnlock()
	fs := r.byFile[path]
	switch {
	case fs == nil:
		return "", fmt.Errorf("loading %s: %w", path, os.ErrNotExist)
	case fs.err != nil:
		return "", fs.err
	}
	return fs.name, nil
}

func (r *Registry) loadFile(ctx context.Context, path string, force bool) {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	r.loadLocked(ctx, path, force)
}

// limitsFor returns the limits a plugin serving name gets. The caller
// holds r.mu.
func (r *Registry) limitsFor(name string) host.Limits {
	return r.opts.DefaultLimits.Over(r.opts.Limits[name])
}

// loadLocked brings one file up to date: it unloads it if it is gone,
// and loads, checks and swaps in its bytes if they are new (or force is
// set). The caller holds loadMu.
func (r *Registry) loadLocked(ctx context.Context, path string, force bool) {
	r.commit(ctx, r.safePrepare(ctx, path, force))
}

// safePrepare is prepare with a panic recovered and recorded as the
// file's load error.
func (r *Registry) safePrepare(ctx context.Context, path string, force bool) (pr *prepared) {
	defer func() {
		if p := recover(); p != nil {
			r.counters.failures.Add(1)
			r.logger.Error("panic while loading a plugin file; recorded as its load error", "file", path, "panic", p, "stack", string(debug.Stack()))
			r.recordError(path, "", fmt.Errorf("%w: %v", ErrPanic, p))
			pr = nil
		}
	}()
	return r.prepare(ctx, path, force)
}

// readPlugin reads a plugin file of at most max bytes; a larger one is
// refused without reading it.
func readPlugin(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		return nil, fmt.Errorf("%w: %s is %d bytes; the limit is %d", ErrTooLarge, filepath.Base(path), st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, filepath.Base(path), max)
	}
	return b, nil
}

// prepared is a file's bytes loaded and checked, not yet serving.
type prepared struct {
	path, hash string
	gone       bool // the file does not exist
	plugin     *host.Plugin
	limits     host.Limits
	took       time.Duration
}

// prepare reads a file and, unless its bytes are the serving ones or known
// bad, loads and checks them. It swaps nothing in, so several files can be
// prepared at once. nil means there is nothing to do.
func (r *Registry) prepare(ctx context.Context, path string, force bool) *prepared {
	before, _ := os.Stat(path)
	wasm, err := readPlugin(path, r.opts.MaxFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return &prepared{path: path, gone: true}
	}
	if errors.Is(err, ErrTooLarge) {
		r.counters.failures.Add(1)
		r.logger.Error("plugin file refused", "file", path, "error", err)
		r.recordError(path, "", err)
		return nil
	}
	if err != nil {
		r.recordError(path, "", fmt.Errorf("reading %s: %w", path, err))
		return nil
	}
	sum := sha256.Sum256(wasm)
	hash := hex.EncodeToString(sum[:])
	base := strings.TrimSuffix(filepath.Base(path), ".wasm")

	r.mu.Lock()
	fs := r.byFile[path]
	if !force && fs != nil {
		switch {
		case fs.sha256 == hash && fs.name != "":
			// The serving bytes (again): nothing to load. A file put back
			// after a bad version clears that version's error.
			fs.err, fs.errHash, fs.conflict = nil, "", ""
			r.mu.Unlock()
			return nil
		case fs.errHash == hash:
			// Known bad: not retried until the bytes change (a conflict is
			// retried when the name is freed, with force).
			r.mu.Unlock()
			return nil
		}
	}
	if err := r.quarantinedLocked(path, hash); err != nil {
		r.mu.Unlock()
		r.counters.failures.Add(1)
		r.logger.Error("plugin file is quarantined; the other plugins serve", "file", path, "sha256", short(hash), "error", err)
		r.recordError(path, hash, err)
		return nil
	}
	limits := r.limitsFor(base)
	r.mu.Unlock()

	r.counters.loads.Add(1)
	start := time.Now()
	done := r.beginLoad(path, hash)
	defer func() {
		done()
		r.mu.Lock()
		delete(r.suspects, path)
		r.mu.Unlock()
	}()
	p, limits, err := r.load(ctx, path, wasm, hash, limits)
	if err != nil {
		if after, serr := os.Stat(path); serr == nil && before != nil && (after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime())) {
			// The file changed while it loaded (a writer still at it):
			// its next event brings the complete bytes.
			r.logger.Debug("plugin file changed while loading; waiting for its next version", "file", path, "error", err)
			return nil
		}
		r.counters.failures.Add(1)
		r.logger.Error("plugin failed to load; the previous version (if any) keeps serving", "file", path, "sha256", hash[:12], "error", err)
		r.recordError(path, hash, err)
		return nil
	}
	r.logger.Debug("plugin file loaded and checked", "file", path, "sha256", short(hash), "took", time.Since(start).Round(time.Millisecond))
	return &prepared{path: path, hash: hash, plugin: p, limits: limits, took: time.Since(start)}
}

// commit swaps a prepared file in (or unloads a file that is gone). The
// caller holds loadMu.
func (r *Registry) commit(ctx context.Context, pr *prepared) {
	switch {
	case pr == nil:
	case pr.gone:
		r.unloadLocked(ctx, pr.path)
	default:
		freed := r.install(ctx, pr.path, pr.hash, pr.plugin, pr.limits, pr.took)
		r.retryConflicts(ctx, freed)
	}
}

// load compiles wasm, lets the host check its description, and smoke
// tests it. limits are the file's (keyed by its base name); once the
// plugin has said its policy name, it is loaded again under that name's
// limits if they differ, so the smoke test runs under the limits the
// policy will serve with. It returns the limits it used. Bytes that
// passed before (their description is cached) are loaded from their
// description: they compile on first use. Every compile after Load
// returns (first use, the background compile, a compile after an idle
// unload) writes a load marker too, so a crash while compiling is
// attributed to the file (see quarantine.go).
func (r *Registry) load(ctx context.Context, path string, wasm []byte, hash string, limits host.Limits) (*host.Plugin, host.Limits, error) {
	compiling := func() (done func()) { return r.beginLoad(path, hash) }
	if desc := r.lookupDescribed(hash); desc != nil {
		r.mu.RLock()
		want := r.limitsFor(desc.Name)
		r.mu.RUnlock()
		p, err := r.opts.Engine.Load(ctx, wasm, host.LoadOptions{Source: path, Limits: want, Described: desc, Compiling: compiling})
		if err == nil {
			return p, want, nil
		}
		r.logger.Warn("a cached description does not load; checking the file again", "file", path, "error", err)
	}
	p, err := r.opts.Engine.Load(ctx, wasm, host.LoadOptions{Source: path, Limits: limits, Quick: r.opts.Quick, Compiling: compiling})
	if err != nil {
		return nil, limits, err
	}
	r.mu.RLock()
	want := r.limitsFor(p.Name())
	r.mu.RUnlock()
	if want != limits {
		p.Close(ctx)
		limits = want
		if p, err = r.opts.Engine.Load(ctx, wasm, host.LoadOptions{Source: path, Limits: limits, Quick: r.opts.Quick, Compiling: compiling}); err != nil {
			return nil, limits, err
		}
	}
	if r.opts.Smoke != nil {
		err = r.opts.Smoke(ctx, p)
		if errors.Is(err, host.ErrTimeout) && ctx.Err() == nil {
			// A smoke test that failed on the wall clock alone (a busy
			// machine, or the interpreter's slowness) is tried once
			// more, compiled, before it is reported, as the host does
			// with describe; one that used up its work budget is not.
			r.logger.Warn("the smoke test ran past a wall-clock limit; trying once more, compiled", "file", path, "tier", p.Tier(), "error", err)
			p.Close(ctx)
			if p, err = r.opts.Engine.Load(ctx, wasm, host.LoadOptions{Source: path, Limits: limits, Compiling: compiling}); err != nil {
				return nil, limits, err
			}
			err = r.opts.Smoke(ctx, p)
		}
		if err != nil {
			p.Close(ctx)
			return nil, limits, fmt.Errorf("%w: %s@%s: %w", ErrSmoke, p.Name(), p.Version(), err)
		}
	}
	r.storeDescribed(hash, p.Description())
	return p, limits, nil
}

// install makes p the serving version of its name, unless another file
// serves that name. It returns the names this file stopped serving.
func (r *Registry) install(ctx context.Context, path, hash string, p *host.Plugin, limits host.Limits, took time.Duration) (freed []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		p.Close(ctx)
		return nil
	}
	fs := r.byFile[path]
	if fs == nil {
		fs = &fileState{path: path}
		r.byFile[path] = fs
	}
	name := p.Name()
	now := time.Now()
	if cur, ok := r.byName[name]; ok && cur.file != path {
		fs.err = fmt.Errorf("%w: %s describes itself as %q, which %s already serves (rename one of them)",
			ErrConflict, filepath.Base(path), name, filepath.Base(cur.file))
		fs.errHash, fs.errAt, fs.conflict = hash, now, name
		r.counters.conflicts.Add(1)
		r.logger.Error("plugin name conflict", "file", path, "name", name, "served_by", cur.file)
		p.Close(ctx)
		return nil
	}
	if fs.name != "" && fs.name != name {
		// The file now describes another policy: its old name goes.
		if v := r.byName[fs.name]; v != nil && v.file == path {
			delete(r.byName, fs.name)
			r.retireLocked(v)
			freed = append(freed, fs.name)
		}
	}
	old := r.byName[name]
	r.byName[name] = &version{plugin: p, file: path, limits: limits}
	fs.sha256, fs.name, fs.loaded, fs.limits = hash, name, now, limits
	fs.err, fs.errHash, fs.conflict = nil, "", ""
	if old != nil {
		r.retireLocked(old)
		r.counters.reloads.Add(1)
		r.logger.Info("plugin reloaded", "name", name, "version", p.Version(), "previous", old.plugin.Version(),
			"file", path, "sha256", hash[:12], "took", took.Round(time.Millisecond))
	} else {
		r.logger.Info("plugin loaded", "name", name, "version", p.Version(), "file", path, "path", p.Path(),
			"sha256", hash[:12], "took", took.Round(time.Millisecond))
	}
	return freed
}

// retireLocked retires v. The caller holds r.mu for writing.
func (r *Registry) retireLocked(v *version) {
	live := r.draining[:0]
	for _, d := range r.draining {
		select {
		case <-d.plugin.Done():
		default:
			live = append(live, d)
		}
	}
	r.draining = append(live, v)
	v.retire()
}

// unloadLocked forgets a file that is gone; the policy it served is
// unloaded once its calls in flight end.
func (r *Registry) unloadLocked(ctx context.Context, path string) {
	r.mu.Lock()
	fs := r.byFile[path]
	if fs == nil {
		r.mu.Unlock()
		return
	}
	delete(r.byFile, path)
	r.forgetLocked(path)
	var freed []string
	if v := r.byName[fs.name]; fs.name != "" && v != nil && v.file == path {
		delete(r.byName, fs.name)
		r.retireLocked(v)
		freed = append(freed, fs.name)
		r.counters.unloads.Add(1)
		r.logger.Info("plugin removed; unloaded after its calls in flight", "name", fs.name, "file", path)
	}
	r.mu.Unlock()
	r.retryConflicts(ctx, freed)
}

// retryConflicts loads again the files that could not take a name that is
// now free. The caller holds loadMu.
func (r *Registry) retryConflicts(ctx context.Context, freed []string) {
	for _, name := range freed {
		r.mu.RLock()
		var waiting []string
		for path, fs := range r.byFile {
			if fs.conflict == name {
				waiting = append(waiting, path)
			}
		}
		r.mu.RUnlock()
		sort.Strings(waiting)
		for _, path := range waiting {
			if r.serving(name) {
				break
			}
			r.loadLocked(ctx, path, true)
		}
	}
}

func (r *Registry) recordError(path, hash string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs := r.byFile[path]
	if fs == nil {
		fs = &fileState{path: path}
		r.byFile[path] = fs
	}
	fs.err, fs.errHash, fs.errAt, fs.conflict = err, hash, time.Now(), ""
}

// ReleaseIdle unloads the code and instances of every plugin that has had
// no call for Options.IdleUnload, and returns how many it unloaded. The
// watcher calls it periodically; it is safe to call at any time.
func (r *Registry) ReleaseIdle(ctx context.Context) int {
	if r.opts.IdleUnload < 0 {
		return 0
	}
	r.mu.RLock()
	serving := make([]*host.Plugin, 0, len(r.byName))
	for _, v := range r.byName {
		serving = append(serving, v.plugin)
	}
	r.mu.RUnlock()
	n := 0
	for _, p := range serving {
		if p.ReleaseIdle(ctx, r.opts.IdleUnload) {
			r.logger.Debug("plugin unused; its code and instances were unloaded", "name", p.Name())
			n++
		}
	}
	if n > 0 {
		debug.FreeOSMemory() // give the memory back now, not in minutes
	}
	return n
}

// SetLimits changes the plugins' limits (a config reload) and reloads the
// plugins whose limits changed. Calls in flight finish under the old ones.
func (r *Registry) SetLimits(ctx context.Context, def host.Limits, per map[string]host.Limits) {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	r.mu.Lock()
	r.opts.DefaultLimits, r.opts.Limits = def, per
	var stale []string
	for path, fs := range r.byFile {
		if fs.name != "" && fs.limits != r.limitsFor(fs.name) {
			stale = append(stale, path)
		}
	}
	r.mu.Unlock()
	sort.Strings(stale)
	for _, path := range stale {
		r.loadLocked(ctx, path, true)
	}
}

// Info describes one file of the plugins directory.
type Info struct {
	// Name is the policy the file serves ("" if it never loaded).
	Name string
	File string
	// SHA256 and LoadedAt describe the serving version.
	SHA256   string
	LoadedAt time.Time
	// Plugin is the serving version (nil if the file does not serve). Use
	// it for its description and counters; call it through Acquire.
	Plugin *host.Plugin
	// Error is the last load failure of this file, nil when its current
	// bytes serve. ErrorSHA256 and ErrorAt say which bytes failed, when.
	Error       error
	ErrorSHA256 string
	ErrorAt     time.Time
	// Quarantined reports that the daemon died while loading the file's
	// current bytes: they are not loaded until the file changes.
	Quarantined bool
	// LogDropped and LogTruncated count the file's log lines dropped over
	// the rate limit and cut to the line limit, over every version.
	LogDropped, LogTruncated uint64
}

// Policies lists the files the registry knows, sorted by file.
func (r *Registry) Policies() []Info {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Info, 0, len(r.byFile))
	for _, fs := range r.byFile {
		info := Info{Name: fs.name, File: fs.path, SHA256: fs.sha256, LoadedAt: fs.loaded,
			Error: fs.err, ErrorSHA256: fs.errHash, ErrorAt: fs.errAt, Quarantined: errors.Is(fs.err, ErrQuarantined)}
		info.LogDropped, info.LogTruncated = r.opts.Engine.LogCounts(filepath.Base(fs.path))
		if v, ok := r.byName[fs.name]; ok && v.file == fs.path {
			info.Plugin = v.plugin
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// Policy returns the file serving policy name or, failing that, the file
// named NAME.wasm (which may have failed to load).
func (r *Registry) Policy(name string) (Info, bool) {
	var byBase *Info
	for _, in := range r.Policies() {
		if in.Plugin != nil && in.Name == name {
			return in, true
		}
		if strings.TrimSuffix(filepath.Base(in.File), ".wasm") == name && byBase == nil {
			in := in
			byBase = &in
		}
	}
	if byBase != nil {
		return *byBase, true
	}
	return Info{}, false
}

// Counters are the registry's event counts since it was created.
type Counters struct {
	Loads        uint64 // load attempts (compile + describe + smoke)
	LoadFailures uint64 // attempts that failed
	Reloads      uint64 // new versions swapped in for a serving name
	Unloads      uint64 // names unloaded because their file went away
	Conflicts    uint64 // loads refused because the name was taken
	Serving      int    // names serving now
	Draining     int    // replaced versions still finishing calls
}

// Counters returns the registry's counters.
func (r *Registry) Counters() Counters {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := Counters{
		Loads: r.counters.loads.Load(), LoadFailures: r.counters.failures.Load(), Reloads: r.counters.reloads.Load(),
		Unloads: r.counters.unloads.Load(), Conflicts: r.counters.conflicts.Load(), Serving: len(r.byName),
	}
	for _, d := range r.draining {
		select {
		case <-d.plugin.Done():
		default:
			c.Draining++
		}
	}
	return c
}

// Close stops watching, unloads every plugin and waits (until ctx ends)
// for calls in flight to finish and the modules to be released. Acquire
// fails with ErrClosed afterwards. A second Close does nothing.
func (r *Registry) Close(ctx context.Context) error {
	var err error
	r.closeOnce.Do(func() {
		if r.cancel != nil {
			r.cancel()
			r.watcher.Close()
			<-r.done
		}
		r.loadMu.Lock() // no load in progress from here on
		defer r.loadMu.Unlock()
		r.mu.Lock()
		r.closed = true
		for _, v := range r.byName {
			r.retireLocked(v)
		}
		r.byName = map[string]*version{}
		wait := append([]*version(nil), r.draining...)
		r.mu.Unlock()
		for _, v := range wait {
			select {
			case <-v.plugin.Done():
			case <-ctx.Done():
				err = fmt.Errorf("registry: closing plugins: %w", ctx.Err())
				return
			}
		}
	})
	return err
}
