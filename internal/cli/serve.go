package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/paths"
	"github.com/compactd/compactd/internal/server"
	"github.com/hashicorp/go-hclog"
)

const serveAbout = `
Runs the daemon: the HTTP/JSON API on a Unix socket, with the plugins
directory watched for changes. SIGHUP reloads the config file; SIGINT or
SIGTERM drains requests in flight and stops. Each flag overrides the
config file, which overrides the defaults. Under systemd (Type=notify) it
reports readiness once its plugins are loaded; contrib/compactd.service
is a user unit.`

// runServe is `compactd serve`: the daemon, until SIGINT or SIGTERM.
// SIGHUP reloads the config file.
func runServe(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet("serve", "[flags]", serveAbout)
	var common commonFlags
	common.register(fs, env)
	// The daemon logs at info unless told otherwise (the config file's
	// log_level, or this flag).
	common.logLevel = "info"
	fs.Lookup("log-level").DefValue = "info"
	socket := fs.String("socket", paths.Socket(env.Getenv), "Unix socket `PATH` ($COMPACTD_SOCKET, else $XDG_RUNTIME_DIR/compactd.sock, else ~/.local/state/compactd/compactd.sock)")
	configPath := fs.String("config", paths.ConfigFile(env.Getenv), "config `FILE` (YAML; optional; PUT /v1/config writes it)")
	stateDir := fs.String("state-dir", paths.StateDir(env.Getenv), "state `DIR` holding state.db")
	tcp := fs.String("tcp", "", "also listen on this loopback `ADDRESS` (e.g. 127.0.0.1:7077), with the bearer token of $COMPACTD_TOKEN")
	logJSON := fs.Bool("log-json", false, "write logs as JSON lines")
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return fs.usageError(env, fmt.Sprintf("unexpected argument %q (serve takes only flags)", pos[0]))
	}
	set := fs.set()
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}

	logger := hclog.New(&hclog.LoggerOptions{Name: "compactd", Output: env.Stderr, Level: hclog.Info, JSONFormat: *logJSON})
	opts := server.DaemonOptions{
		ConfigPath: abs(*configPath),
		Getenv:     env.Getenv,
		Defaults: config.Config{
			Socket: abs(*socket), PluginsDir: abs(common.plugins), StateDir: abs(*stateDir), CacheDir: common.cacheDir,
		},
		Override: func(c *config.Config) {
			if set["socket"] {
				c.Socket = abs(*socket)
			}
			if set["plugins"] {
				c.PluginsDir = abs(common.plugins)
			}
			if set["state-dir"] {
				c.StateDir = abs(*stateDir)
			}
			if set["cache-dir"] {
				c.CacheDir = common.cacheDir
			}
			if set["log-level"] {
				c.LogLevel = common.logLevel
			}
			if set["tcp"] {
				c.TCP.Listen = *tcp
			}
		},
		Logger:  logger,
		Version: Version,
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	d, err := server.Start(ctx, opts)
	if err != nil {
		code := ExitFailure
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, config.ErrInvalidEnv) {
			code = ExitPolicy
		}
		return env.fail(code, err)
	}
	if ctx.Err() == nil { // else stopped during the start: drained below
		serving := d.Registry().Counters().Serving
		fmt.Fprintf(env.Stderr, "compactd %s serving %d policies on %s (SIGHUP reloads %s; Ctrl-C stops)\n", Version, serving, d.Socket(), d.Config().Path())
		if serving == 0 {
			fmt.Fprintln(env.Stderr, noPoliciesMessage(d.Config().Current().PluginsDir, d.Registry().Counters().LoadFailures))
		}
		notify(env, fmt.Sprintf("READY=1\nSTATUS=serving %d policies on %s", serving, d.Socket()))
	}

	code = ExitOK
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-hup:
			notify(env, "RELOADING=1")
			d.Reload() // logged; an invalid file keeps the running config
			notify(env, "READY=1")
		case err := <-d.Errors():
			env.fail(ExitFailure, err)
			code = ExitFailure
			break loop
		}
	}
	notify(env, "STOPPING=1")
	if err := d.Shutdown(context.Background()); err != nil {
		env.errorf(ExitFailure, "shutting down: %v", err)
		code = ExitFailure
	}
	return code
}

// noPoliciesMessage says why a daemon serving no policy is of no use yet,
// and how to fix it.
func noPoliciesMessage(dir string, failures uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "compactd: no policies loaded from %s", dir)
	if failures > 0 {
		fmt.Fprintf(&b, " (%d plugin files failed to load; 'compactd policies --socket PATH' shows why)", failures)
	}
	b.WriteString(": every compaction will fail until one loads (/healthz says \"degraded\").\n")
	b.WriteString("  To serve the built-in policies, run 'make install' in a compactd checkout (it copies them there),\n")
	fmt.Fprintf(&b, "  or copy .wasm plugins into %s (they load as they arrive, no restart),\n", dir)
	b.WriteString("  or point the daemon at a plugins directory: --plugins DIR, plugins_dir in the config file, or $COMPACTD_PLUGINS.")
	return b.String()
}

// notify sends a state to systemd's notification socket ($NOTIFY_SOCKET,
// sd_notify(3)) when the daemon runs as a Type=notify service; elsewhere
// it does nothing.
func notify(env *Env, state string) {
	addr := env.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:] // an abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return // systemd then reports the start as timed out, which says enough
	}
	defer conn.Close()
	conn.Write([]byte(state))
}
