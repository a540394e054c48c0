package main

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/fingerprint"
	"github.com/compactd/compactd/plugins/internal/steps"
)

// A summary message is an assistant (or user, per summary_role) message
// whose text starts with a fixed header line, so a later call recognises
// it (and folds it into the next summary instead of reading it as a turn):
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

// isSummary reports whether m is a summary this policy wrote (in either
// role).
func isSummary(m *abi.Message) bool {
	if m.Role != abi.RoleUser && m.Role != abi.RoleAssistant || len(m.ToolCalls) > 0 || m.Content.Len() < len(headerPrefix) {
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

// runSummary is one summary of the output: it stands where a run of compactible
// messages (between messages kept verbatim) was, starting at message
// Start, and covers Count messages.
type runSummary struct {
	Start   int    `json:"start"`
	Count   int    `json:"count"`
	Summary string `json:"summary"`
}

// piece is the part of a run one summary step covers: [start, end), in
// step Step. extends: it continues the run the previous step's last piece
// began (the step boundary fell inside the run).
type piece struct {
	step, start, end int
	extends          bool
}

// pieces splits each step's span into its runs of compactible messages
// (the messages kept verbatim — user, system, developer — separate them),
// in order.
func pieces(msgs []abi.Message, lead int, sched []step) []piece {
	var out []piece
	for j, s := range sched {
		begin := lead
		if j > 0 {
			begin = sched[j-1].end
		}
		for i := begin; i < s.end; {
			if preserved(&msgs[i]) {
				i++
				continue
			}
			start := i
			for i < s.end && !preserved(&msgs[i]) {
				i++
			}
			out = append(out, piece{step: j, start: start, end: i,
				extends: j > 0 && start == begin && start > lead && !preserved(&msgs[start-1])})
		}
	}
	return out
}

// summaryResult is what summarize made.
type summaryResult struct {
	runs     []runSummary // the summaries, in order ("" bodies never)
	calls    int          // llm_complete calls made
	fallback bool         // the deterministic fallback was used
	state    json.RawMessage
	warnings []string
}

// savedState is the per-conversation state: the summaries made with the
// LLM up to a step, so the next call resumes from there instead of
// replaying every earlier step (each would be a cache hit, but costs a
// round trip). FP ties it to the exact history and config it was made
// from.
type savedState struct {
	V     int          `json:"v"`
	Steps int          `json:"steps"`
	End   int          `json:"end"`
	FP    string       `json:"fp"`
	Runs  []runSummary `json:"runs"`
}

// stateVersion is the layout of savedState (1 held one summary).
const stateVersion = 2

// summarize runs the schedule's steps: each piece of a step's span is
// summarized by one LLM call, folded into its run's summary when the run
// began in an earlier step, starting from the saved state when it
// matches. When a call fails, that piece and every later one is
// summarized deterministically (and folded into its run's summary so
// far).
func summarize(h pdk.Host, msgs []abi.Message, lead int, sched []step, cfg config, model string, rawState json.RawMessage) summaryResult {
	var res summaryResult
	fps := fingerprints(msgs, sched, cfg, model)
	first := 0
	var runs []runSummary
	if st, ok := loadState(rawState); ok && st.Steps >= 1 && st.Steps <= len(sched) &&
		st.End == sched[st.Steps-1].end && st.FP == fps[st.Steps-1] {
		first, runs = st.Steps, append([]runSummary(nil), st.Runs...)
	}
	done, doneRuns := first, append([]runSummary(nil), runs...) // LLM progress, for the state
	failed := false
	ps := pieces(msgs, lead, sched)
	if len(ps) == 0 {
		res.warnings = append(res.warnings, "nothing to summarize in the span (only messages kept verbatim); conversation kept as it is")
		return res
	}
	for _, p := range ps {
		if p.step < first {
			continue
		}
		if !failed && p.step > done {
			done, doneRuns = p.step, append(doneRuns[:0], runs...)
		}
		var prev string
		count := 0
		cur := -1 // the run this piece extends
		if p.extends && len(runs) > 0 {
			cur = len(runs) - 1
			prev, count = runs[cur].Summary, runs[cur].Count
		}
		from := p.start
		if s := lastSummary(msgs, p.start, p.end); s >= 0 {
			count, prev, _ = parseSummary(msgs[s].Text())
			from = s + 1
		}
		// The summarizer also reads the message kept verbatim right before
		// a new run (the user's request it answers), marked as kept.
		ctx := from
		if from == p.start && !p.extends && from > lead && msgs[from-1].Role == abi.RoleUser && !isSummary(&msgs[from-1]) {
			ctx = from - 1
		}
		var text string
		if !failed {
			t, err := callLLM(h, cfg, model, prev, msgs[ctx:p.end])
			res.calls++
			if err != nil {
				failed = true
				res.warnings = append(res.warnings, "LLM summary failed ("+err.Error()+"); used the deterministic summary")
				if done > first {
					res.state = saveState(done, sched, fps, doneRuns)
				}
			} else {
				text = t
				count += compactibleCount(msgs[from:p.end])
			}
		}
		if failed {
			text, count = fallback(msgs, p.start, p.end, prev, count)
			res.fallback = true
			if text == "" {
				res.warnings = append(res.warnings, "no deterministic summary either; conversation kept as it is")
				res.runs = nil
				return res
			}
		}
		if cur >= 0 {
			runs[cur].Summary, runs[cur].Count = text, count
		} else {
			runs = append(runs, runSummary{Start: p.start, Count: count, Summary: text})
		}
	}
	res.runs = runs
	if !failed && first < len(sched) {
		res.state = saveState(len(sched), sched, fps, runs)
	}
	return res
}

// saveState records that the first steps steps made runs.
func saveState(steps int, sched []step, fps []string, runs []runSummary) json.RawMessage {
	b, _ := json.Marshal(savedState{V: stateVersion, Steps: steps, End: sched[steps-1].end, FP: fps[steps-1], Runs: runs})
	return b
}

func loadState(raw json.RawMessage) (savedState, bool) {
	var st savedState
	if len(raw) == 0 || json.Unmarshal(raw, &st) != nil || st.V != stateVersion {
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
	var h fingerprint.Hash
	h.Str("compactd-llm-policy-v2")
	h.Str(model)
	h.Str(cfg.Prompt)
	h.Str(cfg.SummaryTag)
	h.Word(uint64(cfg.maxTokens()))
	h.Word(math.Float64bits(cfg.Temperature))
	h.Bool(cfg.keyFindings())
	out := make([]string, len(sched))
	i := 0
	for j, s := range sched {
		for ; i < s.end; i++ {
			h.Message(&msgs[i])
		}
		f := h
		for _, t := range sched[:j+1] {
			f.Word(uint64(t.end))
		}
		out[j] = f.Sum()
	}
	return out
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
