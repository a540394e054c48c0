package abi

import "math"

// Limits of the contract that a plugin in any language may rely on (see
// README.md, "Limits and sandbox").
const (
	// MaxTokenCount is the largest token count the host sends in a request
	// (context_window, total_tokens, a message's tokens): 2^31-1, which fits
	// the fast path's u32 and a signed 32-bit integer in any guest language.
	// The daemon refuses requests whose integers are larger.
	MaxTokenCount = math.MaxInt32

	// MaxHostInputBytes is the largest block count_tokens and llm_complete
	// take. count_tokens answers CountTokensRefused for a larger text
	// (count it in pieces); llm_complete answers an invalid_request error.
	MaxHostInputBytes = 16 << 20

	// MaxLogLineBytes is the longest log line the host keeps: a longer
	// message is cut, and says by how much.
	MaxLogLineBytes = 4 << 10

	// LogLinesPerSecond and LogBurst bound how much one plugin file may
	// log: a token bucket of LogBurst lines refilled at LogLinesPerSecond.
	// Lines over the limit are dropped and counted.
	LogLinesPerSecond = 100
	LogBurst          = 1000

	// MaxDescribeBytes caps describe's output: a name, a version, a
	// description, a config schema and its defaults.
	MaxDescribeBytes = 1 << 20
)

// CountTokensRefused is what count_tokens returns for a text longer than
// MaxHostInputBytes: all bits set, -1 as a signed i64. Text within the
// limit always gets a count.
const CountTokensRefused = math.MaxUint64
