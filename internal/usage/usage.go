// Package usage reads the token counts an LLM provider reports in its
// answers ("usage": prompt_tokens, input_tokens, …), trusting none of
// them blindly: a provider, or a gateway in front of one, may send a
// negative count, a fraction, a string, or a number so large that sums
// and ratios over it overflow. A count is kept only when it is a whole
// number from 0 to Max; anything else is treated as absent, and kept
// aside for the log.
package usage

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// Max is the largest token count accepted: 2^53, the largest integer
// every JSON reader holds exactly (JavaScript's numbers included). No
// context window comes near it, and three such counts still add up
// within an int64.
const Max = 1 << 53

// Count is one token count of a provider's usage, decoded from JSON. Its
// decoding never fails: a value outside the rule leaves the count unset,
// as an absent or null field does, so one bad field does not spoil the
// rest of the answer.
type Count struct {
	// N is the count (0 when unset).
	N int
	// Set reports whether the field held a valid count.
	Set bool
	// Refused is the JSON text of a value that was refused (at most 40
	// bytes), for a log line; "" when none was.
	Refused string
}

// UnmarshalJSON implements json.Unmarshaler. It accepts a JSON number
// that is a whole number from 0 to Max (12, 12.0 and 1.2e1 alike).
func (c *Count) UnmarshalJSON(b []byte) error {
	*c = Count{}
	s := string(b)
	if s == "null" {
		return nil
	}
	if n, ok := parse(s); ok {
		c.N, c.Set = n, true
		return nil
	}
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	c.Refused = s
	return nil
}

// parse reads a count: plain digits exactly, any other JSON number by
// its value.
func parse(s string) (int, bool) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return int(n), n <= Max
	}
	if s == "" || !(s[0] == '-' || s[0] >= '0' && s[0] <= '9') || strings.ContainsAny(s, "xXpP_") {
		return 0, false // a string, object, array, boolean, or Go's extra number syntax
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > Max || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

// Sum adds counts, capped at Max.
func Sum(counts ...int) int {
	total := 0
	for _, n := range counts {
		total += n
	}
	return min(total, Max)
}

// Refused lists the named counts that were refused, as "name=value", for
// a log line (nil when none was).
func Refused(named map[string]Count) []string {
	var out []string
	for name, c := range named {
		if c.Refused != "" {
			out = append(out, name+"="+c.Refused)
		}
	}
	slices.Sort(out)
	return out
}
