package main

import (
	"strconv"
	"strings"

	"github.com/compactd/compactd/abi"
)

// defaultPrompt is the built-in summarizer instructions. It asks for what
// users most often say a compaction lost. It must not change between
// calls of one version: it is part of every cache key.
const defaultPrompt = `You compress the earlier part of a conversation between a user and an AI assistant (often an agent that calls tools) so that the assistant can continue the work with your summary in place of those messages.

Write the summary for the assistant itself. Be faithful and dense; do not invent anything, and say so when something is unknown. Keep exact identifiers: file paths, function and variable names, commands, URLs, IDs, numbers and error messages.

Use these sections:
1. User goal and constraints: what the user wants, their requirements and preferences, and anything they ruled out.
2. Decisions made: choices taken so far and why.
3. Files and identifiers touched: files read, created or changed (and what changed), functions, commands, resources.
4. Errors and fixes: errors met, their causes, and how each was fixed or that it is still open.
5. Pending tasks: what remains to be done.
6. Current step: what the assistant was doing at the end of these messages, and its next action.

The user's own messages stay in the conversation word for word; do not copy them, but use them to understand the goal. If a previous summary is given, write one updated summary that merges it with the new messages: keep everything from it that still matters and update what changed.

Answer with the summary only, inside <{{summary_tag}}></{{summary_tag}}>, in at most {{max_tokens}} tokens.`

// keyFindingsPrompt is added to the built-in prompt with rlm-code's
// include_key_findings.
const keyFindingsPrompt = "\n\nFocus on key findings, successful approaches, and important context: say what was found and which approaches worked."

// maxToolText bounds one tool result in the transcript: the head and tail
// are kept, the middle is elided with a note (the summarizer needs the
// gist of a huge output, not every line).
const maxToolText = 12000

// buildRequest is the completion that folds span into prev. It depends
// only on its arguments, so the same history gives the same request (and
// the host's cache answers it).
func buildRequest(cfg config, model, prev string, span []abi.Message) abi.LLMRequest {
	tag := cfg.SummaryTag
	if tag == "" {
		tag = "summary"
	}
	conversation := transcript(span)
	prompt := cfg.Prompt
	if prompt == "" {
		prompt = defaultPrompt
		if cfg.keyFindings() {
			prompt += keyFindingsPrompt
		}
	}
	r := strings.NewReplacer("{{summary_tag}}", tag, "{{max_tokens}}", strconv.Itoa(cfg.maxTokens()),
		"{{previous_summary}}", prev, "{{conversation}}", conversation)
	req := abi.LLMRequest{Model: model, MaxTokens: cfg.maxTokens(), Temperature: cfg.Temperature}
	if strings.Contains(prompt, "{{conversation}}") {
		// A template: it is the whole request.
		req.Messages = []abi.LLMMessage{{Role: abi.RoleUser, Content: r.Replace(prompt)}}
		return req
	}
	var user strings.Builder
	if prev != "" {
		user.WriteString("<previous_summary>\n")
		user.WriteString(prev)
		user.WriteString("\n</previous_summary>\n\n")
	}
	user.WriteString("<conversation>\n")
	user.WriteString(conversation)
	user.WriteString("</conversation>\n\nWrite the ")
	if prev != "" {
		user.WriteString("updated ")
	}
	user.WriteString("summary now.")
	req.Messages = []abi.LLMMessage{
		{Role: abi.RoleSystem, Content: r.Replace(prompt)},
		{Role: abi.RoleUser, Content: user.String()},
	}
	return req
}

// transcript renders messages for the summarizer, one block each:
//
//	[user]  (kept verbatim)
//	…
//	[assistant]
//	…
//	[assistant calls bash] {"command":"ls"}
//	[tool result: bash]
//	…
func transcript(span []abi.Message) string {
	var b strings.Builder
	var names []string // the calls of the latest assistant message, by position
	var ids []string
	for i := range span {
		m := &span[i]
		switch m.Role {
		case abi.RoleUser:
			b.WriteString("[user] (kept verbatim)\n")
			b.WriteString(m.Text())
		case abi.RoleAssistant:
			names, ids = names[:0], ids[:0]
			text := strings.TrimSpace(m.Text())
			if text != "" || len(m.ToolCalls) == 0 {
				b.WriteString("[assistant]\n")
				b.WriteString(text)
			}
			for k, c := range m.ToolCalls {
				if text != "" || k > 0 {
					b.WriteByte('\n')
				}
				b.WriteString("[assistant calls ")
				b.WriteString(c.Function.Name)
				b.WriteString("] ")
				b.WriteString(c.Function.Arguments)
				names, ids = append(names, c.Function.Name), append(ids, c.ID)
			}
		case abi.RoleTool:
			name := "tool"
			for k, id := range ids {
				if id == m.ToolCallID {
					name = names[k]
					break
				}
			}
			b.WriteString("[tool result: ")
			b.WriteString(name)
			b.WriteString("]\n")
			b.WriteString(elide(m.Text(), maxToolText))
		default: // system and developer messages stay in the conversation
			b.WriteString("[")
			b.WriteString(m.Role)
			b.WriteString("] (kept verbatim)\n")
			b.WriteString(m.Text())
		}
		b.WriteString("\n\n")
	}
	return b.String()
}

// elide keeps the first and last parts of s when it is longer than n
// bytes, cut at UTF-8 boundaries, with a note of what was left out.
func elide(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head, tail := n*2/3, n/3
	for head > 0 && s[head]&0xC0 == 0x80 {
		head--
	}
	start := len(s) - tail
	for start < len(s) && s[start]&0xC0 == 0x80 {
		start++
	}
	return s[:head] + "\n[… " + strconv.Itoa(start-head) + " bytes left out …]\n" + s[start:]
}
