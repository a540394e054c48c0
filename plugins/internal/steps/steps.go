// Package steps turns a chat conversation into the "entries" that the seed
// compaction policies (rlm-code's deterministic, hierarchical and LLM
// summaries) work on, and builds the deterministic summary of a list of
// entries. The recap, deterministic and hierarchical plugins use it, and the
// LLM policy uses DeterministicSummary as its fallback when the LLM fails.
//
// # Entries
//
// rlm-code's history is a list of agent steps, each an action with its
// output. In a chat conversation an entry is a turn unit (convo.Units):
//
//   - an assistant message with the tool results that answer it: the action
//     is the name of the tool it called (several distinct names of parallel
//     calls joined with "+", in call order), the output its tool results'
//     text (joined with "\n");
//   - an assistant message without tool calls: the action is "reply", the
//     output its text;
//   - a user message: the action is "user", the output its text (text
//     agents such as ReAct loops return observations as user messages).
//
// System and developer messages are instructions, not steps: they are not
// entries, and the policies keep them where they are.
//
// The package builds for the host and for wasip1 guests and depends only
// on abi and the standard library. Its functions are pure and safe for
// concurrent use.
package steps

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/compactd/compactd/abi"
)

// Actions given to entries that call no tool.
const (
	// ActionReply is the action of an assistant message without tool calls.
	ActionReply = "reply"
	// ActionUser is the action of a user message.
	ActionUser = "user"
	// ActionTool is the action of tool results whose call is outside the
	// range given to Entries (it should start at a unit boundary).
	ActionTool = "tool"
)

// Entry is one step of a conversation: a turn unit.
type Entry struct {
	// Start and End are the entry's messages, [Start, End), as indices of
	// the slice given to Entries.
	Start, End int
	// Action is the tool name(s), "reply" or "user" (see the package
	// comment).
	Action string
	// Output is the entry's output text as it is in the conversation (not
	// trimmed or shortened; see Clip).
	Output string
}

// Entries returns the entries of msgs[from:to], oldest first, skipping
// system and developer messages. from and to are clamped to [0, len(msgs)].
// A range should start and end at unit boundaries (convo.IsUnitStart):
// tool results at from whose call is before it form an entry of their own
// with ActionTool, and the tool results of the last entry are cut at to.
func Entries(msgs []abi.Message, from, to int) []Entry {
	from, to = clamp(from, len(msgs)), clamp(to, len(msgs))
	var out []Entry
	for i := from; i < to; {
		m := &msgs[i]
		end := i + 1
		for end < to && msgs[end].Role == abi.RoleTool {
			end++
		}
		switch {
		case m.IsSystem():
			i++
			continue
		case m.Role == abi.RoleUser:
			// A user message never has tool results after it in a valid
			// conversation; end is i+1 unless the input is not valid.
			out = append(out, Entry{Start: i, End: end, Action: ActionUser, Output: m.Text()})
		case m.Role == abi.RoleTool:
			out = append(out, Entry{Start: i, End: end, Action: ActionTool, Output: joinText(msgs[i:end])})
		case len(m.ToolCalls) > 0:
			out = append(out, Entry{Start: i, End: end, Action: toolAction(m.ToolCalls), Output: joinText(msgs[i+1 : end])})
		default:
			out = append(out, Entry{Start: i, End: end, Action: ActionReply, Output: m.Text()})
		}
		i = end
	}
	return out
}

func clamp(i, n int) int {
	return max(0, min(i, n))
}

// toolAction names the distinct functions of calls, in call order, joined
// with "+".
func toolAction(calls []abi.ToolCall) string {
	if len(calls) == 1 {
		return calls[0].Function.Name
	}
	names := make([]string, 0, len(calls))
	for _, c := range calls {
		if !contains(names, c.Function.Name) {
			names = append(names, c.Function.Name)
		}
	}
	return strings.Join(names, "+")
}

// joinText joins the messages' texts with "\n".
func joinText(msgs []abi.Message) string {
	switch len(msgs) {
	case 0:
		return ""
	case 1:
		return msgs[0].Text()
	}
	parts := make([]string, len(msgs))
	for i := range msgs {
		parts[i] = msgs[i].Text()
	}
	return strings.Join(parts, "\n")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ActionCount is how many entries had one action.
type ActionCount struct {
	Action string
	Count  int
}

// ActionCounts counts the entries' actions, in the order each action is
// first seen (deterministic, unlike iterating a map).
func ActionCounts(entries []Entry) []ActionCount {
	var out []ActionCount
	for _, e := range entries {
		found := false
		for k := range out {
			if out[k].Action == e.Action {
				out[k].Count++
				found = true
				break
			}
		}
		if !found {
			out = append(out, ActionCount{Action: e.Action, Count: 1})
		}
	}
	return out
}

// Actions returns the entries' distinct actions in first-seen order.
func Actions(entries []Entry) []string {
	var out []string
	for _, e := range entries {
		if !contains(out, e.Action) {
			out = append(out, e.Action)
		}
	}
	return out
}

// Clip returns s on one line, cut to at most n characters (runes): runs of
// white space (newlines included) become one space and the ends are
// trimmed. n <= 0 means no limit.
func Clip(s string, n int) string {
	var b strings.Builder
	count, pending := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			pending = count > 0
			continue
		}
		need := 1
		if pending {
			need = 2
		}
		if n > 0 && count+need > n {
			break
		}
		if pending {
			b.WriteByte(' ')
			count++
			pending = false
		}
		b.WriteRune(r)
		count++
	}
	return b.String()
}

// containsFoldASCII reports whether s contains word, ignoring ASCII case.
// word must be lower-case ASCII.
func containsFoldASCII(s, word string) bool {
	n := len(word)
	for i := 0; i+n <= len(s); i++ {
		match := true
		for j := 0; j < n; j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != word[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// SummaryOptions configure DeterministicSummary. The zero value gives
// rlm-code's defaults.
type SummaryOptions struct {
	// OmitActionCounts leaves out the "Previous N steps: a(2), b(1)" part.
	OmitActionCounts bool
	// MaxOutputs is how many key outputs to include (0 means 3).
	MaxOutputs int
	// MaxOutputChars cuts each key output to this many characters (0
	// means 200).
	MaxOutputChars int
}

// Defaults of SummaryOptions' zero fields.
const (
	DefaultMaxOutputs     = 3
	DefaultMaxOutputChars = 200
)

// DeterministicSummary summarizes entries without an LLM, in rlm-code's
// format:
//
//	Previous 6 steps: bash(4), user(1), reply(1) | Key outputs: o1; o2; o3
//
// The counts are per action in first-seen order. The key outputs are the
// first MaxOutputs non-empty outputs that do not contain "error" (in any
// case), each put on one line and cut to MaxOutputChars (see Clip). With
// OmitActionCounts and no key output it returns "Previous N steps", so the
// summary of a non-empty list is never empty; for no entries it returns "".
func DeterministicSummary(entries []Entry, opts SummaryOptions) string {
	if len(entries) == 0 {
		return ""
	}
	maxOutputs, maxChars := opts.MaxOutputs, opts.MaxOutputChars
	if maxOutputs <= 0 {
		maxOutputs = DefaultMaxOutputs
	}
	if maxChars <= 0 {
		maxChars = DefaultMaxOutputChars
	}
	var b strings.Builder
	head := "Previous " + strconv.Itoa(len(entries)) + " steps"
	if !opts.OmitActionCounts {
		b.WriteString(head)
		b.WriteString(": ")
		for k, c := range ActionCounts(entries) {
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteString(c.Action)
			b.WriteByte('(')
			b.WriteString(strconv.Itoa(c.Count))
			b.WriteByte(')')
		}
	}
	found := 0
	for _, e := range entries {
		if found == maxOutputs {
			break
		}
		if containsFoldASCII(e.Output, "error") {
			continue
		}
		out := Clip(e.Output, maxChars)
		if out == "" {
			continue
		}
		switch {
		case found > 0:
			b.WriteString("; ")
		case b.Len() > 0:
			b.WriteString(" | Key outputs: ")
		default:
			b.WriteString("Key outputs: ")
		}
		b.WriteString(out)
		found++
	}
	if b.Len() == 0 {
		return head
	}
	return b.String()
}

// SummaryRoleSchema is the JSON Schema of summary_role, the role of a
// policy's summary message: the seeds write summaries as the assistant's (Forge,
// the llms extension, rlm-code); "user" is the other choice.
const SummaryRoleSchema = `{"enum": ["assistant", "user"], "description": "the role of the summary message; a summary that would open the conversation (nothing but system messages before it) is always the user's, as Anthropic requires"}`

// SummaryRole returns the role of a summary message inserted after out,
// the output items before it: preferred ("assistant" or "user"), except
// that a summary opening the conversation — only system messages before
// it — is the user's (Anthropic's API wants the first turn to be the
// user's; OpenAI accepts either).
func SummaryRole(preferred string, in []abi.Message, out []abi.Item) string {
	for _, it := range out {
		if it.IsRef() && !in[it.Ref].IsSystem() || !it.IsRef() && !it.Message.IsSystem() {
			if preferred == abi.RoleUser {
				return abi.RoleUser
			}
			return abi.RoleAssistant
		}
	}
	return abi.RoleUser
}
