// Package cli is compactd's command line: it parses flags, wires the
// packages together and maps failures to exit codes. cmd/compactd only
// calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/chat"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/policyconfig"
	"github.com/compactd/compactd/registry"
	"github.com/hashicorp/go-hclog"
)

// Exit codes. They are part of the CLI's contract (README.md).
const (
	ExitOK           = 0
	ExitFailure      = 1 // anything not listed below
	ExitUsage        = 2 // bad flags or arguments
	ExitInput        = 3 // missing file, malformed JSON, invalid conversation
	ExitPluginFailed = 4 // the plugin failed; the input was written out unchanged
	ExitPolicy       = 5 // unknown policy, no plugins directory, invalid config
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, env *Env, args []string) int
}

// Env is what a command reads and writes.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

func commands() map[string]command {
	return map[string]command{
		"compact":  {"compact a conversation once and print the result", runCompact},
		"policies": {"list the policies in the plugins directory", runPolicies},
		"conform":  {"check that a plugin keeps compactd's ABI contract", runConform},
		"eval":     {"measure policies on recorded conversations: tokens, cache, cost, retention", runEval},
		"version":  {"print the version and the ABI version", runVersion},
		"serve":    {"run the daemon: the HTTP/JSON API on a Unix socket", runServe},
		"new":      {"write a new policy project (go, c, rust, assemblyscript)", runNew},
	}
}

// Main runs the command line and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv}
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "compactd: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cmd.run(ctx, env, args[1:])
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: compactd <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun `compactd <command> -h` for a command's flags.")
}

// commonFlags are the flags every command that loads plugins shares.
type commonFlags struct {
	plugins  string
	cacheDir string
	logLevel string
}

func (c *commonFlags) register(fs *flag.FlagSet, env *Env) {
	fs.StringVar(&c.plugins, "plugins", DefaultPluginsDir(env.Getenv), "plugins `directory` (default: $COMPACTD_PLUGINS, else $XDG_DATA_HOME/compactd/plugins)")
	fs.StringVar(&c.cacheDir, "cache-dir", DefaultCacheDir(env.Getenv), "compiled-module cache `directory` (\"\" disables it)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "log `level`: trace, debug, info, warn, error, off")
}

func (c *commonFlags) logger(env *Env) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "compactd", Output: env.Stderr, Level: hclog.LevelFromString(c.logLevel)})
}

// DefaultPluginsDir is $COMPACTD_PLUGINS, else $XDG_DATA_HOME/compactd/plugins
// (~/.local/share/compactd/plugins).
func DefaultPluginsDir(getenv func(string) string) string {
	if d := getenv("COMPACTD_PLUGINS"); d != "" {
		return d
	}
	return filepath.Join(xdgDir(getenv, "XDG_DATA_HOME", ".local/share"), "compactd", "plugins")
}

// DefaultCacheDir is $XDG_CACHE_HOME/compactd/wazero (~/.cache/compactd/wazero).
func DefaultCacheDir(getenv func(string) string) string {
	return filepath.Join(xdgDir(getenv, "XDG_CACHE_HOME", ".cache"), "compactd", "wazero")
}

func xdgDir(getenv func(string) string, name, fallback string) string {
	if d := getenv(name); d != "" {
		return d
	}
	home := getenv("HOME")
	if home == "" {
		home = os.TempDir()
	}
	return filepath.Join(home, fallback)
}

// openRegistry creates an engine and a registry over the plugins directory.
func (c *commonFlags) openRegistry(env *Env, logger hclog.Logger) (*host.Engine, *registry.Registry, error) {
	engine, err := host.NewEngine(host.Config{CacheDir: c.cacheDir, Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	reg := registry.New(registry.Options{Dir: c.plugins, Engine: engine, Logger: logger})
	return engine, reg, nil
}

// setFlags collects repeated --set key=value flags.
type setFlags []string

func (s *setFlags) String() string     { return strings.Join(*s, ",") }
func (s *setFlags) Set(v string) error { *s = append(*s, v); return nil }

// overrides turns --set flags into per-policy config. With one policy,
// keys are plain ("window_size=3"); with a pipeline they name the policy
// ("sliding.window_size=3").
func (s setFlags) overrides(pipeline []string) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for _, kv := range s {
		key, value, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("--set %q: want key=value", kv)
		}
		policy := pipeline[0]
		if p, k, dotted := strings.Cut(key, "."); dotted {
			policy, key = p, k
		} else if len(pipeline) > 1 {
			return nil, fmt.Errorf("--set %q: with a pipeline, name the policy (policy.key=value)", kv)
		}
		if out[policy] == nil {
			out[policy] = map[string]any{}
		}
		out[policy][key] = policyconfig.ParseValue(value)
	}
	return out, nil
}

// exitFor maps an error from the compaction path to an exit code.
func exitFor(err error) int {
	var pe *host.PluginError
	switch {
	case errors.Is(err, chat.ErrMalformed), errors.Is(err, chat.ErrInvalid), errors.Is(err, os.ErrNotExist):
		return ExitInput
	case errors.Is(err, compactor.ErrUnknownPolicy), errors.Is(err, registry.ErrNoDir),
		errors.Is(err, policyconfig.ErrInvalid), errors.Is(err, compactor.ErrBadRequest):
		return ExitPolicy
	case errors.As(err, &pe):
		return ExitPluginFailed
	}
	return ExitFailure
}
