package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/conform"
	"github.com/compactd/compactd/internal/llm"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/tracing"
	"github.com/compactd/compactd/registry"
	"github.com/hashicorp/go-hclog"
)

// DaemonOptions configure a Daemon. Only ConfigPath is required.
type DaemonOptions struct {
	// ConfigPath is the config file (it may not exist yet).
	ConfigPath string
	// Getenv reads the environment (os.Getenv if nil).
	Getenv func(string) string
	// Defaults are the default paths (socket, plugins_dir, state_dir,
	// cache_dir) for settings neither the file nor Override sets.
	Defaults config.Config
	// Override applies the command line's flags over the file.
	Override func(*config.Config)
	// Logger is the root logger; its level follows the config's log_level.
	// Plugins log through "<logger>.plugin.<name>". Discarded if nil.
	Logger hclog.Logger
	// Version is compactd's version (GET /v1/status).
	Version string
	// LLM, if set, replaces the provider the daemon builds from the
	// config's `llm:` block (internal/llm, with its summary cache in the
	// store): it runs once, at start, and returns what the compactor calls
	// once per request to get that request's Completer
	// (compactor.Options.NewLLM). Tests use it. Nil: the `llm:` block
	// decides; without one, plugins get no_provider answers.
	LLM func(cfg *config.Config, st store.Backend) (func() host.Completer, error)
	// Debounce and StoreFlush tune the registry's debounce and the
	// write-behind interval of the store and the request log's store
	// copy (0: the registry's default and state.flush_interval). Tests
	// shorten them.
	Debounce   time.Duration
	StoreFlush time.Duration
	// StoreTimeout, when set, overrides state.timeout: the bound on one
	// call to a shared store (state.url). Tests that compare a fleet's answers
	// byte for byte lengthen it: on a machine loaded far past its cores,
	// a call to the server can miss the default and be served as during
	// an outage.
	StoreTimeout time.Duration
	// CompileFirst loads a new plugin with the optimizing compiler (from
	// the compilation cache, when it holds the module) instead of serving
	// it from wazero's interpreter until the compiler is done
	// (registry.Options.Quick, the daemon's way). Tests set it where the
	// tier a plugin starts on is not what they test: the test binaries
	// share one compilation cache, from which a compiled module loads in
	// a fraction of the interpreter's time, which -race multiplies.
	CompileFirst bool
	// Replica names this daemon in a shared store's status (else the
	// COMPACTD_REPLICA environment variable, else the host name and
	// process id).
	Replica string
}

// Daemon is a running compactd: the API on its socket, over the registry
// (watching the plugins directory), the store and the config.
type Daemon struct {
	opts   DaemonOptions
	logger hclog.Logger
	cfg    *config.Manager
	engine *host.Engine
	reg    *registry.Registry
	store  store.Backend
	server *Server
	proxy  *proxy.Proxy
	// requests is the request log (closed before the store it copies to).
	requests *requestlog.Log
	// tracer exports spans over OTLP (nil: tracing off).
	tracer *tracing.Tracer

	unix      *unixSocket
	tcp       net.Listener
	httpUnix  *http.Server
	httpTCP   *http.Server
	errc      chan error
	closeOnce sync.Once
	closeErr  error
}

// Start starts a daemon: it reads the config, takes the socket (failing
// with ErrRunning if another daemon has it), opens the store, starts
// loading the plugins and serves the API at once (each policy serves as
// soon as its plugin is loaded and smoke-tested; /healthz says "starting"
// until every plugin file has been tried). It returns once every file has
// been tried and the config checked against the plugins, or once ctx ends
// (then with the daemon serving: the caller shuts it down). Shutdown stops
// it.
func Start(ctx context.Context, opts DaemonOptions) (_ *Daemon, err error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if err := config.CheckEnv(opts.Getenv); err != nil {
		return nil, err
	}
	d := &Daemon{opts: opts, logger: opts.Logger, errc: make(chan error, 2)}
	if d.logger == nil {
		d.logger = hclog.NewNullLogger()
	}
	d.cfg, err = config.Open(config.Options{
		Path: opts.ConfigPath, Getenv: opts.Getenv, Defaults: opts.Defaults, Override: opts.Override,
		OnChange: d.apply,
	})
	if err != nil {
		return nil, err
	}
	cfg := d.cfg.Current()
	d.logger.SetLevel(hclog.LevelFromString(cfg.LogLevel))
	// Everything a config decides is built (and checked) before anything
	// starts; config changes build the same plan as a dry run.
	p, err := buildPlan(cfg, opts.Getenv, opts.LLM == nil)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", d.cfg.Path(), err)
	}
	defer func() {
		if err != nil {
			d.closeAll(context.WithoutCancel(ctx))
		}
	}()

	if d.unix, err = listenUnix(cfg.Socket); err != nil {
		return nil, err
	}
	if d.store, err = openStore(ctx, cfg, opts, d.logger.Named("store")); err != nil {
		return nil, err
	}
	if d.engine, err = host.NewEngine(host.Config{CacheDir: cfg.CacheDir, Logger: d.logger.Named("plugin"),
		MaxTotalMemory: uint64(cfg.Limits.MaxTotalMemoryMB) << 20, MaxCompileMemory: uint64(cfg.Limits.MaxCompileMemoryMB) << 20}); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.PluginsDir, 0o755); err != nil {
		return nil, fmt.Errorf("plugins directory: %w", err)
	}
	if d.tracer, err = tracing.Setup(ctx, opts.Getenv, opts.Version, d.traceExportFailed()); err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if d.tracer != nil {
		d.logger.Info("tracing: exporting spans over OTLP", "to", d.tracer.Describe())
	}
	counter := tokens.New(tokens.Options{})
	ropts := registry.Options{
		Dir: cfg.PluginsDir, Engine: d.engine, DefaultLimits: p.pluginDefault, Limits: p.pluginLimits, Smoke: conform.SmokeTest(counter.ForModel("")),
		Debounce: opts.Debounce, Logger: d.logger.Named("registry"), StateDir: cfg.StateDir, Quick: !opts.CompileFirst,
		IdleUnload: cfg.Limits.PluginIdleUnload.D(),
	}
	if cfg.StateDir != "" {
		ropts.DescribedDir = filepath.Join(cfg.StateDir, "described")
	}
	d.reg = registry.New(ropts)
	if err := d.reg.Start(ctx); err != nil {
		return nil, err
	}
	d.cfg.SetCheck(d.checkConfig)

	copts := compactor.Options{Policies: d.reg, Tokens: counter, Config: d.cfg, State: d.store, Logger: d.logger.Named("compactor")}
	sopts := Options{Tracer: d.tracer, Registry: d.reg, Store: d.store, Config: d.cfg, Version: opts.Version, Logger: d.logger.Named("api"),
		Memory:       chat.NewMemory(chat.MemoryOptions{MaxBytes: cfg.Limits.ConversationCacheBytes, MaxRequestBytes: cfg.Proxy.MaxStoredBytes}),
		MemoryBudget: d.engine.MemoryBudget}
	if opts.LLM != nil {
		if copts.NewLLM, err = opts.LLM(cfg, d.store); err != nil {
			return nil, fmt.Errorf("llm provider: %w", err)
		}
	} else {
		client, err := openLLM(cfg, d.store, opts.Getenv, d.logger.Named("llm"))
		if err != nil {
			return nil, fmt.Errorf("llm provider: %w", err)
		}
		if client != nil {
			copts.NewLLM = func() host.Completer { return client.Budgeted() }
			sopts.LLMStats = client.Stats
		}
	}
	sopts.Compactor = compactor.New(copts)
	d.proxy = proxy.New(proxy.Options{Config: d.cfg, Compactor: sopts.Compactor, Store: d.store, Tokens: counter, Memory: sopts.Memory, Logger: d.logger.Named("proxy"), Tracer: d.tracer})
	sopts.Proxy = d.proxy
	if sopts.Requests, err = openRequestLog(cfg, d.store, storeFlush(cfg, opts), d.logger.Named("requests")); err != nil {
		return nil, err
	}
	d.requests = sopts.Requests
	d.server = New(sopts)
	d.proxy.SetObserver(d.server.observeProxied)
	d.proxy.SetRequestLog(d.server.logRequest)
	d.httpUnix = d.httpServer(cfg, d.server.Handler())
	go d.serve(d.httpUnix, d.unix.Listener)

	if cfg.TCP.Listen != "" {
		token, err := bearerToken(cfg, opts.Getenv)
		if err != nil {
			return nil, err
		}
		if d.tcp, err = listenTCP(cfg.TCP.Listen); err != nil {
			return nil, err
		}
		d.httpTCP = d.httpServer(cfg, d.server.TokenHandler(token))
		go d.serve(d.httpTCP, d.tcp)
	}
	// The API answers while the plugins load: each policy serves as soon
	// as its file is loaded, a request for one still loading waits for
	// it, and /healthz says "starting". Start returns once every file has
	// been tried.
	d.logger.Info("compactd answering; loading the plugins", "socket", cfg.Socket, "plugins", cfg.PluginsDir)
	select {
	case <-d.reg.Ready():
	case <-ctx.Done():
		// Stopped during the start (SIGTERM): the daemon serves until
		// the caller's Shutdown drains it, as it would have later.
		d.logger.Info("stopping before every plugin file was tried", "loading", d.reg.Counters().Loading)
		return d, nil
	}
	warnings, err := d.cfg.Check()
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", d.cfg.Path(), err)
	}
	for _, w := range warnings {
		d.logger.Warn(w)
	}
	for _, problem := range d.server.defaultPolicyProblems() {
		d.logger.Error(problem)
	}
	c := d.reg.Counters()
	// Files that do not serve: failed loads of this start, and files
	// refused without a load (remembered failures, quarantines, files
	// that are not regular files).
	refused := 0
	for _, in := range d.reg.Policies() {
		if in.Error != nil {
			refused++
		}
	}
	if cfg.Proxy.Enabled() {
		d.logger.Info("proxy forwarding", "openai", cfg.Proxy.OpenAI.Upstream, "anthropic", cfg.Proxy.Anthropic.Upstream)
	}
	d.logger.Info("compactd serving", "socket", cfg.Socket, "tcp", cfg.TCP.Listen, "policies", c.Serving,
		"failed_loads", c.LoadFailures, "files_not_serving", refused, "plugins", cfg.PluginsDir, "state", d.store.Describe(), "config", d.cfg.Path())
	return d, nil
}

func (d *Daemon) httpServer(cfg *config.Config, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.Limits.ReadTimeout.D(),
		WriteTimeout:      cfg.Limits.WriteTimeout.D(),
		IdleTimeout:       cfg.Limits.IdleTimeout.D(),
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          d.logger.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
}

func (d *Daemon) serve(srv *http.Server, ln net.Listener) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		d.errc <- err
	}
}

// bearerToken reads the TCP listener's bearer token.
func bearerToken(cfg *config.Config, getenv func(string) string) (string, error) {
	var t string
	if cfg.TCP.TokenFile != "" {
		b, err := os.ReadFile(cfg.TCP.TokenFile)
		if err != nil {
			return "", fmt.Errorf("tcp.token_file: %w", err)
		}
		t = strings.TrimSpace(string(b))
	} else {
		t = strings.TrimSpace(getenv("COMPACTD_TOKEN"))
	}
	if t == "" {
		return "", errors.New("tcp.listen is set but there is no bearer token: set tcp.token_file or $COMPACTD_TOKEN")
	}
	return t, nil
}

// plan is what a config makes a daemon build: Start builds it from the
// config it starts with, and a config change (PUT /v1/config, SIGHUP)
// builds it from the candidate as a dry run before anything is saved or
// applied. A config the daemon accepts is one it could start with.
type plan struct {
	pluginDefault host.Limits            // every plugin's limits
	pluginLimits  map[string]host.Limits // per policy, over pluginDefault
}

// buildPlan checks an effective config the way Start uses it: every
// setting in range (flags included), the host's limits, the LLM
// provider's block (decoded and validated, its API key present, nothing
// opened; unless withLLM is false: DaemonOptions.LLM replaces the
// provider), and the TCP listener's token. Its errors wrap
// config.ErrInvalid and name the setting.
func buildPlan(cfg *config.Config, getenv func(string) string, withLLM bool) (*plan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", config.ErrInvalid, err)
	}
	def, per := cfg.Limits.PluginLimits()
	if err := def.Validate(); err != nil {
		return nil, fmt.Errorf("%w: limits.plugin: %v", config.ErrInvalid, err)
	}
	for name, l := range per {
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("%w: limits.plugins.%s: %v", config.ErrInvalid, name, err)
		}
	}
	if withLLM && cfg.LLM != nil && !cfg.LLM.IsZero() {
		var lc llm.Config
		if err := cfg.LLM.Decode(&lc); err != nil {
			return nil, fmt.Errorf("%w: llm: %w", config.ErrInvalid, err)
		}
		if _, err := llm.New(lc, llm.WithGetenv(getenv), llm.WithCache(nil)); err != nil {
			return nil, fmt.Errorf("%w: llm: %w", config.ErrInvalid, err)
		}
	}
	if cfg.TCP.Listen != "" {
		if _, err := bearerToken(cfg, getenv); err != nil {
			return nil, fmt.Errorf("%w: %w", config.ErrInvalid, err)
		}
	}
	return &plan{pluginDefault: def, pluginLimits: per}, nil
}

// checkConfig is the config manager's check of a candidate config: the
// plan a start would build from it, the memory limits against what the
// serving plugins declare they need, and policy config (the environment's
// and the file's) against the loaded plugins' schemas. Configured
// policies that are not loaded are warnings.
func (d *Daemon) checkConfig(c *config.Config) ([]string, error) {
	p, err := buildPlan(c, d.opts.Getenv, d.opts.LLM == nil)
	if err != nil {
		return nil, err
	}
	if err := d.checkPluginMemory(p); err != nil {
		return nil, err
	}
	var warnings []string
	names := c.ConfiguredPolicies()
	configured := map[string]bool{}
	for _, n := range names {
		configured[n] = true
	}
	for _, in := range d.reg.Policies() {
		if in.Plugin != nil && !configured[in.Name] {
			names = append(names, in.Name) // the environment may configure it
		}
	}
	for _, name := range names {
		p, release, err := d.reg.Acquire(context.Background(), name)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("policy %q is configured but not loaded; its config is checked on each request once it loads", name))
			continue
		}
		_, err = p.Schema().Resolve(c.Layers(name, d.opts.Getenv)...)
		release()
		if err != nil {
			return nil, err
		}
	}
	return warnings, nil
}

// checkPluginMemory refuses memory limits below what a serving plugin
// declares as its initial memory: under them it could not be
// instantiated, and the reload would unload it.
func (d *Daemon) checkPluginMemory(p *plan) error {
	for _, in := range d.reg.Policies() {
		if in.Plugin == nil {
			continue
		}
		need := in.Plugin.InitialMemoryBytes()
		key, limits := "limits.plugin.max_memory_mb", d.engine.Limits().Over(p.pluginDefault)
		if per, ok := p.pluginLimits[in.Name]; ok {
			limits = limits.Over(per)
			if per.MaxMemoryPages != 0 {
				key = "limits.plugins." + in.Name + ".max_memory_mb"
			}
		}
		if have := uint64(limits.MaxMemoryPages) << 16; have < need {
			needMB := (need + 1<<20 - 1) >> 20
			return fmt.Errorf("%w: %w", config.ErrInvalid, &config.RangeError{Key: key, Value: fmt.Sprint(have >> 20),
				Allowed: fmt.Sprintf("%d to %d while plugin %s is loaded (it declares %d MiB of initial memory)", max(needMB, config.MinPluginMemoryMB), config.MaxPluginMemoryMB, in.Name, needMB)})
		}
	}
	return nil
}

// apply puts a new config into effect (it runs after Reload and Update).
func (d *Daemon) apply(old, next *config.Config) {
	d.logger.SetLevel(hclog.LevelFromString(next.LogLevel))
	if !reflect.DeepEqual(old.Limits.Plugin, next.Limits.Plugin) || !reflect.DeepEqual(old.Limits.Plugins, next.Limits.Plugins) {
		def, per := next.Limits.PluginLimits()
		d.reg.SetLimits(context.Background(), def, per)
	}
	d.store.SetLimits(next.State.TTL.D(), next.State.MaxConversations, next.State.MaxStateBytes)
	if d.proxy != nil {
		d.proxy.ConfigChanged(next)
	}
}

// Reload reads the config file again (SIGHUP). An invalid file keeps the
// running config; the error says why.
func (d *Daemon) Reload() (*config.Change, error) {
	ch, err := d.cfg.Reload()
	d.server.ConfigReloaded(ch, err)
	if err != nil {
		d.logger.Error("config reload failed; keeping the running config", "file", d.cfg.Path(), "error", err)
		return nil, err
	}
	d.logger.Info("config reloaded", "file", d.cfg.Path())
	for _, w := range ch.Warnings {
		d.logger.Warn(w)
	}
	if len(ch.RestartRequired) > 0 {
		d.logger.Warn("changed settings take effect on restart", "settings", strings.Join(ch.RestartRequired, ", "))
	}
	return ch, nil
}

// Socket returns the Unix socket's path.
func (d *Daemon) Socket() string { return d.unix.path }

// TCPAddr returns the TCP listener's address ("" when off).
func (d *Daemon) TCPAddr() string {
	if d.tcp == nil {
		return ""
	}
	return d.tcp.Addr().String()
}

// Config returns the config manager.
func (d *Daemon) Config() *config.Manager { return d.cfg }

// Registry returns the plugin registry.
func (d *Daemon) Registry() *registry.Registry { return d.reg }

// Errors delivers a listener's fatal error; the daemon should then be
// shut down.
func (d *Daemon) Errors() <-chan error { return d.errc }

// Shutdown stops accepting requests, lets those in flight finish (until
// limits.shutdown_timeout or ctx, whichever ends first; then they are cut
// off), closes the plugins, the store and the engine, and removes the
// socket. A second call returns the first one's result.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.closeOnce.Do(func() {
		// A kill from here on (a stop timeout) is not a plugin's doing.
		d.reg.Stopping()
		timeout := d.cfg.Current().Limits.ShutdownTimeout.D()
		dctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		d.logger.Info("shutting down: draining requests in flight", "deadline", timeout)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		for _, srv := range []*http.Server{d.httpUnix, d.httpTCP} {
			if srv == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := srv.Shutdown(dctx); err != nil {
					srv.Close()
					mu.Lock()
					errs = append(errs, fmt.Errorf("draining requests: %w", err))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if err := d.closeAll(context.WithoutCancel(ctx)); err != nil {
			errs = append(errs, err)
		}
		d.closeErr = errors.Join(errs...)
		d.logger.Info("stopped")
	})
	return d.closeErr
}

// closeAll releases what Start opened, in reverse order.
func (d *Daemon) closeAll(ctx context.Context) error {
	var errs []error
	for _, srv := range []*http.Server{d.httpUnix, d.httpTCP} {
		if srv != nil {
			srv.Close() // a failed start's; after Shutdown, nothing is left to close
		}
	}
	if d.proxy != nil {
		d.proxy.Close()
	}
	if d.reg != nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		errs = append(errs, d.reg.Close(cctx))
		cancel()
	}
	if d.requests != nil {
		errs = append(errs, d.requests.Close())
	}
	if d.tracer != nil {
		// The spans still buffered go out, within the bound a stop has.
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := d.tracer.Shutdown(tctx); err != nil {
			d.logger.Warn("tracing: spans not sent at shutdown", "error", err)
		}
		cancel()
	}
	if d.store != nil {
		errs = append(errs, d.store.Close())
	}
	if d.engine != nil {
		errs = append(errs, d.engine.Close(ctx))
	}
	if d.unix != nil {
		errs = append(errs, d.unix.Close())
	}
	if d.tcp != nil && d.httpTCP == nil {
		d.tcp.Close()
	}
	return errors.Join(errs...)
}

// traceExportFailed returns the daemon's handler of the trace exporter's
// failures: a warning at most once a minute (a collector that is down
// fails every batch), with the count of those left out.
func (d *Daemon) traceExportFailed() func(error) {
	var mu sync.Mutex
	var last time.Time
	var quiet int
	logger := d.logger.Named("tracing")
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(last) >= time.Minute {
			logger.Warn("exporting spans failed", "error", err, "failures_not_logged", quiet)
			last, quiet = now, 0
			return
		}
		quiet++
	}
}
