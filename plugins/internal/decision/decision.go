// Package decision helps the built-in policies honour the host's decision
// to compact (abi.Context.Compact): whether a conversation is over the
// decision's target, and the steps a decision forced, which a policy that
// replays its conversation's growth remembers in its state so the next
// turns replay them too.
package decision

import (
	"bytes"
	"encoding/json"

	"github.com/compactd/compactd/abi"
)

// Over reports whether msgs hold more than target tokens; with no target
// (0) any conversation is over it.
func Over(msgs []abi.Message, target int) bool {
	if target <= 0 {
		return true
	}
	n := 0
	for i := range msgs {
		n += msgs[i].Tokens
		if n > target {
			return true
		}
	}
	return false
}

// Due reports whether the request carries the host's decision and its
// conversation is over the decision's target.
func Due(req *abi.CompactRequest) bool {
	d := req.Context.Compact
	return d != nil && Over(req.Messages, d.TargetTokens)
}

// forced is the part of a policy's state this package reads and writes.
type forced struct {
	Forced []int `json:"forced"`
}

// LoadForced returns the forced steps recorded in a state (the "forced"
// key of a JSON object): positions in (0, limit], ascending, without
// repeats. A state without them, or not an object, has none.
func LoadForced(state json.RawMessage, limit int) []int {
	// Most states hold no forced step: the key is looked for before the
	// JSON is decoded (the decoder, and st escaping to the heap, cost
	// allocations in every request).
	if !bytes.Contains(state, []byte(`"forced"`)) {
		return nil
	}
	var st forced
	if json.Unmarshal(state, &st) != nil {
		return nil
	}
	out := st.Forced[:0]
	for _, k := range st.Forced {
		if k > 0 && k <= limit && (len(out) == 0 || k > out[len(out)-1]) {
			out = append(out, k)
		}
	}
	return out
}

// WithForced returns state (a JSON object, or empty) with the forced steps
// recorded under "forced", its other keys kept. With no forced steps the
// state is returned as it is.
func WithForced(state json.RawMessage, steps []int) json.RawMessage {
	if len(steps) == 0 {
		return state
	}
	m := map[string]json.RawMessage{}
	if len(state) > 0 && json.Unmarshal(state, &m) != nil {
		m = map[string]json.RawMessage{}
	}
	b, _ := json.Marshal(steps) // ints: cannot fail
	m["forced"] = b
	out, _ := json.Marshal(m) // raw JSON values already valid
	return out
}

// Contains reports whether the ascending steps hold k.
func Contains(steps []int, k int) bool {
	for _, s := range steps {
		if s == k {
			return true
		}
		if s > k {
			break
		}
	}
	return false
}
