package main

import (
	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/plugins/internal/decision"
)

// summaryAllowance is the token count the schedule assumes for the summary
// message beyond max_tokens (its header and the message overhead).
const summaryAllowance = 24

// step is one extension of the rolling summary: when the conversation
// had grown to at messages, the span up to end was folded into it.
type step struct {
	at, end int
}

// schedule returns the summary steps of msgs: the points where a stateful
// compactor, called on every message as the conversation grew, would have
// folded a span into the summary. It replays the growth message by
// message over the *effective* conversation (the system messages, the
// messages of the summarized region kept verbatim, the summary, and
// everything after it), so the result is a pure function of the messages
// and their token counts, and the summary moves in batches: after a step
// the effective conversation is small again, and the next step comes only
// when a trigger fires again and min_batch messages are due.
//
// The schedule does not depend on what the LLM answers: each summary is
// counted as max_tokens (its cap) or the run it replaces, whichever is
// smaller, so the same history always gives the same steps, with or
// without a working LLM.
//
// Triggers (any one fires; each compares with >=, so a threshold is
// reached when the conversation is exactly at it):
//   - effective tokens >= token_threshold;
//   - effective tokens >= usage_ratio_threshold * context window (when
//     the window is known);
//   - compactible messages (system messages, the summary, and every
//     message after the summarized region) >= message_threshold;
//   - user messages after the summarized region >= turn_threshold;
//   - entries (turn units after the system messages and the task, each
//     summary and each message kept verbatim before it counting as one) >=
//     max_entries_before_compact (rlm-code's trigger), unless fewer than
//     min_entries_to_compact.
//
// Messages kept verbatim before the summary count towards tokens but not
// towards the message and turn triggers: they can never be compacted, so
// counting them would fire a trigger on every message forever.
func schedule(msgs []abi.Message, cfg config, window int) []step {
	return scheduleForced(msgs, cfg, window, nil)
}

// scheduleForced is schedule with steps the host's decision forced: at
// each n in forced (ascending), a step is taken whether or not a trigger
// fires, and min_batch does not hold it back.
func scheduleForced(msgs []abi.Message, cfg config, window int, forced []int) []step {
	lead := convo.LeadingSystem(msgs)
	next := 0  // forced[next] is the next forced step
	fixed := 0 // tokens of the system messages and the kept region
	for i := 0; i < lead; i++ {
		fixed += msgs[i].Tokens
	}
	var steps []step
	cut := lead    // the region [lead, cut) is summarized
	live := 0      // tokens of msgs[cut:n]
	liveUsers := 0 // user messages in msgs[cut:n]
	liveUnits := 0 // unit starts in msgs[cut:n]
	lastUser := -1 // index of the latest user message in msgs[:n]
	task := convo.Task(msgs)
	var region regionCost
	for n := lead + 1; n <= len(msgs); n++ {
		m := &msgs[n-1]
		live += m.Tokens
		if m.Role != abi.RoleTool {
			liveUnits++
		}
		if m.Role == abi.RoleUser && !isSummary(m) {
			liveUsers++
			lastUser = n - 1
		}
		total := fixed + live + region.tokens
		count := lead + n - cut + region.summaries
		entries := liveUnits + region.summaries + region.kept
		if task >= 0 && task < n {
			entries-- // rlm-code's history holds the steps, the task beside it
		}
		for next < len(forced) && forced[next] < n {
			next++
		}
		force := next < len(forced) && forced[next] == n
		if !force && !fires(cfg, window, total, count, liveUsers, entries) {
			continue
		}
		// The span ends at a unit start that leaves retention_window
		// messages (or preserve_last_n units), and always the newest
		// unit, out of it.
		end := retained(msgs, lead, n, cfg)
		if !cfg.SummarizeToolLoop && lastUser >= 0 {
			end = min(end, lastUser)
		}
		if end <= cut || !force && end-cut < cfg.MinBatch || !compactible(msgs[cut:end]) {
			continue
		}
		for i := cut; i < end; i++ {
			live -= msgs[i].Tokens
			if msgs[i].Role != abi.RoleTool {
				liveUnits--
			}
			if preserved(&msgs[i]) {
				fixed += msgs[i].Tokens
				if msgs[i].Role == abi.RoleUser {
					liveUsers--
				}
			}
		}
		cut = end
		region = summarizedRegion(msgs, lead, cut, cfg)
		steps = append(steps, step{at: n, end: end})
	}
	return steps
}

// retained returns where the span of a step taken on msgs[:n] ends: the
// latest unit start that leaves retention_window messages (widened to
// whole units) — or, with preserve_last_n, that many units — after it,
// and never after the newest unit's start.
func retained(msgs []abi.Message, lead, n int, cfg config) int {
	newest := convo.UnitStartAtOrBefore(msgs, n-1)
	if cfg.PreserveLastN > 0 {
		end := n
		for k := 0; k < cfg.PreserveLastN && end > lead; k++ {
			end = convo.UnitStartAtOrBefore(msgs, end-1)
		}
		return min(max(end, lead), newest)
	}
	return min(convo.UnitStartAtOrBefore(msgs, max(n-cfg.RetentionWindow, 0)), newest)
}

// regionCost is what the summarized region [lead, cut) adds to the
// effective conversation: its summaries (one per run of summarized
// messages), the tokens counted for them, and the messages kept verbatim
// in it (they count as entries for rlm-code's triggers; their tokens are
// in fixed).
type regionCost struct {
	summaries, kept, tokens int
}

// summarizedRegion computes the region's cost. Each summary is counted as
// max_tokens (its cap) plus an allowance, or as the run it replaces when
// that is smaller: the schedule must not depend on what the LLM answers.
func summarizedRegion(msgs []abi.Message, lead, cut int, cfg config) regionCost {
	var c regionCost
	capTokens := cfg.maxTokens() + summaryAllowance
	for i := lead; i < cut; {
		if preserved(&msgs[i]) {
			c.kept++
			i++
			continue
		}
		run := 0
		for i < cut && !preserved(&msgs[i]) {
			run += msgs[i].Tokens
			i++
		}
		c.summaries++
		c.tokens += min(run, capTokens)
	}
	return c
}

// fires reports whether any trigger fires on an effective conversation of
// total tokens, count compactible messages, users turns since the
// summarized region and entries (turn units after the system messages;
// rlm-code's history length). min_entries_to_compact, when set, holds
// every trigger back below that many entries.
func fires(cfg config, window, total, count, users, entries int) bool {
	if cfg.MinEntriesToCompact > 0 && entries < cfg.MinEntriesToCompact {
		return false
	}
	switch {
	case cfg.TokenThreshold > 0 && total >= cfg.TokenThreshold:
		return true
	case cfg.UsageRatioThreshold > 0 && window > 0 && float64(total) >= cfg.UsageRatioThreshold*float64(window):
		return true
	case cfg.MessageThreshold > 0 && count >= cfg.MessageThreshold:
		return true
	case cfg.TurnThreshold > 0 && users >= cfg.TurnThreshold:
		return true
	case cfg.MaxEntriesBeforeCompact > 0 && entries >= cfg.MaxEntriesBeforeCompact:
		return true
	}
	return false
}

// compactible reports whether span holds a message the summary replaces
// (not only messages kept verbatim).
func compactible(span []abi.Message) bool {
	for i := range span {
		if !preserved(&span[i]) {
			return true
		}
	}
	return false
}

// plan is the schedule of a compact call: the steps the triggers and the
// forced steps of the state make and, when the host has decided to
// compact, one more step forced now if one can be taken. It returns the
// forced steps to remember.
func plan(req *abi.CompactRequest, cfg config) ([]step, []int) {
	msgs := req.Messages
	forced := decision.LoadForced(req.Context.State, len(msgs))
	sched := scheduleForced(msgs, cfg, req.Context.ContextWindow, forced)
	if !decision.Due(req) || len(msgs) == 0 || len(sched) > 0 && sched[len(sched)-1].at == len(msgs) {
		return sched, forced
	}
	try := append(forced[:len(forced):len(forced)], len(msgs))
	if s := scheduleForced(msgs, cfg, req.Context.ContextWindow, try); len(s) > 0 && s[len(s)-1].at == len(msgs) {
		return s, try
	}
	return sched, forced
}
