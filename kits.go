// Package compactd holds, embedded, the sources `compactd new` writes into
// a new policy project: the plugin kits for C, Rust and AssemblyScript
// (kits/), the project templates (kits/templates/), and the Go PDK with the
// packages it needs (abi, convo, facts, idents, pdk), which a Go project carries a copy of
// because this module is not published. internal/scaffold writes them.
package compactd

import "embed"

// Sources is the embedded tree; paths are as in this repository.
//
//go:embed kits/c/compactd.h
//go:embed kits/rust/compactd-pdk/Cargo.toml kits/rust/compactd-pdk/src
//go:embed kits/assemblyscript/compactd
//go:embed all:kits/templates
//go:embed abi/*.go abi/README.md convo/*.go facts/*.go idents/*.go pdk/*.go
var Sources embed.FS
