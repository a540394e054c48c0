package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/host"
	"golang.org/x/sync/semaphore"
)

// Loading. Every file loads on a task of its own (schedule): a load that
// fails slowly (a start section that loops until its limit) runs beside
// the others, never before them, and a file that serves joins the
// registry as soon as it is loaded. One task per file at a time: an event
// for a file being loaded brings one more load after it.
//
// Reading a file cannot block: only regular files are opened, without
// waiting on what they are (host.ReadModuleFile). Bytes that served before
// load from their cached description at once, without a turn. Other
// loads compile and run the module, and take turns: one of GOMAXPROCS
// slots, which a load still running after loadHandoff hands on to the next
// file (it goes on beside it), and a share of loadBytesBudget, in
// proportion to the file's size, which bounds the memory loads under way
// take together. A file suspected of having crashed the last daemon
// (quarantine.go) loads alone.

const (
	// loadHandoff is how long a load keeps its slot before the next file
	// gets it too.
	loadHandoff = time.Second
	// loadBytesBudget bounds the bytes of the modules being compiled and
	// checked at once (some nine Go plugins); a larger file loads alone.
	loadBytesBudget = 32 << 20
)

// loads schedules the registry's loads.
type loads struct {
	mu     sync.Mutex
	tasks  map[string]*task // by path, while a load of it is pending or under way
	closed bool
	wg     sync.WaitGroup // tasks and other load goroutines; Close waits for them

	cpu   *semaphore.Weighted // slots
	bytes *semaphore.Weighted // loadBytesBudget
	alone sync.RWMutex        // every load reads it; a suspect's takes it whole
}

// task is one file's loads.
type task struct {
	pending bool            // one more load is asked for
	force   bool            // ... even of bytes known
	waiters []chan struct{} // closed when that load is over
	// name is the policy the file serves or its bytes describe, once the
	// load knows it ("": it may serve any).
	name string
}

func (q *loads) init() {
	q.tasks = map[string]*task{}
	q.cpu = semaphore.NewWeighted(int64(max(1, runtime.GOMAXPROCS(0))))
	q.bytes = semaphore.NewWeighted(loadBytesBudget)
}

// spawn runs f on a goroutine Close waits for; it reports false, and does
// not run f, once the registry is closing.
func (q *loads) spawn(f func()) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		f()
	}()
	return true
}

// close stops new loads and waits (until ctx ends) for those under way.
func (q *loads) close(ctx context.Context) error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	done := make(chan struct{})
	go func() {
		q.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// admit waits for a load's turn: a slot, given back after loadHandoff if
// the load is still running, and size's share of the bytes budget, held
// to the end. While it holds its slot, background compiles wait (hold:
// the engine's HoldCompiles): the compiler takes a core once the quick
// loads are done, or slow. It returns the function that ends the turn.
func (q *loads) admit(ctx context.Context, size int64, hold func() (release func())) (end func(), err error) {
	w := min(max(size, 1), loadBytesBudget)
	if err := q.bytes.Acquire(ctx, w); err != nil {
		return nil, err
	}
	if err := q.cpu.Acquire(ctx, 1); err != nil {
		q.bytes.Release(w)
		return nil, err
	}
	unhold := hold()
	var once sync.Once
	handOff := func() {
		once.Do(func() {
			unhold()
			q.cpu.Release(1)
		})
	}
	timer := time.AfterFunc(loadHandoff, handOff)
	return func() {
		timer.Stop()
		handOff()
		q.bytes.Release(w)
	}, nil
}

// schedule asks for path to be brought up to date: loaded if its bytes
// are new (or force is set), unloaded if it is gone. It returns at once,
// with a channel closed when a load that started after the call is over
// (at once if the registry is closing).
func (r *Registry) schedule(path string, force bool) <-chan struct{} {
	done := make(chan struct{})
	q := &r.loads
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		close(done)
		return done
	}
	if t := q.tasks[path]; t != nil {
		t.pending, t.force = true, t.force || force
		t.waiters = append(t.waiters, done)
		return done
	}
	t := &task{pending: true, force: force, waiters: []chan struct{}{done}}
	q.tasks[path] = t
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		r.run(path, t)
	}()
	return done
}

// run loads path until no more loads of it are asked for. The task
// leaves the map before the last load's waiters hear it is over, so they
// see the file loaded, not loading.
func (r *Registry) run(path string, t *task) {
	q := &r.loads
	for {
		q.mu.Lock()
		force, waiters := t.force, t.waiters
		t.pending, t.force, t.waiters = false, false, nil
		q.mu.Unlock()
		if pr := r.safePrepare(r.ctx, path, force); pr != nil {
			r.commitMu.Lock()
			r.commit(r.ctx, pr)
			r.commitMu.Unlock()
		}
		q.mu.Lock()
		last := !t.pending
		if last {
			delete(q.tasks, path)
		}
		q.mu.Unlock()
		for _, w := range waiters {
			close(w)
		}
		r.notify()
		if last {
			return
		}
	}
}

// hint records the policy a file being loaded serves or describes.
func (r *Registry) hint(path, name string) {
	r.loads.mu.Lock()
	if t := r.loads.tasks[path]; t != nil {
		t.name = name
	}
	r.loads.mu.Unlock()
}

// loading returns the files with a load pending or under way.
func (r *Registry) loading() map[string]bool {
	r.loads.mu.Lock()
	defer r.loads.mu.Unlock()
	out := make(map[string]bool, len(r.loads.tasks))
	for path := range r.loads.tasks {
		out[path] = true
	}
	return out
}

// mayServe reports whether the first scan is under way and a file not
// loaded yet may serve name.
func (r *Registry) mayServe(name string) bool {
	if !r.scanning.Load() {
		return false
	}
	r.mu.RLock()
	suspects := len(r.suspects)
	r.mu.RUnlock()
	if suspects > 0 {
		return true // they load last, and their names are not known
	}
	r.loads.mu.Lock()
	defer r.loads.mu.Unlock()
	for _, t := range r.loads.tasks {
		if t.name == "" || t.name == name {
			return true
		}
	}
	return false
}

// wait waits for every channel, or for ctx.
func wait(ctx context.Context, chans []<-chan struct{}) error {
	for _, c := range chans {
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// wasmFiles lists the plugin files of the directory, sorted: every entry
// named NAME.wasm but directories. Those that are not regular files (a
// FIFO, a socket, a device, a symlink to one) are listed too: their load
// refuses them, and the refusal shows with the others.
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
		if !e.IsDir() && isPluginFile(e.Name()) {
			files = append(files, filepath.Join(r.opts.Dir, e.Name()))
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

// scan schedules a load of every plugin file of the directory, and of
// every file known that is gone (to unload it), and returns the channels
// of those loads. Files suspected of having crashed the last daemon are
// left out when skipSuspects is set: they load last, alone.
func (r *Registry) scan(skipSuspects bool) ([]<-chan struct{}, error) {
	files, err := r.wasmFiles()
	if err != nil {
		return nil, err
	}
	present := map[string]bool{}
	r.mu.RLock()
	var todo []string
	for _, f := range files {
		present[f] = true
		if _, suspect := r.suspects[f]; !suspect || !skipSuspects {
			todo = append(todo, f)
		}
	}
	for path := range r.byFile {
		if filepath.Dir(path) == r.opts.Dir && !present[path] {
			todo = append(todo, path) // finds it missing and unloads it
		}
	}
	r.mu.RUnlock()
	waits := make([]<-chan struct{}, 0, len(todo))
	for _, path := range todo {
		waits = append(waits, r.schedule(path, false))
	}
	return waits, nil
}

// LoadAll loads every plugin file of the directory and unloads the files
// that are gone, and returns once those loads are over (or ctx ends: the
// loads go on). A file that fails to load is recorded (see Policies) and
// does not stop the others; the error is returned only when the directory
// cannot be read.
func (r *Registry) LoadAll(ctx context.Context) error {
	defer r.opts.Engine.HoldCompiles()() // the compiler waits for the quick loads
	waits, err := r.scan(false)
	if err != nil {
		return err
	}
	return wait(ctx, waits)
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
	if _, err := os.Lstat(guess); err == nil {
		if err := wait(ctx, []<-chan struct{}{r.schedule(guess, false)}); err != nil {
			return err
		}
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
			if err := wait(ctx, []<-chan struct{}{r.schedule(f, false)}); err != nil {
				return err
			}
			if r.serving(name) {
				return nil
			}
		}
	}
	return r.unknown(name)
}

// LoadFile loads one file (which need not be in the plugins directory)
// and returns the policy name it serves.
func (r *Registry) LoadFile(ctx context.Context, path string) (string, error) {
	if err := wait(ctx, []<-chan struct{}{r.schedule(path, false)}); err != nil {
		return "", err
	}
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

// safePrepare is prepare with a panic recovered and recorded as the
// file's load error.
func (r *Registry) safePrepare(ctx context.Context, path string, force bool) (pr *prepared) {
	defer func() {
		if p := recover(); p != nil {
			r.counters.failures.Add(1)
			r.logger.Error("panic while loading a plugin file; the file is refused", "file", path, "panic", p, "stack", string(debug.Stack()))
			r.recordError(path, "", fmt.Errorf("%w: %v", ErrPanic, p))
			pr = nil
		}
	}()
	return r.prepare(ctx, path, force)
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
	base := filepath.Base(path)
	before, _ := os.Stat(path)
	wasm, err := host.ReadModuleFile(path, r.opts.MaxFileBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if st, lerr := os.Lstat(path); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			r.refuse(path, fmt.Errorf("%w: %s is a symlink to %s, which does not exist", ErrNotRegular, base, target))
			return nil
		}
		return &prepared{path: path, gone: true}
	case errors.Is(err, ErrTooLarge), errors.Is(err, ErrNotRegular):
		r.refuse(path, err)
		return nil
	case err != nil:
		r.refuse(path, fmt.Errorf("reading %s: %w", path, err))
		return nil
	}
	sum := sha256.Sum256(wasm)
	hash := hex.EncodeToString(sum[:])
	desc := r.lookupDescribed(hash)

	r.mu.Lock()
	fs := r.byFile[path]
	if !force && fs != nil {
		switch {
		case fs.sha256 == hash && fs.name != "":
			// The serving bytes (again): nothing to load. A file put back
			// after a bad version clears that version's error.
			fs.err, fs.errHash, fs.conflict, fs.described = nil, "", "", ""
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
		if r.recordError(path, hash, err) {
			r.counters.failures.Add(1)
			r.logger.Error("plugin file is quarantined; the other plugins serve", "file", path, "sha256", short(hash), "error", err)
		}
		return nil
	}
	asked := r.limitsFor(strings.TrimSuffix(base, ".wasm"))
	suspectHash, suspect := r.suspects[path]
	if suspect && suspectHash != hash {
		delete(r.suspects, path) // new bytes: the suspicion was the old ones'
		suspect = false
	}
	r.mu.Unlock()
	if !force {
		if err := r.failedBefore(path, hash, asked); err != nil {
			if r.recordError(path, hash, err) {
				r.setErrLimits(path, asked)
				r.logger.Warn("plugin file not loaded: these bytes failed to load before", "file", path, "sha256", short(hash), "error", err)
			}
			return nil
		}
	}
	if desc != nil {
		r.hint(path, desc.Name)
	}

	// Take a turn: a suspect loads alone; bytes loaded from their
	// description neither compile nor run, and need none.
	var end func()
	switch {
	case suspect:
		if err := r.aloneLock(ctx); err != nil {
			return nil // closing
		}
		end = r.loads.alone.Unlock
	case desc != nil:
		r.loads.alone.RLock()
		end = r.loads.alone.RUnlock
	default:
		r.loads.alone.RLock()
		turn, err := r.loads.admit(ctx, int64(len(wasm)), r.opts.Engine.HoldCompiles)
		if err != nil {
			r.loads.alone.RUnlock()
			return nil // closing
		}
		end = func() { turn(); r.loads.alone.RUnlock() }
	}
	defer end()

	r.counters.loads.Add(1)
	start := time.Now()
	p, limits, err := r.load(ctx, path, wasm, hash, asked, desc, suspect)
	if err == nil && suspect && p.Tier() == host.TierLazy {
		// A suspect compiles now, alone, rather than on its first call.
		if werr := p.Warm(ctx); werr != nil {
			p.Close(ctx)
			p, err = nil, werr
		}
	}
	r.mu.Lock()
	delete(r.suspects, path)
	r.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return nil // closing
		}
		if after, serr := os.Stat(path); serr == nil && before != nil && (after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime())) {
			// The file changed while it loaded (a writer still at it):
			// its next event brings the complete bytes.
			r.logger.Debug("plugin file changed while loading; waiting for its next version", "file", path, "error", err)
			return nil
		}
		r.counters.failures.Add(1)
		r.logger.Error("plugin failed to load; the previous version (if any) keeps serving", "file", path, "sha256", short(hash), "error", err)
		r.recordError(path, hash, err)
		r.setErrLimits(path, asked)
		r.rememberFailure(path, hash, asked, err)
		return nil
	}
	if p.Tier() == host.TierCompiled {
		r.markCompiled(hash)
	}
	r.hint(path, p.Name())
	r.logger.Debug("plugin file loaded and checked", "file", path, "sha256", short(hash), "took", time.Since(start).Round(time.Millisecond))
	return &prepared{path: path, hash: hash, plugin: p, limits: limits, took: time.Since(start)}
}

// aloneLock takes the loads' lock whole, once no other load holds it,
// without keeping other loads from starting meanwhile (a suspect that
// waits must not hold up the others: sync.RWMutex's Lock would).
func (r *Registry) aloneLock(ctx context.Context) error {
	for {
		r.mu.RLock()
		changed := r.changed
		r.mu.RUnlock()
		if r.loads.alone.TryLock() {
			return nil
		}
		select {
		case <-changed: // a load ended
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// refuse records that path cannot be loaded at all (it is not a regular
// file, or too large, or unreadable), logging it once.
func (r *Registry) refuse(path string, err error) {
	if r.recordError(path, "", err) {
		r.counters.failures.Add(1)
		r.logger.Error("plugin file refused", "file", path, "error", err)
	}
}

// setErrLimits records the limits path's bytes failed under.
func (r *Registry) setErrLimits(path string, limits host.Limits) {
	r.mu.Lock()
	if fs := r.byFile[path]; fs != nil {
		fs.errLimits = limits
	}
	r.mu.Unlock()
}

// commit swaps a prepared file in (or unloads a file that is gone). The
// caller holds commitMu.
func (r *Registry) commit(ctx context.Context, pr *prepared) {
	if pr.gone {
		r.unload(pr.path)
		return
	}
	r.retryConflicts(r.install(ctx, pr.path, pr.hash, pr.plugin, pr.limits, pr.took))
}

// retryConflicts loads again, one at a time in file order, the files
// that could not take a name that is now free, until one serves it.
func (r *Registry) retryConflicts(freed []string) {
	for _, name := range freed {
		r.mu.RLock()
		var waiting []string
		for path, fs := range r.byFile {
			if fs.conflict == name {
				waiting = append(waiting, path)
			}
		}
		r.mu.RUnlock()
		if len(waiting) == 0 {
			continue
		}
		sort.Strings(waiting)
		r.loads.spawn(func() {
			for _, path := range waiting {
				if r.serving(name) {
					return
				}
				if wait(r.ctx, []<-chan struct{}{r.schedule(path, true)}) != nil {
					return
				}
			}
		})
	}
}

// load compiles wasm, lets the host check its description, and smoke
// tests it; bytes whose description is cached (desc) load from it
// instead: they compile on first use. limits are the file's (keyed by its
// base name); once the plugin has said its policy name, it is loaded again
// under that name's limits if they differ, so the smoke test runs under
// the limits the policy will serve with. It returns the limits it used.
// Every compile after Load returns (first use, the background compile, a
// compile after an idle unload) goes through the crash-loop protection
// (compiling, see quarantine.go). A load alone (a suspect's) compiles
// with the optimizing compiler at once, even with Options.Quick: it is
// the compile that is on trial.
func (r *Registry) load(ctx context.Context, path string, wasm []byte, hash string, limits host.Limits, desc *abi.Description, alone bool) (*host.Plugin, host.Limits, error) {
	// Loading and the smoke test wait for room in the memory budget as
	// long as they must: requests that hold it for a while do not fail a
	// healthy file.
	ctx = host.Patient(ctx)
	compiling := r.compiling(path, hash)
	quick := r.opts.Quick && !alone
	if desc != nil {
		r.mu.RLock()
		want := r.limitsFor(desc.Name)
		r.mu.RUnlock()
		p, err := r.opts.Engine.Load(ctx, wasm, host.LoadOptions{Source: path, Limits: want, Described: desc, Compiling: compiling})
		if err == nil {
			return p, want, nil
		}
		r.logger.Warn("a cached description does not load; checking the file again", "file", path, "error", err)
	}
	// Compiling and running new bytes is work whose failure can be the
	// plugin's: a crash in it is evidence against the file.
	defer r.beginWork(path, hash, kindLoad)()
	p, err := r.opts.Engine.Load(ctx, wasm, host.LoadOptions{Source: path, Limits: limits, Quick: quick, Compiling: compiling})
	if err != nil {
		return nil, limits, err
	}
	r.mu.RLock()
	want := r.limitsFor(p.Name())
	r.mu.RUnlock()
	if want != limits {
		p.Close(ctx)
		limits = want
		if p, err = r.opts.Engine.Load(ctx, wasm, host.LoadOptions{Source: path, Limits: limits, Quick: quick, Compiling: compiling}); err != nil {
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
