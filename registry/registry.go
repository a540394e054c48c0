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
// old version keeps serving. A failure is recorded with the file's hash
// (Policies shows it) and the same bytes are not tried again; with
// Options.StateDir that holds across restarts (see history.go). Two files
// claiming one policy name is a conflict: the first by file name keeps the
// name, the second is reported; when the first goes away the second is
// tried again.
//
// Each file loads on its own (see load.go): a file that serves joins the
// others as soon as it is loaded, whatever the files beside it do, and no
// file can hold up another: only regular files are read (a FIFO, a device
// or a socket is refused without being waited on), and a load that is
// slow gives its turn to the next. Start returns at once; Ready says when
// every file of the directory has been tried, and until then Acquire
// waits for a name some file still loading may serve.
//
// The registry contains plugins that misbehave: a panic while loading a
// file or serving a watch event is recovered and recorded as that file's
// load error, a file over Options.MaxFileBytes is refused unread, and with
// Options.StateDir a file whose load or first compile was under way when
// the daemon died is, on the evidence, quarantined at the next start (see
// quarantine.go); Retry lifts a quarantine or a remembered failure.
//
// Acquire hands out a plugin with a reference; the caller releases it when
// its calls are over. A replaced or removed version is closed when its
// last reference is released, so calls in flight finish on the version
// they started with and no caller ever gets a closed plugin.
package registry

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
	// Resolve, Retry).
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrConflict: a file describes a policy name another file serves.
	ErrConflict = errors.New("policy name conflict")
	// ErrSmoke: a plugin loaded but failed the smoke test.
	ErrSmoke = errors.New("plugin failed the smoke test")
	// ErrClosed: the registry was closed.
	ErrClosed = errors.New("registry is closed")
	// ErrQuarantined: the daemon died while loading these bytes; they are
	// not loaded again until the file changes or Retry lifts it.
	ErrQuarantined = errors.New("plugin file quarantined")
	// ErrFailedBefore: these bytes failed to load, under the same limits,
	// in an earlier daemon (Options.StateDir); they are not tried again
	// until they change or Retry asks for it.
	ErrFailedBefore = errors.New("failed to load before")
	// ErrTooLarge: the file is over Options.MaxFileBytes.
	ErrTooLarge = host.ErrFileTooLarge
	// ErrNotRegular: the file is a FIFO, a device, a socket or a
	// directory (or a symlink to one, or to nothing): only regular files
	// are loaded.
	ErrNotRegular = host.ErrNotRegularFile
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
	// StateDir, if set, holds what outlives the process: the crash-loop
	// protection's load markers and quarantine records (quarantine.go)
	// and what the registry learned about plugin bytes (history.go). The
	// daemon sets it to its state directory; one-shot commands leave it
	// empty.
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
	opts     Options
	logger   hclog.Logger
	compiler string // this build's identity (history.go)

	// ctx is the loads' context: Close cancels it (stop).
	ctx  context.Context
	stop context.CancelFunc

	commitMu sync.Mutex // one swap-in or unload at a time

	mu       sync.RWMutex
	byName   map[string]*version // the serving version of each name
	byFile   map[string]*fileState
	draining []*version // retired versions, closed after their last release
	closed   bool
	// changed is closed, and replaced, whenever a load ends: Acquire
	// waits on it during the first scan.
	changed chan struct{}
	// quarantine holds the files the daemon died loading, by path;
	// suspects the files it may have died loading (path → hash), loaded
	// alone. See quarantine.go.
	quarantine   map[string]loadRecord
	suspects     map[string]string
	markersOff   bool
	markerSeq    atomic.Uint64
	stoppingOnce sync.Once

	histMu  sync.Mutex
	history map[string]*record // by SHA-256, read from StateDir as needed

	loads loads // see load.go

	// scanning is set from Start until every file of the directory has
	// been tried once; ready is closed then.
	scanning atomic.Bool
	ready    chan struct{}

	watcher     *fsnotify.Watcher
	watchCancel context.CancelFunc
	watchDone   chan struct{}

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
	// errLimits are the limits the failed bytes were loaded under.
	errLimits host.Limits
	// described is the policy name the failed bytes describe, when the
	// registry knows it (their description is cached, or a quarantine
	// record names it).
	described string
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
	ctx, stop := context.WithCancel(context.Background())
	r := &Registry{opts: opts, logger: opts.Logger, compiler: compilerID(), ctx: ctx, stop: stop,
		byName: map[string]*version{}, byFile: map[string]*fileState{}, changed: make(chan struct{}),
		quarantine: map[string]loadRecord{}, suspects: map[string]string{}, history: map[string]*record{},
		ready: make(chan struct{})}
	r.loads.init()
	if r.logger == nil {
		r.logger = hclog.NewNullLogger()
	}
	return r
}

// Acquire returns the plugin serving name and a release function to call
// when the caller's calls on it are over; it fails with an error wrapping
// ErrUnknownPolicy when no plugin serves name. While the first scan of
// the directory is under way (Start, Ready), a name that a file still
// loading may serve is waited for, until that file's load is over or ctx
// ends. The reference is taken under the registry's lock, so a version
// being replaced is closed only after every caller that got it has
// called release. release may be called once; further calls do nothing.
func (r *Registry) Acquire(ctx context.Context, name string) (*host.Plugin, func(), error) {
	for {
		r.mu.RLock()
		v, ok := r.byName[name]
		if ok {
			v.refs.Add(1)
		}
		closed, changed := r.closed, r.changed
		r.mu.RUnlock()
		switch {
		case ok:
			var released atomic.Bool
			return v.plugin, func() {
				if released.CompareAndSwap(false, true) {
					v.release()
				}
			}, nil
		case closed:
			return nil, nil, ErrClosed
		case !r.mayServe(name):
			return nil, nil, r.unknown(name)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w (the daemon is still loading its plugins: %v)", r.unknown(name), ctx.Err())
		}
	}
}

// notify wakes the callers waiting in Acquire.
func (r *Registry) notify() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Ready is closed once every file of the directory has been tried after
// Start (each serves, or failed with its error recorded); new files are
// loaded as they arrive after that. It is never closed before Start.
func (r *Registry) Ready() <-chan struct{} { return r.ready }

// Starting reports whether Start's first scan of the directory is under
// way.
func (r *Registry) Starting() bool { return r.scanning.Load() }

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

// limitsFor returns the limits a plugin serving name gets. The caller
// holds r.mu.
func (r *Registry) limitsFor(name string) host.Limits {
	return r.opts.DefaultLimits.Over(r.opts.Limits[name])
}

// install makes p the serving version of its name, unless another file
// serves that name. It returns the names this file stopped serving, and
// the names another file stopped serving because this one took them.
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
		if !r.scanning.Load() || path > cur.file {
			fs.err = conflictError(path, cur.file, name)
			fs.errHash, fs.errAt, fs.conflict, fs.described = hash, now, name, name
			r.counters.conflicts.Add(1)
			r.logger.Error("plugin name conflict", "file", path, "name", name, "served_by", cur.file)
			p.Close(ctx)
			return freed
		}
		// At a start the files load side by side, in no set order: of two
		// files claiming one name, the first by file name takes it, as
		// it would have had they loaded in order.
		other := r.byFile[cur.file]
		delete(r.byName, name)
		r.retireLocked(cur)
		other.err = conflictError(cur.file, path, name)
		other.errHash, other.errAt, other.conflict, other.described = other.sha256, now, name, name
		other.sha256, other.name = "", ""
		r.counters.conflicts.Add(1)
		r.logger.Error("plugin name conflict", "file", cur.file, "name", name, "served_by", path)
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
	fs.err, fs.errHash, fs.conflict, fs.described = nil, "", "", ""
	if old != nil {
		r.retireLocked(old)
		r.counters.reloads.Add(1)
		r.logger.Info("plugin reloaded", "name", name, "version", p.Version(), "previous", old.plugin.Version(),
			"file", path, "sha256", short(hash), "took", took.Round(time.Millisecond))
	} else {
		r.logger.Info("plugin loaded", "name", name, "version", p.Version(), "file", path, "path", p.Path(),
			"sha256", short(hash), "took", took.Round(time.Millisecond))
	}
	return freed
}

func conflictError(path, servedBy, name string) error {
	return fmt.Errorf("%w: %s describes itself as %q, which %s already serves (rename one of them)",
		ErrConflict, filepath.Base(path), name, filepath.Base(servedBy))
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

// unload forgets a file that is gone; the policy it served is unloaded
// once its calls in flight end. The caller holds commitMu.
func (r *Registry) unload(path string) {
	r.mu.Lock()
	fs := r.byFile[path]
	if fs == nil {
		r.mu.Unlock()
		return
	}
	delete(r.byFile, path)
	r.forgetLocked(path)
	delete(r.suspects, path)
	var freed []string
	if v := r.byName[fs.name]; fs.name != "" && v != nil && v.file == path {
		delete(r.byName, fs.name)
		r.retireLocked(v)
		freed = append(freed, fs.name)
		r.counters.unloads.Add(1)
		r.logger.Info("plugin removed; unloaded after its calls in flight", "name", fs.name, "file", path)
	}
	r.mu.Unlock()
	r.retryConflicts(freed)
}

// recordError records a failure to load path (hash: the bytes that
// failed, "" if they could not be read). It reports whether the error is
// news: the same message for the same bytes again is not.
func (r *Registry) recordError(path, hash string, err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs := r.byFile[path]
	if fs == nil {
		fs = &fileState{path: path}
		r.byFile[path] = fs
	}
	news := fs.err == nil || fs.errHash != hash || fs.err.Error() != err.Error()
	fs.err, fs.errHash, fs.errAt, fs.conflict = err, hash, time.Now(), ""
	fs.described = ""
	if hash != "" {
		if d := r.lookupDescribed(hash); d != nil {
			fs.described = d.Name
		} else if q, ok := r.quarantine[path]; ok && q.SHA256 == hash {
			fs.described = q.Name
		}
	}
	return news
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
// plugins whose limits changed, returning once those loads are over (or
// ctx ends); calls in flight finish under the old limits. The files that
// failed to load under other limits than they would get now are tried
// again too (it may have been the limits' doing), without waiting.
func (r *Registry) SetLimits(ctx context.Context, def host.Limits, per map[string]host.Limits) {
	r.mu.Lock()
	r.opts.DefaultLimits, r.opts.Limits = def, per
	var stale, failed []string
	for path, fs := range r.byFile {
		switch {
		case fs.name != "" && fs.limits != r.limitsFor(fs.name):
			stale = append(stale, path)
		case fs.name == "" && fs.err != nil && fs.errHash != "" && fs.conflict == "" && !errors.Is(fs.err, ErrQuarantined) &&
			fs.errLimits != r.limitsFor(strings.TrimSuffix(filepath.Base(path), ".wasm")):
			failed = append(failed, path)
		}
	}
	r.mu.Unlock()
	sort.Strings(stale)
	sort.Strings(failed)
	for _, path := range failed {
		r.schedule(path, true)
	}
	var waits []<-chan struct{}
	for _, path := range stale {
		waits = append(waits, r.schedule(path, true))
	}
	wait(ctx, waits)
}

// Info describes one file of the plugins directory.
type Info struct {
	// Name is the policy the file serves; for a file that does not, the
	// policy its bytes describe when the registry knows it ("" if not).
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
	// current bytes: they are not loaded until the file changes or Retry.
	Quarantined bool
	// Loading reports that a load of the file is under way.
	Loading bool
	// LogDropped and LogTruncated count the file's log lines dropped over
	// the rate limit and cut to the line limit, over every version.
	LogDropped, LogTruncated uint64
}

// Policies lists the files the registry knows, and those it is loading
// for the first time, sorted by file.
func (r *Registry) Policies() []Info {
	loading := r.loading()
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Info, 0, len(r.byFile))
	for _, fs := range r.byFile {
		info := Info{Name: fs.name, File: fs.path, SHA256: fs.sha256, LoadedAt: fs.loaded,
			Error: fs.err, ErrorSHA256: fs.errHash, ErrorAt: fs.errAt, Quarantined: errors.Is(fs.err, ErrQuarantined),
			Loading: loading[fs.path]}
		if info.Name == "" {
			info.Name = fs.described
		}
		info.LogDropped, info.LogTruncated = r.opts.Engine.LogCounts(filepath.Base(fs.path))
		if v, ok := r.byName[fs.name]; ok && v.file == fs.path {
			info.Plugin = v.plugin
		}
		out = append(out, info)
	}
	for path := range loading {
		if r.byFile[path] == nil {
			out = append(out, Info{File: path, Loading: true}) // its first load
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// Policy returns the file serving policy name or, failing that, a file
// whose bytes describe it, or the file named NAME.wasm (which may have
// failed to load).
func (r *Registry) Policy(name string) (Info, bool) {
	var byDesc, byBase *Info
	for _, in := range r.Policies() {
		switch {
		case in.Plugin != nil && in.Name == name:
			return in, true
		case in.Plugin == nil && in.Name == name && byDesc == nil:
			byDesc = &in
		case strings.TrimSuffix(filepath.Base(in.File), ".wasm") == name && byBase == nil:
			byBase = &in
		}
	}
	switch {
	case byDesc != nil:
		return *byDesc, true
	case byBase != nil:
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
	Loading      int    // files being loaded now
}

// Counters returns the registry's counters.
func (r *Registry) Counters() Counters {
	loading := len(r.loading())
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := Counters{
		Loads: r.counters.loads.Load(), LoadFailures: r.counters.failures.Load(), Reloads: r.counters.reloads.Load(),
		Unloads: r.counters.unloads.Load(), Conflicts: r.counters.conflicts.Load(), Serving: len(r.byName), Loading: loading,
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

// Close stops watching and loading, unloads every plugin and waits (until
// ctx ends) for the loads under way to stop, calls in flight to finish
// and the modules to be released. Acquire fails with ErrClosed
// afterwards. A second Close does nothing.
func (r *Registry) Close(ctx context.Context) error {
	var errs []error
	r.closeOnce.Do(func() {
		r.Stopping()
		if r.watchCancel != nil {
			r.watchCancel()
			r.watcher.Close()
			<-r.watchDone
		}
		r.stop() // loads under way end
		if err := r.loads.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("registry: waiting for loads under way: %w", err))
		}
		r.commitMu.Lock()
		defer r.commitMu.Unlock()
		r.mu.Lock()
		r.closed = true
		for _, v := range r.byName {
			r.retireLocked(v)
		}
		r.byName = map[string]*version{}
		wait := append([]*version(nil), r.draining...)
		r.mu.Unlock()
		r.notify()
		for _, v := range wait {
			select {
			case <-v.plugin.Done():
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("registry: closing plugins: %w", ctx.Err()))
				return
			}
		}
	})
	return errors.Join(errs...)
}
