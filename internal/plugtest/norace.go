//go:build !race

package plugtest

// Race is true when the tests run with the race detector, which makes
// whole-data replays several times slower: they then run on a sample.
const Race = false
