// Package config reads compactd's configuration: the environment variables
// that set policy defaults, and the daemon's config file.
package config
