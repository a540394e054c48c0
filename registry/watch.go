package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Start watches the directory and begins loading every plugin file of
// it, each on its own (see load.go): it returns at once, and the plugins
// serve as they load. Ready is closed once every file has been tried;
// meanwhile Acquire waits for a name a file still loading may serve. A
// .wasm file created, written, renamed into place or removed later is
// reloaded (or unloaded) without a restart. Close stops the watcher.
// Start may be called once.
func (r *Registry) Start(ctx context.Context) error {
	if r.watchCancel != nil {
		return errors.New("registry: Start called twice")
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", r.opts.Dir, err)
	}
	// Watch before the first scan, so no change between the two is missed
	// (an event for bytes already loaded costs only a hash).
	if err := w.Add(r.opts.Dir); err != nil {
		w.Close()
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNoDir, r.opts.Dir)
		}
		return fmt.Errorf("watching %s: %w", r.opts.Dir, err)
	}
	r.recoverMarkers()
	r.scanning.Store(true)
	waits, err := r.scan(true)
	if err != nil {
		r.scanning.Store(false)
		w.Close()
		return err
	}
	if !r.loads.spawn(func() { r.finishScan(waits) }) { // closed meanwhile
		r.scanning.Store(false)
		close(r.ready)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.watcher, r.watchCancel, r.watchDone = w, cancel, make(chan struct{})
	go r.watch(wctx)
	return nil
}

// finishScan waits for the first scan's loads, then loads the suspects
// one at a time (quarantine.go), and closes Ready.
func (r *Registry) finishScan(waits []<-chan struct{}) {
	defer func() {
		r.scanning.Store(false)
		close(r.ready)
		r.notify()
	}()
	if wait(r.ctx, waits) != nil {
		return
	}
	r.mu.RLock()
	suspects := make([]string, 0, len(r.suspects))
	for path := range r.suspects {
		suspects = append(suspects, path)
	}
	r.mu.RUnlock()
	sort.Strings(suspects)
	for _, path := range suspects {
		if wait(r.ctx, []<-chan struct{}{r.schedule(path, false)}) != nil {
			return
		}
		r.mu.Lock()
		delete(r.suspects, path) // its load is over, whatever came of it
		r.mu.Unlock()
	}
	c := r.Counters()
	r.logger.Debug("every plugin file tried", "serving", c.Serving, "failed_loads", c.LoadFailures)
}

// watch collects events and acts on them once the directory has been
// quiet for Debounce (or MaxDelay after the first of a steady stream). A
// panic in one round is recovered and logged, and the watch goes on.
func (r *Registry) watch(ctx context.Context) {
	defer close(r.watchDone)
	for !r.watchRound(ctx) {
	}
}

// watchRound watches until ctx ends or the watcher closes (it returns
// true), or until a panic, which it logs (and returns false).
func (r *Registry) watchRound(ctx context.Context) (over bool) {
	defer func() {
		if p := recover(); p != nil {
			r.logger.Error("panic in the plugins directory watcher; watching on", "panic", p, "stack", string(debug.Stack()))
			over = ctx.Err() != nil
		}
	}()
	r.watchEvents(ctx)
	return true
}

// watchEvents is the watch loop.
func (r *Registry) watchEvents(ctx context.Context) {
	w := r.watcher
	pending := map[string]bool{}
	rescan := false
	var first time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// Idle plugins are unloaded on a tick of a tenth of IdleUnload.
	janitor := make(<-chan time.Time)
	if r.opts.IdleUnload > 0 {
		tick := time.NewTicker(max(r.opts.IdleUnload/10, time.Second))
		defer tick.Stop()
		janitor = tick.C
	}
	schedule := func() {
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		delay := r.opts.Debounce
		if left := r.opts.MaxDelay - now.Sub(first); left < delay {
			delay = max(left, 0)
		}
		timer.Reset(delay)
	}
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if filepath.Dir(ev.Name) != r.opts.Dir || !isPluginFile(filepath.Base(ev.Name)) {
				continue
			}
			if ev.Op == fsnotify.Chmod {
				continue // metadata only
			}
			r.logger.Debug("plugins directory event", "event", ev.String())
			pending[ev.Name] = true
			schedule()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			// An overflow loses events: rescan the whole directory.
			r.logger.Warn("watching the plugins directory", "error", err)
			rescan = true
			schedule()
		case <-janitor:
			r.ReleaseIdle(ctx)
		case <-timer.C:
			paths := pending
			pending, first = map[string]bool{}, time.Time{}
			if rescan {
				rescan = false
				if _, err := r.scan(false); err != nil {
					r.logger.Error("rescanning the plugins directory", "error", err)
				}
				continue
			}
			sorted := make([]string, 0, len(paths))
			for path := range paths {
				sorted = append(sorted, path)
			}
			sort.Strings(sorted)
			for _, path := range sorted {
				r.schedule(path, false) // loads on its own: nothing here waits for a file
			}
		}
	}
}
