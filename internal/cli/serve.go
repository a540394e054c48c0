package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/server"
	"github.com/hashicorp/go-hclog"
)

// runServe is `compactd serve`: the daemon, until SIGINT or SIGTERM.
// SIGHUP reloads the config file.
func runServe(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var common commonFlags
	common.register(fs, env)
	// The daemon logs at info unless told otherwise (the config file's
	// log_level, or this flag).
	common.logLevel = "info"
	fs.Lookup("log-level").DefValue = "info"
	socket := fs.String("socket", config.DefaultSocketPath(env.Getenv), "Unix socket `path` (default: $COMPACTD_SOCKET, else $XDG_RUNTIME_DIR/compactd.sock, else ~/.local/state/compactd/compactd.sock)")
	configPath := fs.String("config", config.DefaultConfigPath(env.Getenv), "config `file` (YAML; optional; PUT /v1/config writes it)")
	stateDir := fs.String("state-dir", config.DefaultStateDir(env.Getenv), "state `directory` holding state.db")
	tcp := fs.String("tcp", "", "also listen on this loopback `address` (e.g. 127.0.0.1:7077), with the bearer token of $COMPACTD_TOKEN")
	logJSON := fs.Bool("log-json", false, "write logs as JSON lines")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: compactd serve [flags]\n\nRuns the daemon: the HTTP/JSON API on a Unix socket, with the plugins\ndirectory watched for changes. SIGHUP reloads the config file; SIGINT or\nSIGTERM drains requests in flight and stops.\n\nflags (each overrides the config file):")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return ExitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
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
		fmt.Fprintln(env.Stderr, "compactd serve:", err)
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, config.ErrInvalidEnv) {
			return ExitPolicy
		}
		return ExitFailure
	}
	serving := d.Registry().Counters().Serving
	fmt.Fprintf(env.Stderr, "compactd %s serving %d policies on %s (SIGHUP reloads %s; Ctrl-C stops)\n", Version, serving, d.Socket(), d.Config().Path())

	code := ExitOK
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-hup:
			d.Reload() // logged; an invalid file keeps the running config
		case err := <-d.Errors():
			fmt.Fprintln(env.Stderr, "compactd serve:", err)
			code = ExitFailure
			break loop
		}
	}
	if err := d.Shutdown(context.Background()); err != nil {
		fmt.Fprintln(env.Stderr, "compactd serve: shutting down:", err)
		code = ExitFailure
	}
	return code
}
