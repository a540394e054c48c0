// Package loadbench measures compactd's data path under load, against two
// services that do no compaction at all, on the same transport and the
// same requests: an echo server (reads the body, writes it back) and a Go
// service that decodes the request with encoding/json and re-encodes its
// messages. Every target is a separate process serving HTTP on a Unix
// socket; the load comes from N client goroutines in this process, each
// with its own connection, sending every turn prefix of real agent
// conversations (an agent re-sends its history every turn): each
// conversation's in order, or many conversations' interleaved or
// shuffled, as a daemon serving many agents at once sees them
// (Set.InOrder).
//
// It also measures the cost of one turn against the length of the
// conversation (Turns), and the daemon's start, reload and memory figures
// (Lifecycle). The command in ./loadbench runs them all and writes the
// tables `make bench` puts in docs/benchmarks.md.
//
// Server CPU is read from the kernel (the sum of the server process's
// threads' run time, /proc/PID/task/*/schedstat), so the figures per
// request are the server's own cost, without the clients'.
package loadbench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"

	"github.com/compactd/compactd/internal/dataset"
)

// Set is the requests of one data file: every turn prefix of every valid
// conversation, as a stateless agent sends them (the history before each
// assistant message).
type Set struct {
	// Name labels the set in tables ("tau-bench", "mini-swe").
	Name string
	// File is the data file's base name.
	File string
	// Convs holds each conversation's messages as their original bytes,
	// and Turns the prefix lengths sent for it, in order.
	Convs [][]json.RawMessage
	Turns [][]int
	// Requests is the number of requests in one pass; MeanBytes the mean
	// size of their messages arrays.
	Requests  int
	MeanBytes float64
	// Order is how a pass sends the requests (OrderConversation if
	// empty); see InOrder.
	Order string
}

// The orders a pass can send a set's requests in.
const (
	// OrderConversation: a client takes a whole conversation and sends
	// its turn prefixes in order, as one agent does.
	OrderConversation = "conversation"
	// OrderInterleaved: the first turn of every conversation, then the
	// second of every one, and so on, clients taking the next request
	// from a shared queue: many agents at once, each in order, so
	// consecutive requests belong to different conversations.
	OrderInterleaved = "interleaved"
	// OrderShuffled: every request of the set in a random order (the
	// same each pass), clients taking the next from a shared queue: a
	// conversation's later turn may arrive before its earlier ones.
	OrderShuffled = "shuffled"
)

// InOrder returns a copy of s whose passes send its requests in order
// (one of the Order constants); its Name says the order unless it is
// OrderConversation. The copy shares s's messages.
func (s *Set) InOrder(order string) (*Set, error) {
	c := *s
	switch order {
	case "", OrderConversation:
		c.Order = OrderConversation
	case OrderInterleaved, OrderShuffled:
		c.Order = order
		c.Name = s.Name + " " + order
	default:
		return nil, fmt.Errorf("loadbench: unknown order %q (want %s, %s or %s)", order, OrderConversation, OrderInterleaved, OrderShuffled)
	}
	return &c, nil
}

// request is one request of a set: conversation Conv's first N messages.
type request struct{ Conv, N int }

// queue returns the set's requests in the order of an interleaved or
// shuffled pass.
func (s *Set) queue() []request {
	q := make([]request, 0, s.Requests)
	for t := 0; len(q) < s.Requests; t++ {
		for ci, turns := range s.Turns {
			if t < len(turns) {
				q = append(q, request{ci, turns[t]})
			}
		}
	}
	if s.Order == OrderShuffled {
		rng := rand.New(rand.NewPCG(23, uint64(s.Requests)))
		rng.Shuffle(len(q), func(i, j int) { q[i], q[j] = q[j], q[i] })
	}
	return q
}

// Known data files, by the short names tables use.
var setFiles = map[string]string{
	"tau-bench": "tau_bench_gpt4o_airline.jsonl",
	"mini-swe":  "mini_swe_agent_deepseek_swebench.jsonl",
	"medagent":  "medagentbench_fhir_react.jsonl",
	"swe-agent": "swe_agent_trajectories.jsonl",
	"toolbench": "toolbench_dfsdt_examples.jsonl",
}

// SetFile returns the data file's base name for a set name.
func SetFile(name string) (string, error) {
	f, ok := setFiles[name]
	if !ok {
		return "", fmt.Errorf("loadbench: unknown set %q (want tau-bench, mini-swe, medagent, swe-agent or toolbench)", name)
	}
	return f, nil
}

// LoadSet reads the set name from the data directory dir.
func LoadSet(name, dir string) (*Set, error) {
	file, err := SetFile(name)
	if err != nil {
		return nil, err
	}
	convs, err := dataset.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	s := &Set{Name: name, File: file}
	total := 0
	for _, c := range convs {
		if c.Chat.Validate() != nil {
			continue
		}
		var turns []int
		for i := 1; i < c.Chat.Len(); i++ {
			if c.Chat.Messages[i].Role == "assistant" {
				turns = append(turns, i)
			}
		}
		if len(turns) == 0 {
			continue
		}
		s.Convs = append(s.Convs, c.Chat.Raw)
		s.Turns = append(s.Turns, turns)
		for _, n := range turns {
			total += arraySize(c.Chat.Raw[:n])
		}
		s.Requests += len(turns)
	}
	if s.Requests == 0 {
		return nil, fmt.Errorf("loadbench: %s: no requests", file)
	}
	s.MeanBytes = float64(total) / float64(s.Requests)
	return s, nil
}

// arraySize is the size of msgs written as a JSON array.
func arraySize(msgs []json.RawMessage) int {
	n := 1
	for _, m := range msgs {
		n += len(m) + 1
	}
	return n
}

// Body is what a request sends besides its messages.
type Body struct {
	Policy string
	Model  string
	// ConversationID is sent when not empty.
	ConversationID string
}

// AppendBody appends a POST /v1/compact body holding msgs as they are.
func AppendBody(dst []byte, b Body, msgs []json.RawMessage) []byte {
	dst = append(dst, `{"policy":`...)
	dst = strconv.AppendQuote(dst, b.Policy)
	dst = append(dst, `,"model":`...)
	dst = strconv.AppendQuote(dst, b.Model)
	if b.ConversationID != "" {
		dst = append(dst, `,"conversation_id":`...)
		dst = strconv.AppendQuote(dst, b.ConversationID)
	}
	dst = append(dst, `,"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m...)
	}
	return append(dst, "]}"...)
}
