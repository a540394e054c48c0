package config

import (
	"os"
	"path/filepath"
)

// DefaultSocketPath is where the daemon listens and clients connect when no
// path is given: $COMPACTD_SOCKET, else $XDG_RUNTIME_DIR/compactd.sock, else
// $XDG_STATE_HOME/compactd/compactd.sock (~/.local/state/compactd/compactd.sock).
// client.DefaultSocketPath computes the same path; a test keeps them equal.
func DefaultSocketPath(getenv func(string) string) string {
	if p := getenv("COMPACTD_SOCKET"); p != "" {
		return p
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "compactd.sock")
	}
	return filepath.Join(DefaultStateDir(getenv), "compactd.sock")
}

// DefaultStateDir holds the daemon's store (state.db): $XDG_STATE_HOME/compactd
// (~/.local/state/compactd).
func DefaultStateDir(getenv func(string) string) string {
	return filepath.Join(xdgDir(getenv, "XDG_STATE_HOME", ".local/state"), "compactd")
}

// DefaultConfigPath is the daemon's config file: $COMPACTD_CONFIG, else
// $XDG_CONFIG_HOME/compactd/config.yaml (~/.config/compactd/config.yaml).
// The file is optional: without it the daemon runs on defaults, and
// PUT /v1/config creates it.
func DefaultConfigPath(getenv func(string) string) string {
	if p := getenv("COMPACTD_CONFIG"); p != "" {
		return p
	}
	return filepath.Join(xdgDir(getenv, "XDG_CONFIG_HOME", ".config"), "compactd", "config.yaml")
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
