// Package paths holds compactd's default locations: where the daemon
// listens, keeps its state, reads its config and plugins, and caches
// compiled modules. The daemon (`compactd serve`) and the CLI take them
// from here. The socket's rule is the client's (client.SocketPath, a
// public package, as clients in other languages follow it too); Socket
// hands it on, so the daemon and every client agree. Every function reads
// the environment through getenv (os.Getenv in production), so tests can
// pass their own.
package paths

import (
	"os"
	"path/filepath"

	"github.com/compactd/compactd/client"
)

// Socket is the Unix socket the daemon listens on and clients connect to
// when no path is given (client.SocketPath): $COMPACTD_SOCKET, else
// $XDG_RUNTIME_DIR/compactd.sock, else StateDir/compactd.sock
// (~/.local/state/compactd/compactd.sock).
func Socket(getenv func(string) string) string { return client.SocketPath(getenv) }

// StateDir holds the daemon's store, state.db: $XDG_STATE_HOME/compactd
// (~/.local/state/compactd).
func StateDir(getenv func(string) string) string {
	return filepath.Join(xdgDir(getenv, "XDG_STATE_HOME", ".local/state"), "compactd")
}

// ConfigFile is the daemon's config file: $COMPACTD_CONFIG, else
// $XDG_CONFIG_HOME/compactd/config.yaml (~/.config/compactd/config.yaml).
func ConfigFile(getenv func(string) string) string {
	if p := getenv("COMPACTD_CONFIG"); p != "" {
		return p
	}
	return filepath.Join(xdgDir(getenv, "XDG_CONFIG_HOME", ".config"), "compactd", "config.yaml")
}

// PluginsDir is the plugins directory: $COMPACTD_PLUGINS, else
// $XDG_DATA_HOME/compactd/plugins (~/.local/share/compactd/plugins).
// `make install` puts the built-in plugins there.
func PluginsDir(getenv func(string) string) string {
	if d := getenv("COMPACTD_PLUGINS"); d != "" {
		return d
	}
	return filepath.Join(xdgDir(getenv, "XDG_DATA_HOME", ".local/share"), "compactd", "plugins")
}

// CacheDir is wazero's compiled-module cache:
// $XDG_CACHE_HOME/compactd/wazero (~/.cache/compactd/wazero).
func CacheDir(getenv func(string) string) string {
	return filepath.Join(xdgDir(getenv, "XDG_CACHE_HOME", ".cache"), "compactd", "wazero")
}

// xdgDir is $name, else $HOME/fallback (the XDG base directory rule).
// Without a home it falls back to the temporary directory rather than
// the working directory.
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
