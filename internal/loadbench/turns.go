package loadbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// The cost of one turn against the length of the conversation. An agent
// re-sends its whole history every turn; compactd should pay for what is
// new, not for the history again.

// TurnOptions configure Turns.
type TurnOptions struct {
	// Socket and PID are the daemon's.
	Socket string
	PID    int
	// Policy is the policy every request names; Model the model.
	Policy, Model string
	// Base is a long real conversation (see LongConversation); requests
	// are its prefixes.
	Base []json.RawMessage
	// Lengths are the history lengths N measured (default 10, 100, 500).
	Lengths []int
	// Conversations is how many distinct conversations each figure is
	// measured on (default 64): the CPU figures are totals over them.
	Conversations int
	// Run tells apart conversations of different calls in one daemon.
	Run int
}

// TurnResult is the cost of requests of one kind, per request: the
// server's CPU time and the client's wall time.
type TurnResult struct {
	// Kind is "first" (the first request of a conversation of N messages,
	// none seen before), "repeat" (the same request again) or "next" (the
	// request after one of N messages: the same history plus one turn).
	Kind     string
	N        int
	CPU      time.Duration
	Wall     time.Duration
	Warnings int
}

// Turns measures, for one policy: the first request of a 10-message
// conversation, that request repeated, and for each N in Lengths the
// request that follows one of N messages with one more turn. Each figure
// is the mean over Conversations distinct conversations, made distinct by
// a marker in their first user message (so their ids differ); the new
// turn of a "next" request is new to the daemon (marked too), so its
// tokens are counted as an agent's new turn would be.
func Turns(ctx context.Context, opts TurnOptions) ([]TurnResult, error) {
	if len(opts.Lengths) == 0 {
		opts.Lengths = []int{10, 100, 500}
	}
	if opts.Conversations <= 0 {
		opts.Conversations = 64
	}
	c := newLoadClient(opts.Socket)
	defer c.close()
	body := Body{Policy: opts.Policy, Model: opts.Model}
	var out []TurnResult

	// measure sends reqs (one per conversation) and returns the mean cost.
	measure := func(kind string, n int, reqs [][]json.RawMessage) (TurnResult, error) {
		r := TurnResult{Kind: kind, N: n}
		cpu0, err := ProcCPU(opts.PID)
		if err != nil {
			return r, err
		}
		for _, msgs := range reqs {
			d, answer, err := c.post(ctx, body, msgs)
			if err != nil {
				return r, fmt.Errorf("%s, %d messages: %w", kind, len(msgs), err)
			}
			r.Wall += d
			if warned(answer) {
				r.Warnings++
			}
		}
		cpu1, err := ProcCPU(opts.PID)
		if err != nil {
			return r, err
		}
		k := time.Duration(len(reqs))
		r.CPU, r.Wall = (cpu1-cpu0)/k, r.Wall/k
		return r, nil
	}
	send := func(reqs [][]json.RawMessage) error {
		for _, msgs := range reqs {
			if _, _, err := c.post(ctx, body, msgs); err != nil {
				return err
			}
		}
		return nil
	}

	// The first request of a 10-message conversation: every message new.
	first := make([][]json.RawMessage, opts.Conversations)
	for j := range first {
		msgs := slices.Clone(opts.Base[:10])
		for i := range msgs {
			msgs[i] = mark(msgs[i], fmt.Sprintf("[first %d.%d.%d]", opts.Run, j, i))
		}
		first[j] = msgs
	}
	r, err := measure("first", 10, first)
	if err != nil {
		return nil, err
	}
	out = append(out, r)
	repeat := make([][]json.RawMessage, opts.Conversations)
	for j := range repeat {
		repeat[j] = first[0]
	}
	if r, err = measure("repeat", 10, repeat); err != nil {
		return nil, err
	}
	out = append(out, r)

	for _, n := range opts.Lengths {
		end := unitEnd(opts.Base, n)
		if end > len(opts.Base) {
			return nil, fmt.Errorf("loadbench: the conversation has %d messages; N=%d needs %d", len(opts.Base), n, end)
		}
		hist := make([][]json.RawMessage, opts.Conversations)
		next := make([][]json.RawMessage, opts.Conversations)
		for j := range hist {
			msgs := slices.Clone(opts.Base[:end])
			msgs[1] = mark(msgs[1], fmt.Sprintf("[next %d.%d.%d]", opts.Run, n, j))
			for i := n; i < end; i++ {
				msgs[i] = mark(msgs[i], fmt.Sprintf("[turn %d.%d.%d]", opts.Run, n, j))
			}
			hist[j], next[j] = msgs[:n], msgs
		}
		if err := send(hist); err != nil {
			return nil, err
		}
		if r, err = measure("next", n, next); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// unitEnd returns the end of the turn that starts at n: the message at n
// and the tool results after it.
func unitEnd(msgs []json.RawMessage, n int) int {
	end := n + 1
	for end < len(msgs) && role(msgs[end]) == "tool" {
		end++
	}
	return end
}

func role(m json.RawMessage) string {
	var r struct{ Role string }
	json.Unmarshal(m, &r)
	return r.Role
}

// mark appends a marker to a message's text content, so the message is
// new to the daemon (its tokens uncounted). Messages whose content is
// not a string are returned as they are.
func mark(m json.RawMessage, marker string) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(m, &fields) != nil {
		return m
	}
	var text string
	if json.Unmarshal(fields["content"], &text) != nil {
		return m
	}
	b, _ := json.Marshal(text + " " + marker)
	fields["content"] = b
	out, _ := json.Marshal(fields)
	return out
}

func warned(answer []byte) bool {
	var resp struct{ Warnings []string }
	json.Unmarshal(answer, &resp)
	return len(resp.Warnings) > 0
}

// LongConversation stitches real conversations into one of at least n
// messages: the first conversation whole, then the turns (everything after
// the first user message) of the others, in order.
func LongConversation(s *Set, n int) ([]json.RawMessage, error) {
	if len(s.Convs) == 0 {
		return nil, fmt.Errorf("loadbench: %s has no conversations", s.Name)
	}
	// Start from the longest conversation.
	longest := 0
	for i, c := range s.Convs {
		if len(c) > len(s.Convs[longest]) {
			longest = i
		}
	}
	out := slices.Clone(s.Convs[longest][:completeEnd(s.Convs[longest], 0)])
	for len(out) < n {
		added := false
		for i, c := range s.Convs {
			if i == longest || len(out) >= n {
				continue
			}
			// Skip the system messages and the first user message.
			k := 0
			for k < len(c) && role(c[k]) != "user" {
				k++
			}
			k++
			if end := completeEnd(c, k); end > k {
				out = append(out, c[k:end]...)
				added = true
			}
		}
		if !added {
			return nil, fmt.Errorf("loadbench: cannot build %d messages from %s", n, s.Name)
		}
	}
	return out, nil
}

// completeEnd returns the end of msgs[from:] without its unanswered tool
// calls: after the last tool result (from if there is none).
func completeEnd(msgs []json.RawMessage, from int) int {
	end := len(msgs)
	for end > from && role(msgs[end-1]) != "tool" {
		end--
	}
	return end
}

// WriteTurnTable writes per-policy turn costs as markdown.
func WriteTurnTable(w io.Writer, lengths []int, byPolicy map[string][]TurnResult, order []string) {
	fmt.Fprint(w, "| policy | first request, 10 messages (all new) | the same request again |")
	for _, n := range lengths {
		fmt.Fprintf(w, " next turn after N=%d |", n)
	}
	fmt.Fprintln(w, " worst next / first |")
	fmt.Fprint(w, "|---|---:|---:|")
	for range lengths {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w, "---:|")
	for _, p := range order {
		rs := byPolicy[p]
		var first time.Duration
		cell := map[string]TurnResult{}
		for _, r := range rs {
			cell[r.Kind+strconv.Itoa(r.N)] = r
			if r.Kind == "first" {
				first = r.CPU
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s |", p, turnCell(cell["first10"]), turnCell(cell["repeat10"]))
		worst := 0.0
		for _, n := range lengths {
			r := cell["next"+strconv.Itoa(n)]
			fmt.Fprintf(w, " %s |", turnCell(r))
			if first > 0 {
				worst = max(worst, float64(r.CPU)/float64(first))
			}
		}
		fmt.Fprintf(w, " %.2f× |\n", worst)
	}
}

func turnCell(r TurnResult) string {
	s := fmt.Sprintf("%s CPU (%s wall)", us(r.CPU), us(r.Wall))
	if r.Warnings > 0 {
		s += fmt.Sprintf(", %d warned", r.Warnings)
	}
	return s
}
