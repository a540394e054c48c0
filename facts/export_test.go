package facts

import "github.com/compactd/compactd/idents"

// Internals the external tests (facts_test) check; they import
// internal/plugtest, which imports this package through the PDK.
var (
	CommandWords       = commandWords
	UnescapeJSON       = unescapeJSON
	Instruction        = instruction
	InstructionLowered = instructionLowered
	OneLine            = oneLine
	OneLineRunes       = oneLineRunes
	DedupScanMax       = dedupScanMax
)

// Dedup runs a deduper over items, each used as used says.
func Dedup(items []Item, used []bool) Set {
	var d deduper
	d.reset(0)
	for k, it := range items {
		d.add(it, used[k])
	}
	return d.set
}

// Item is idents.Item, for the tests.
type Item = idents.Item
