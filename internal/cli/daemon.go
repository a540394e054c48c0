package cli

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/paths"
)

// daemonFlags choose the running daemon a command talks to: --socket PATH,
// or --daemon for the socket `compactd serve` listens on by default
// (paths.Socket: $COMPACTD_SOCKET, $XDG_RUNTIME_DIR/compactd.sock, or
// ~/.local/state/compactd/compactd.sock).
type daemonFlags struct {
	socket string
	daemon bool
	getenv func(string) string
}

// register adds --socket, and --daemon unless the command always talks to
// the daemon (then --socket only overrides the default).
func (d *daemonFlags) register(fs *flagSet, env *Env, optional bool) {
	d.getenv = env.Getenv
	if optional {
		fs.StringVar(&d.socket, "socket", "", "ask the running daemon on this Unix socket `PATH` (its plugins, config and LLM provider apply)")
		fs.BoolVar(&d.daemon, "daemon", false, "ask the running daemon on its default socket ("+paths.Socket(env.Getenv)+")")
		return
	}
	fs.StringVar(&d.socket, "socket", paths.Socket(env.Getenv), "the daemon's Unix socket `PATH` ($COMPACTD_SOCKET, else $XDG_RUNTIME_DIR/compactd.sock, else ~/.local/state/compactd/compactd.sock)")
}

// remote reports whether the command should ask a daemon.
func (d *daemonFlags) remote() bool { return d.daemon || d.socket != "" }

// path is the socket to dial.
func (d *daemonFlags) path() string {
	if d.socket != "" {
		return d.socket
	}
	return paths.Socket(d.getenv)
}

// client returns a client for the chosen daemon. The caller closes it.
func (d *daemonFlags) client() *client.Client { return client.New(d.path()) }

// checkLocalFlags refuses flags that only configure local plugin loading
// when the command asks a daemon instead.
func checkLocalFlags(fs *flagSet, env *Env) (int, bool) {
	set := fs.set()
	for _, name := range localFlags {
		if set[name] {
			return fs.usageError(env, fmt.Sprintf("--%s configures plugins loaded by this command; with --socket or --daemon the daemon's own plugins, config and provider apply (drop --%s)", name, name)), false
		}
	}
	return 0, true
}

// daemonFailure prints an error from talking to the daemon on socket and
// returns the exit code that matches it.
func daemonFailure(env *Env, socket string, err error) int {
	var ce *client.Error
	if errors.As(err, &ce) {
		return env.errorf(exitForCode(ce.Code), "the daemon on %s answered %s (HTTP %d): %s", socket, ce.Code, ce.StatusCode, ce.Message)
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return env.errorf(ExitFailure, "no daemon is answering on %s (%v); start one with 'compactd serve' ('make run' in a checkout), or pass --socket PATH",
			socket, strings.TrimPrefix(oe.Err.Error(), "connect: "))
	}
	return env.errorf(ExitFailure, "talking to the daemon on %s: %v", socket, err)
}

// exitForCode maps the daemon's error codes (docs/api.md, "Errors") to the
// CLI's exit codes, as a local run would exit.
func exitForCode(code string) int {
	switch code {
	case "invalid_json", "invalid_conversation", "unsupported_format", "request_too_large", "too_many_messages":
		return ExitInput
	case "unknown_policy", "no_policy", "invalid_config":
		return ExitPolicy
	case "bad_request":
		return ExitUsage
	}
	return ExitFailure
}
