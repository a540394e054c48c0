// Package clienttest drives compactd's proxy with the third-party clients
// agents use — the official openai (Chat Completions and Responses) and
// @anthropic-ai/sdk SDKs, the Vercel AI SDK (ai with @ai-sdk/openai on
// both APIs and @ai-sdk/anthropic), LangChain JS (@langchain/openai on
// both APIs, @langchain/anthropic) and @mistralai/mistralai — pinned in
// testdata/package.json and installed by `make deps`. Each runs a long
// tool-using session with node against a real daemon's TCP listener in
// front of the local provider (internal/provider), which refuses what the
// real APIs refuse. See client_test.go.
package clienttest
