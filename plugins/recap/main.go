// Command recap is the Playbooks-style batched recap compaction policy,
// built to recap.wasm:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o recap.wasm .
//
// See README.md for what it does and its config.
package main

import "github.com/compactd/compactd/pdk"

func init() { pdk.Register(policy()) }

func main() {}
