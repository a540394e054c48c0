// Package cachemark builds the prompt-cache breakpoints the built-in
// policies put on their results (abi.CompactResult.CacheBreakpoints).
//
// A policy marks the end of each part of its output that stays byte-stable
// from one request to the next: the pinned prefix (system messages and the
// task), and the end of a summary or a kept window that only changes when
// the policy compacts again. Under a provider that caches at breakpoints
// (Anthropic), a compaction then rewrites only what follows the last
// unchanged mark instead of the whole request.
//
// The package builds for the host and for wasip1 guests and depends only on
// abi and the standard library.
package cachemark

import (
	"sort"

	"github.com/compactd/compactd/abi"
)

// Marks returns the breakpoints that end prefixes of the given lengths, in
// output messages: a prefix of n messages is marked on message n-1.
// Lengths below 1 are ignored, duplicates dropped, and the result is
// ascending. When more than abi.MaxCacheBreakpoints remain, the shortest
// prefix and the longest ones are kept (the shortest is the one that
// survives every compaction; the longest save the most between them).
func Marks(prefixes ...int) []int {
	out := make([]int, 0, len(prefixes))
	for _, n := range prefixes {
		if n < 1 {
			continue
		}
		dup := false
		for _, m := range out {
			if m == n-1 {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, n-1)
		}
	}
	sort.Ints(out)
	if len(out) > abi.MaxCacheBreakpoints {
		keep := append([]int{out[0]}, out[len(out)-abi.MaxCacheBreakpoints+1:]...)
		out = keep
	}
	return out
}

// Unchanged returns a result that keeps all n input messages, says summary,
// and marks the first stable messages (see Marks).
func Unchanged(n int, summary string, stable ...int) *abi.CompactResult {
	res := abi.Unchanged(n, summary)
	marks := make([]int, 0, len(stable))
	for _, s := range stable {
		if s <= n {
			marks = append(marks, s)
		}
	}
	if m := Marks(marks...); len(m) > 0 {
		res.CacheBreakpoints = m
	}
	return res
}
