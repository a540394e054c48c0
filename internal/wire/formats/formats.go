// Package formats is the one registration of compactd's wire formats:
// POST /v1/compact's "format" values and the proxy's routes both come from
// All. Adding a provider format is one package implementing wire.Format
// and one line here.
package formats

import (
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/internal/wire/anthropic"
	"github.com/compactd/compactd/internal/wire/openaichat"
	"github.com/compactd/compactd/internal/wire/responses"
)

// Default is the format of a /v1/compact request that names none.
const Default = openaichat.Name

// All returns the registered formats, the default first.
func All() []wire.Format {
	return []wire.Format{
		openaichat.Format{},
		anthropic.Format{},
		responses.Format{},
	}
}

// Lookup returns the format named name ("" is Default).
func Lookup(name string) (wire.Format, bool) {
	if name == "" {
		name = Default
	}
	for _, f := range All() {
		if f.Name() == name {
			return f, true
		}
	}
	return nil, false
}

// Names returns the formats' names, the default first.
func Names() []string {
	all := All()
	names := make([]string, len(all))
	for i, f := range all {
		names[i] = f.Name()
	}
	return names
}
