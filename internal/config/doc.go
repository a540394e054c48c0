// Package config reads compactd's configuration: the environment variables
// that set policy defaults (env.go), and the daemon's config file.
//
// The config file is YAML, the format agent tooling already uses for its
// settings (docker-compose, GitHub Actions, Kubernetes, LiteLLM's proxy
// config); JSON is valid YAML, so a JSON file works too. Unknown keys are
// errors naming the key and its line. Durations are written "300ms",
// "10s", "2m". docs/configuration.md is the reference.
//
// A Manager holds the running config: Reload reads the file again (the
// daemon calls it on SIGHUP) and Update applies a partial update and writes
// the file back atomically (PUT /v1/config). Either keeps the running
// config when the new one is invalid. A policy's config comes in layers,
// lowest precedence first: the plugin's defaults, the environment, the
// config file's `compact:` block (llm only), the file's policies.<name>,
// then the request's overrides.
package config
