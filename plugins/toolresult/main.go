// Command toolresult is the ReAct two-layer tool-result compression
// policy, built to toolresult.wasm:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o toolresult.wasm .
//
// See README.md for what it does and its config.
package main

import "github.com/compactd/compactd/pdk"

func init() { pdk.Register(policy()) }

func main() {}
