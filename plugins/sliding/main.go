// Command sliding is the sliding-window compaction policy, built to
// sliding.wasm:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o sliding.wasm .
//
// See README.md for what it does and its config.
package main

import "github.com/compactd/compactd/pdk"

func init() { pdk.Register(policy()) }

func main() {}
