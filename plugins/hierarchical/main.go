// Command hierarchical is the multi-tier compaction policy for long
// sessions, built to hierarchical.wasm:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o hierarchical.wasm .
//
// See README.md for what it does and its config.
package main

import "github.com/compactd/compactd/pdk"

func init() { pdk.Register(policy()) }

func main() {}
