package main

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/bits"
	"strconv"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/steps"
)

// The summary message is a user message whose text starts with a fixed
// header line, so a later call recognises it (and folds it into the next
// summary instead of summarizing it as a user message):
//
//	[compactd summary of 42 earlier messages]
//	…summary text…
const (
	headerPrefix = "[compactd summary of "
	headerSuffix = " earlier messages]"
)

func formatSummary(count int, text string) string {
	return headerPrefix + strconv.Itoa(count) + headerSuffix + "\n" + text
}

// isSummary reports whether m is a summary this policy wrote.
func isSummary(m *abi.Message) bool {
	if m.Role != abi.RoleUser || m.Content.Len() < len(headerPrefix) {
		return false
	}
	_, _, ok := parseSummary(m.Text())
	return ok
}

// parseSummary splits a summary message's text into its count and body.
func parseSummary(s string) (count int, body string, ok bool) {
	if !strings.HasPrefix(s, headerPrefix) {
		return 0, "", false
	}
	line, body, _ := strings.Cut(s, "\n")
	num, found := strings.CutSuffix(line[len(headerPrefix):], headerSuffix)
	if !found {
		return 0, "", false
	}
	count, err := strconv.Atoi(num)
	if err != nil || count < 0 {
		return 0, "", false
	}
	return count, body, true
}

// lastSummary returns the index of the last summary message in
// msgs[from:to], or -1.
func lastSummary(msgs []abi.Message, from, to int) int {
	for i := to - 1; i >= from; i-- {
		if isSummary(&msgs[i]) {
			return i
		}
	}
	return -1
}

// summaryResult is what summarize made.
type summaryResult struct {
	text     string // the summary body ("" when none could be made)
	count    int    // messages it covers
	calls    int    // llm_complete calls made
	fallback bool   // the deterministic fallback was used
	state    json.RawMessage
	warnings []string
}

// savedState is the per-conversation state: the latest summary step made
// with the LLM, so the next call resumes from it instead of replaying
// every earlier step (each would be a cache hit, but costs a round trip).
// FP ties it to the exact history and config it was made from.
type savedState struct {
	V       int    `json:"v"`
	Steps   int    `json:"steps"`
	End     int    `json:"end"`
	FP      string `json:"fp"`
	Count   int    `json:"count"`
	Summary string `json:"summary"`
}

// summarize runs the schedule's steps: each folds its span into the
// rolling summary with one LLM call, starting from the saved state when
// it matches. When a call fails, the rest of the region is summarized
// deterministically and folded into the summary made so far.
func summarize(h pdk.Host, msgs []abi.Message, lead int, sched []step, cfg config, model string, rawState json.RawMessage) summaryResult {
	var res summaryResult
	fps := fingerprints(msgs, sched, cfg, model)
	first, prev, count := 0, "", 0
	if st, ok := loadState(rawState); ok && st.Steps >= 1 && st.Steps <= len(sched) &&
		st.End == sched[st.Steps-1].end && st.FP == fps[st.Steps-1] {
		first, prev, count = st.Steps, st.Summary, st.Count
	}
	for j := first; j < len(sched); j++ {
		begin := lead
		if j > 0 {
			begin = sched[j-1].end
		}
		end := sched[j].end
		from, prevText, prevCount := begin, prev, count
		if s := lastSummary(msgs, begin, end); s >= 0 {
			prevCount, prevText, _ = parseSummary(msgs[s].Text())
			from = s + 1
		}
		text, err := callLLM(h, cfg, model, prevText, msgs[from:end])
		res.calls++
		if err != nil {
			res.warnings = append(res.warnings, "LLM summary failed ("+err.Error()+"); used the deterministic summary")
			if j > first { // keep the LLM steps made so far for next time
				res.state = saveState(j, sched, fps, count, prev)
			}
			text, count = fallback(msgs, begin, sched[len(sched)-1].end, prev, count)
			if text == "" {
				res.warnings = append(res.warnings, "no deterministic summary either; conversation kept as it is")
				return res
			}
			res.text, res.count, res.fallback = text, count, true
			return res
		}
		prev, count = text, prevCount+compactibleCount(msgs[from:end])
	}
	res.text, res.count = prev, count
	if first < len(sched) {
		res.state = saveState(len(sched), sched, fps, count, prev)
	}
	return res
}

// saveState records that the first steps steps made summary.
func saveState(steps int, sched []step, fps []string, count int, summary string) json.RawMessage {
	b, _ := json.Marshal(savedState{V: 1, Steps: steps, End: sched[steps-1].end, FP: fps[steps-1], Count: count, Summary: summary})
	return b
}

func loadState(raw json.RawMessage) (savedState, bool) {
	var st savedState
	if len(raw) == 0 || json.Unmarshal(raw, &st) != nil || st.V != 1 {
		return st, false
	}
	return st, true
}

// compactibleCount counts the messages of span the summary replaces.
func compactibleCount(span []abi.Message) int {
	n := 0
	for i := range span {
		if !preserved(&span[i]) {
			n++
		}
	}
	return n
}

// fingerprints returns, for each step, a hash of everything its summary
// depends on: the policy's summary settings, the model, the steps up to
// it, and every message before its end. One pass over the messages.
func fingerprints(msgs []abi.Message, sched []step, cfg config, model string) []string {
	var h fingerprint
	h.str("compactd-llm-policy-v1")
	h.str(model)
	h.str(cfg.Prompt)
	h.str(cfg.SummaryTag)
	h.word(uint64(cfg.MaxTokens))
	out := make([]string, len(sched))
	i := 0
	for j, s := range sched {
		for ; i < s.end; i++ {
			m := &msgs[i]
			h.str(m.Role)
			h.str(m.Text())
			h.str(m.Name)
			h.str(m.ToolCallID)
			h.word(uint64(len(m.ToolCalls)))
			for _, c := range m.ToolCalls {
				h.str(c.ID)
				h.str(c.Function.Name)
				h.str(c.Function.Arguments)
			}
		}
		f := h
		for _, t := range sched[:j+1] {
			f.word(uint64(t.end))
		}
		out[j] = f.sum()
	}
	return out
}

// fingerprint is a 128-bit hash that reads eight bytes per step. It is
// not cryptographic: it only tells a conversation's own saved state from
// a state made for another history. A Go guest hashes with it ~10x faster
// than with crypto/sha256, whose per-round loops each cost a check of
// the host's time limit (see RATIONALE.md).
type fingerprint struct{ a, b uint64 }

const (
	fpMul1 = 0x9E3779B97F4A7C15
	fpMul2 = 0xC2B2AE3D27D4EB4F
)

func (h *fingerprint) word(w uint64) {
	h.a = bits.RotateLeft64((h.a^w)*fpMul1, 29)
	h.b = bits.RotateLeft64((h.b^w)*fpMul2, 31) + h.a
}

// str hashes s's length and bytes, so no two sequences of strings hash
// the same way by construction.
func (h *fingerprint) str(s string) {
	h.word(uint64(len(s)))
	// 64 bytes per loop iteration: in a guest every iteration costs a
	// check of the time limit, so fewer, longer iterations are faster.
	for ; len(s) >= 64; s = s[64:] {
		h.word(le64(s[0:8]))
		h.word(le64(s[8:16]))
		h.word(le64(s[16:24]))
		h.word(le64(s[24:32]))
		h.word(le64(s[32:40]))
		h.word(le64(s[40:48]))
		h.word(le64(s[48:56]))
		h.word(le64(s[56:64]))
	}
	for ; len(s) >= 8; s = s[8:] {
		h.word(le64(s))
	}
	var t uint64
	for i := 0; i < len(s); i++ {
		t |= uint64(s[i]) << (8 * i)
	}
	h.word(t)
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// sum returns the hash as 32 hex digits, after a final avalanche.
func (h fingerprint) sum() string {
	mix := func(x uint64) uint64 {
		x ^= x >> 33
		x *= 0xFF51AFD7ED558CCD
		x ^= x >> 33
		x *= 0xC4CEB9FE1A85EC53
		return x ^ x>>33
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], mix(h.a^h.b>>1))
	binary.BigEndian.PutUint64(b[8:], mix(h.b+h.a))
	return hex.EncodeToString(b[:])
}

// errNoSummary is a completion without a usable summary.
var errNoSummary = errors.New("the LLM answered without a summary")

// callLLM asks for the summary of span folded into prev.
func callLLM(h pdk.Host, cfg config, model, prev string, span []abi.Message) (string, error) {
	resp, err := h.Complete(buildRequest(cfg, model, prev, span))
	if err != nil {
		return "", err
	}
	text := extractTag(resp.Text, cfg.SummaryTag)
	if text == "" {
		return "", errNoSummary
	}
	return text, nil
}

// extractTag returns the text inside <tag>…</tag> (up to the end when the
// closing tag is missing, e.g. a summary cut by max_tokens), or the whole
// text when there is no opening tag or tag is empty. It is trimmed.
func extractTag(s, tag string) string {
	if tag == "" {
		return strings.TrimSpace(s)
	}
	open, close := "<"+tag+">", "</"+tag+">"
	i := strings.Index(s, open)
	if i < 0 {
		return strings.TrimSpace(s)
	}
	rest := s[i+len(open):]
	if j := strings.Index(rest, close); j >= 0 {
		rest = rest[:j]
	}
	return strings.TrimSpace(rest)
}

// fallback summarizes msgs[begin:end] without an LLM (steps.Deterministic
// Summary over its entries, user messages left out since they are kept
// verbatim) and appends it to the summary made so far (prev, or the text
// of the latest summary message in the span). It returns "" when there is
// nothing to say.
func fallback(msgs []abi.Message, begin, end int, prev string, count int) (string, int) {
	if s := lastSummary(msgs, begin, end); s >= 0 {
		count, prev, _ = parseSummary(msgs[s].Text())
		begin = s + 1
	}
	var entries []steps.Entry
	for _, e := range steps.Entries(msgs, begin, end) {
		if e.Action != steps.ActionUser {
			entries = append(entries, e)
		}
	}
	det := steps.DeterministicSummary(entries, steps.SummaryOptions{})
	count += compactibleCount(msgs[begin:end])
	switch {
	case det == "":
		return prev, count
	case prev == "":
		return det, count
	}
	return prev + "\n\nThen: " + det, count
}
