// Command deterministic is the rule-based summary policy (no LLM), built
// to deterministic.wasm:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o deterministic.wasm .
//
// See README.md for what it does and its config.
package main

import "github.com/compactd/compactd/pdk"

func init() { pdk.Register(policy()) }

func main() {}
