package config

import "github.com/compactd/compactd/internal/paths"

// DefaultSocketPath is where the daemon listens and clients connect when no
// path is given (paths.Socket: $COMPACTD_SOCKET, else
// $XDG_RUNTIME_DIR/compactd.sock, else ~/.local/state/compactd/compactd.sock).
func DefaultSocketPath(getenv func(string) string) string { return paths.Socket(getenv) }

// DefaultStateDir holds the daemon's store, state.db (paths.StateDir:
// ~/.local/state/compactd).
func DefaultStateDir(getenv func(string) string) string { return paths.StateDir(getenv) }

// DefaultConfigPath is the daemon's config file (paths.ConfigFile:
// $COMPACTD_CONFIG, else ~/.config/compactd/config.yaml). The file is
// optional: without it the daemon runs on defaults, and PUT /v1/config
// creates it.
func DefaultConfigPath(getenv func(string) string) string { return paths.ConfigFile(getenv) }
