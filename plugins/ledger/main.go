// Command ledger is compactd's default policy, built to ledger.wasm:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o ledger.wasm .
//
// See README.md for what it does and its config.
package main

import "github.com/compactd/compactd/pdk"

func init() { pdk.Register(policy()) }

func main() {}
