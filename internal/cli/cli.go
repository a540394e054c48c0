// Package cli is compactd's command line: it parses flags, wires the
// packages together and maps failures to exit codes. cmd/compactd only
// calls Main.
//
// Conventions every command keeps (docs/cli.md): flags go
// before or after positional arguments (`--` ends the flags); -h and
// --help print the command's usage on stdout and exit 0; an error is
// printed once, on stderr, as one line starting with "compactd: "; an
// unknown flag is named as it was typed.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/conform"
	"github.com/compactd/compactd/internal/paths"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/policyconfig"
	"github.com/compactd/compactd/registry"
	"github.com/hashicorp/go-hclog"
)

// Exit codes. They are part of the CLI's contract (docs/cli.md, "Exit codes").
const (
	ExitOK           = 0
	ExitFailure      = 1 // anything not listed below (e.g. no daemon answering)
	ExitUsage        = 2 // bad flags or arguments
	ExitInput        = 3 // missing file, malformed JSON, invalid conversation, unsupported format
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

// errorf prints one error line, "compactd: …", and returns code.
func (env *Env) errorf(code int, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	// Errors from packages that prefix their own name (the client's
	// "compactd: …") must not print the prefix twice.
	for strings.HasPrefix(msg, "compactd: ") {
		msg = strings.TrimPrefix(msg, "compactd: ")
	}
	fmt.Fprintf(env.Stderr, "compactd: %s\n", msg)
	return code
}

// fail prints err once and returns code.
func (env *Env) fail(code int, err error) int { return env.errorf(code, "%v", err) }

func commands() map[string]command {
	return map[string]command{
		"compact":  {"compact a conversation once (or on the running daemon, --socket) and print the result", runCompact},
		"policies": {"list the policies in the plugins directory (or the daemon's, --socket)", runPolicies},
		"status":   {"show the running daemon's health, policies and conversations", runStatus},
		"plugins":  {"act on the running daemon's plugin files: retry NAME loads one again (lifts a quarantine)", runPlugins},
		"conform":  {"check that a plugin keeps compactd's ABI contract", runConform},
		"eval":     {"measure policies on recorded conversations: tokens, cache, cost, retention", runEval},
		"version":  {"print the version, commit, Go version and plugin ABI version", runVersion},
		"serve":    {"run the daemon: the HTTP/JSON API on a Unix socket", runServe},
		"new":      {"write a new policy project (go, c, rust, assemblyscript)", runNew},
		"provider": {"run a local LLM provider (OpenAI and Anthropic wire formats) to try the proxy against", runProvider},
	}
}

// Main runs the command line and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv}
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if cmd, ok := cmds[args[1]]; ok {
				return cmd.run(context.Background(), env, []string{"-h"})
			}
			return env.errorf(ExitUsage, "unknown command %q (run 'compactd help' for the list)", args[1])
		}
		usage(stdout, cmds)
		return ExitOK
	case "--version", "-version", "-V":
		return runVersion(context.Background(), env, args[1:])
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		if strings.HasPrefix(args[0], "-") {
			return env.errorf(ExitUsage, "unknown flag %s before the command (run 'compactd help')", args[0])
		}
		return env.errorf(ExitUsage, "unknown command %q (run 'compactd help' for the list)", args[0])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cmd.run(ctx, env, args[1:])
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: compactd <command> [flags] [arguments]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'compactd <command> -h' for a command's flags, 'compactd --version' for the version.")
}

// flagSet is a command's flags with compactd's conventions: usage on
// stdout for -h, errors printed once by parse, flags anywhere.
type flagSet struct {
	*flag.FlagSet
	synopsis string // after "usage: compactd NAME "
	about    string // paragraphs after the usage line
}

func newFlagSet(name, synopsis, about string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors; printUsage writes usage
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, synopsis: synopsis, about: about}
}

// parse parses args, flags before or after the positional arguments
// ("--" ends the flags). It returns the positional arguments and
// ok=true, or ok=false and the exit code: ExitOK after -h/--help (usage
// printed on stdout), ExitUsage after a flag error (printed on stderr).
func (f *flagSet) parse(env *Env, args []string) (pos []string, code int, ok bool) {
	rest := args
	for {
		if err := f.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.printUsage(env.Stdout)
				return nil, ExitOK, false
			}
			return nil, f.usageError(env, flagError(err, args)), false
		}
		left := f.Args()
		if len(left) == 0 {
			return pos, 0, true
		}
		if consumed := len(rest) - len(left); consumed > 0 && rest[consumed-1] == "--" {
			return append(pos, left...), 0, true
		}
		pos = append(pos, left[0])
		rest = left[1:]
	}
}

// usageError prints a usage error and where to find the usage.
func (f *flagSet) usageError(env *Env, msg string) int {
	env.errorf(ExitUsage, "%s", msg)
	fmt.Fprintf(env.Stderr, "Run 'compactd %s -h' for usage.\n", f.Name())
	return ExitUsage
}

// flagError rewrites the flag package's errors to name the flag as the
// user typed it ("--nope", not "-nope").
func flagError(err error, args []string) string {
	msg := err.Error()
	name, found := strings.CutPrefix(msg, "flag provided but not defined: -")
	if !found {
		return msg
	}
	typed := "--" + name
	for _, a := range args {
		if n, _, _ := strings.Cut(a, "="); strings.TrimLeft(n, "-") == name && strings.HasPrefix(n, "-") {
			typed = n
			break
		}
	}
	return "unknown flag " + typed
}

// printUsage writes the usage line, the description and the flags, each
// spelled with two dashes (one works too).
func (f *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: compactd %s %s\n", f.Name(), f.synopsis)
	if f.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(f.about))
	}
	hasFlags := false
	f.VisitAll(func(*flag.Flag) { hasFlags = true })
	if !hasFlags {
		return
	}
	fmt.Fprintln(w, "\nflags:")
	f.VisitAll(func(fl *flag.Flag) {
		arg, help := flag.UnquoteUsage(fl)
		head := "  --" + fl.Name
		if arg != "" {
			head += " " + arg
		}
		if len(head) <= 22 {
			fmt.Fprintf(w, "%-24s%s", head, help)
		} else {
			fmt.Fprintf(w, "%s\n%24s%s", head, "", help)
		}
		if fl.DefValue != "" && fl.DefValue != "false" && fl.DefValue != "0" && fl.DefValue != "[]" {
			fmt.Fprintf(w, " (default %q)", fl.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// set reports which flags were given on the command line.
func (f *flagSet) set() map[string]bool {
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return set
}

// commonFlags are the flags every command that loads plugins itself
// shares.
type commonFlags struct {
	plugins  string
	cacheDir string
	logLevel string
}

// localFlags are the commonFlags' names: they configure plugins loaded by
// the command itself, so they do not combine with --socket.
var localFlags = []string{"plugins", "cache-dir", "log-level"}

func (c *commonFlags) register(fs *flagSet, env *Env) {
	fs.StringVar(&c.plugins, "plugins", paths.PluginsDir(env.Getenv), "plugins `DIR` ($COMPACTD_PLUGINS, else $XDG_DATA_HOME/compactd/plugins)")
	fs.StringVar(&c.cacheDir, "cache-dir", paths.CacheDir(env.Getenv), "cache `DIR` of compiled and instrumented modules (\"\" disables it)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "log `LEVEL`: trace, debug, info, warn, error, off")
}

func (c *commonFlags) logger(env *Env) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "compactd", Output: env.Stderr, Level: hclog.LevelFromString(c.logLevel)})
}

// openRegistry creates an engine and a registry over the plugins directory.
func (c *commonFlags) openRegistry(logger hclog.Logger) (*host.Engine, *registry.Registry, error) {
	engine, err := host.NewEngine(host.Config{CacheDir: c.cacheDir, Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	smoke := conform.SmokeTest(tokens.New(tokens.Options{}).ForModel(""))
	reg := registry.New(registry.Options{Dir: c.plugins, Engine: engine, Logger: logger, Smoke: smoke})
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
	case errors.Is(err, chat.ErrMalformed), errors.Is(err, chat.ErrInvalid), errors.Is(err, chat.ErrUnsupportedFormat),
		errors.Is(err, os.ErrNotExist):
		return ExitInput
	case errors.Is(err, registry.ErrUnknownPolicy), errors.Is(err, registry.ErrNoDir),
		errors.Is(err, policyconfig.ErrInvalid), errors.Is(err, compactor.ErrBadRequest):
		return ExitPolicy
	case errors.As(err, &pe):
		return ExitPluginFailed
	}
	return ExitFailure
}
