// Package sdktest tests compactd's proxy with the official OpenAI and
// Anthropic SDKs (npm openai and @anthropic-ai/sdk, pinned in
// testdata/package.json and installed by `make deps`), run with node
// against a real daemon's TCP listener in front of a local upstream that
// speaks each provider's wire format (internal/proxy/upstreamtest). It has
// no code of its own: see sdk_test.go.
package sdktest
