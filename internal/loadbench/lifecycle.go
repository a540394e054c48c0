package loadbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/compactd/compactd/client"
)

// LifecycleOptions configure Lifecycle.
type LifecycleOptions struct {
	// Bin and Plugins are compactd and the built-in plugins.
	Bin, Plugins string
	// Dir is a scratch directory.
	Dir string
	// Starts is how many starts of each kind are measured (default 3).
	Starts int
	// Reloads is how many new versions of a Go plugin are written
	// (default 20).
	Reloads int
	// NoIdleUnload is for a daemon that predates
	// limits.plugin_idle_unload: its config does not set it, and the
	// memory once unused plugins were unloaded is not measured.
	NoIdleUnload bool
}

// LifecycleResult is the daemon's start, reload and memory figures.
type LifecycleResult struct {
	Policies []string
	// Cold and Cached are the times from exec to the daemon serving
	// every policy (answering on its socket with all of them listed), with
	// empty caches and after a previous start of the same daemon filled
	// them; ColdAnswered and CachedAnswered, to every policy having
	// answered one compaction.
	Cold, Cached                 []time.Duration
	ColdAnswered, CachedAnswered []time.Duration
	// ReadyRSS is the daemon's resident memory right after a restart,
	// serving; IdleRSS a second after every policy answered once;
	// ColdPeak its peak during a start with empty caches.
	ReadyRSS, IdleRSS, ColdPeak int64
	// UnloadedRSS is the resident memory once no plugin had a call for
	// IdleUnload (limits.plugin_idle_unload) and they were unloaded.
	UnloadedRSS int64
	IdleUnload  time.Duration
	// Reload is, per new version of sliding.wasm written into the plugins
	// directory (renamed into place), the time until it serves.
	Reload []time.Duration
	// InstanceBytes is the linear memory an idle instance of a Go plugin
	// holds, on average, after two clients compacted at once with each.
	InstanceBytes int64
	GoPlugins     int
}

// Lifecycle measures starts, reloads and memory of a daemon process.
func Lifecycle(ctx context.Context, opts LifecycleOptions) (*LifecycleResult, error) {
	if opts.Starts <= 0 {
		opts.Starts = 3
	}
	if opts.Reloads <= 0 {
		opts.Reloads = 20
	}
	files, err := filepath.Glob(filepath.Join(opts.Plugins, "*.wasm"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("loadbench: no plugins in %s", opts.Plugins)
	}
	res := &LifecycleResult{}
	// A copy of the plugins: the reloads write into it.
	plugins := filepath.Join(opts.Dir, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		return nil, err
	}
	for _, f := range files {
		res.Policies = append(res.Policies, strings.TrimSuffix(filepath.Base(f), ".wasm"))
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(plugins, filepath.Base(f)), b, 0o644); err != nil {
			return nil, err
		}
	}
	opts.Plugins = plugins
	cache := filepath.Join(opts.Dir, "lifecycle-cache")
	const idleUnload = 3 * time.Second
	var lastReadyRSS int64
	// start starts a daemon in dir (its socket, state and config) and
	// times exec → ready (every policy listed as serving) and → every
	// policy answered a compaction.
	start := func(dir, cacheDir string) (*Server, time.Duration, time.Duration, error) {
		d := Daemon{Bin: opts.Bin, Plugins: opts.Plugins, CacheDir: cacheDir, Dir: dir}
		if !opts.NoIdleUnload {
			d.Config = fmt.Sprintf("limits:\n  plugin_idle_unload: %s\n", idleUnload)
		}
		t0 := time.Now()
		srv, err := StartCompactd(ctx, d) // waits for /healthz
		if err != nil {
			return nil, 0, 0, err
		}
		c := client.New(srv.Socket)
		defer c.Close()
		for {
			h, err := c.Health(ctx)
			if err == nil && h.Policies == len(res.Policies) {
				break
			}
			if time.Since(t0) > time.Minute {
				srv.Stop()
				if err != nil {
					return nil, 0, 0, fmt.Errorf("loadbench: no health a minute after the start: %w\n%s", err, srv.Log())
				}
				return nil, 0, 0, fmt.Errorf("loadbench: %d of %d policies serving a minute after the start", h.Policies, len(res.Policies))
			}
			time.Sleep(time.Millisecond)
		}
		ready := time.Since(t0)
		if m, err := ProcMemory(srv.PID()); err == nil {
			lastReadyRSS = m.RSS
		}
		if err := compactEach(ctx, c, res.Policies); err != nil {
			srv.Stop()
			return nil, 0, 0, err
		}
		return srv, ready, time.Since(t0), nil
	}
	for i := 0; i < opts.Starts; i++ {
		srv, ready, answered, err := start(filepath.Join(opts.Dir, fmt.Sprintf("cold-%d", i)), filepath.Join(opts.Dir, fmt.Sprintf("cold-cache-%d", i)))
		if err != nil {
			return nil, err
		}
		res.Cold = append(res.Cold, ready)
		res.ColdAnswered = append(res.ColdAnswered, answered)
		if m, err := ProcMemory(srv.PID()); err == nil {
			res.ColdPeak = max(res.ColdPeak, m.Peak)
		}
		srv.Stop()
	}
	// A first start fills the caches (compiled modules, descriptions);
	// restarts of the same daemon use them.
	warm := filepath.Join(opts.Dir, "warm")
	srv, _, _, err := start(warm, cache)
	if err != nil {
		return nil, err
	}
	if err := waitCompiled(ctx, srv, ""); err != nil { // background compiles land in the cache
		srv.Stop()
		return nil, err
	}
	srv.Stop()
	for i := 0; i < opts.Starts; i++ {
		srv, ready, answered, err := start(warm, cache)
		if err != nil {
			return nil, err
		}
		res.Cached = append(res.Cached, ready)
		res.CachedAnswered = append(res.CachedAnswered, answered)
		res.ReadyRSS = lastReadyRSS
		if i < opts.Starts-1 {
			srv.Stop()
			continue
		}
		// The last one stays for the memory and reload figures.
		defer srv.Stop()
		time.Sleep(time.Second) // let start-up garbage go
		if m, err := ProcMemory(srv.PID()); err == nil {
			res.IdleRSS = m.RSS
		}
		if res.InstanceBytes, res.GoPlugins, err = instanceMemory(ctx, srv, res.Policies, opts.Plugins); err != nil {
			return nil, err
		}
		// Unused plugins give their memory back.
		if !opts.NoIdleUnload {
			time.Sleep(idleUnload + 2*time.Second)
			if m, err := ProcMemory(srv.PID()); err == nil {
				res.UnloadedRSS = m.RSS
			}
			res.IdleUnload = idleUnload
		}
		if res.Reload, err = reloads(ctx, srv, opts); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// instanceMemory makes every Go plugin run two instances at once and
// returns the linear memory an idle instance holds, on average (the
// pools' figures in /v1/policies), and the number of Go plugins.
func instanceMemory(ctx context.Context, srv *Server, policies []string, plugins string) (int64, int, error) {
	c := client.New(srv.Socket)
	defer c.Close()
	goPlugins, idle := 0, 0
	var bytes uint64
	for _, p := range policies {
		info, err := c.Policy(ctx, p)
		if err != nil {
			return 0, 0, err
		}
		if info.Path != "fast" {
			continue
		}
		goPlugins++
		// Two calls at once need two instances.
		errc := make(chan error, 2)
		for k := 0; k < 2; k++ {
			go func() { errc <- compactEach(ctx, c, []string{p}) }()
		}
		for k := 0; k < 2; k++ {
			if err := <-errc; err != nil {
				return 0, 0, err
			}
		}
		if info, err = c.Policy(ctx, p); err != nil {
			return 0, 0, err
		}
		if info.Instances != nil {
			idle += info.Instances.Idle
			bytes += info.Instances.IdleMemoryBytes
		}
	}
	if idle == 0 {
		return 0, goPlugins, nil
	}
	return int64(bytes) / int64(idle), goPlugins, nil
}

// waitCompiled waits until policy (every policy if "") runs compiled code.
func waitCompiled(ctx context.Context, srv *Server, policy string) error {
	return waitCompiledAt(ctx, srv.Socket, policy)
}

func waitCompiledAt(ctx context.Context, socket, policy string) error {
	c := client.New(socket)
	defer c.Close()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		list, err := c.Policies(ctx)
		if err != nil {
			return err
		}
		done := true
		for _, p := range list {
			if (policy == "" || p.Name == policy) && p.Serving && p.Tier == "interpreted" {
				done = false
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("loadbench: plugins still interpreted after 3 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reloads writes new versions of sliding.wasm (its version string
// changed, so each is new to the compilation cache) and times each until
// it serves.
func reloads(ctx context.Context, srv *Server, opts LifecycleOptions) ([]time.Duration, error) {
	orig, err := os.ReadFile(filepath.Join(opts.Plugins, "sliding.wasm"))
	if err != nil {
		return nil, err
	}
	c := client.New(srv.Socket)
	defer c.Close()
	info, err := c.Policy(ctx, "sliding")
	if err != nil {
		return nil, err
	}
	if bytes.Count(orig, []byte(info.Version)) != 1 || len(info.Version) != 5 {
		return nil, fmt.Errorf("loadbench: sliding's version %q is not in its module exactly once", info.Version)
	}
	var out []time.Duration
	stamp := time.Now().UnixNano()
	path := filepath.Join(opts.Plugins, "sliding.wasm")
	for i := 0; i < opts.Reloads; i++ {
		// One reload at a time: the last version's compile is done.
		if err := waitCompiled(ctx, srv, "sliding"); err != nil {
			return nil, err
		}
		v := fmt.Sprintf("%05d", (stamp/1000+int64(i))%100000)
		data := bytes.Replace(orig, []byte(info.Version), []byte(v), 1)
		tmp := filepath.Join(opts.Plugins, ".sliding.wasm.tmp")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := os.Rename(tmp, path); err != nil {
			return nil, err
		}
		for {
			p, err := c.Policy(ctx, "sliding")
			if err == nil && p.Version == v {
				break
			}
			if time.Since(t0) > time.Minute {
				return nil, fmt.Errorf("loadbench: version %s never served:\n%s", v, srv.Log())
			}
			time.Sleep(time.Millisecond)
		}
		out = append(out, time.Since(t0))
		time.Sleep(50 * time.Millisecond)
	}
	return out, nil
}

// WriteLifecycle writes the figures as markdown.
func WriteLifecycle(w io.Writer, r *LifecycleResult) {
	p := func(ds []time.Duration, q float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	fmt.Fprintf(w, "| figure | value |\n|---|---:|\n")
	fmt.Fprintf(w, "| start, empty caches: exec → serving all %d policies (median of %d) | %s |\n", len(r.Policies), len(r.Cold), ms(p(r.Cold, 0.5)))
	fmt.Fprintf(w, "| … → each policy answered one compaction | %s |\n", ms(p(r.ColdAnswered, 0.5)))
	fmt.Fprintf(w, "| restart (caches filled by a previous start): exec → serving all policies (median of %d) | %s |\n", len(r.Cached), ms(p(r.Cached, 0.5)))
	fmt.Fprintf(w, "| … → each policy answered one compaction (each compiled on first use) | %s |\n", ms(p(r.CachedAnswered, 0.5)))
	fmt.Fprintf(w, "| hot reload of a new sliding.wasm: rename → serving, p50 / p95 / max of %d | %s / %s / %s |\n", len(r.Reload),
		ms(p(r.Reload, 0.5)), ms(p(r.Reload, 0.95)), ms(p(r.Reload, 1)))
	fmt.Fprintf(w, "| resident memory right after a restart (serving, nothing compiled yet) | %s |\n", mb(r.ReadyRSS))
	fmt.Fprintf(w, "| resident memory, idle, after every policy answered once | %s |\n", mb(r.IdleRSS))
	if r.IdleUnload > 0 {
		fmt.Fprintf(w, "| resident memory once unused plugins were unloaded (limits.plugin_idle_unload %v here) | %s |\n", r.IdleUnload, mb(r.UnloadedRSS))
	} else {
		fmt.Fprintf(w, "| resident memory once unused plugins were unloaded | - (the daemon has no limits.plugin_idle_unload) |\n")
	}
	fmt.Fprintf(w, "| resident memory, peak of a cold start | %s |\n", mb(r.ColdPeak))
	fmt.Fprintf(w, "| linear memory of an idle Go plugin instance (mean over %d plugins' pools, after a compaction) | %s |\n", r.GoPlugins, mb(r.InstanceBytes))
}
