package provider

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"unicode/utf8"
)

// tool is a tool a request offers: its name and its parameters' JSON
// schema.
type tool struct {
	name   string
	schema json.RawMessage
}

// view is what the script needs of a validated request, in any format.
type view struct {
	model        string
	stream       bool
	includeUsage bool // OpenAI's stream_options.include_usage
	tools        []tool
	parallel     bool // the request allows parallel tool calls

	userTurns int      // user messages with text (not only tool results)
	lastUser  string   // the last user text
	results   []string // the tool results that end the conversation, if it ends with them
	texts     []string // every piece of text, for the prompt's token count
	messages  int
}

// call is one tool call the model makes.
type call struct {
	id, name, args string
}

// reply is what the model says: text or tool calls.
type reply struct {
	text  string
	calls []call
}

// resultQuote is how much of each tool result the answer quotes.
const resultQuote = 160

// decide plays the script: tool results get an answer quoting them; a
// user turn with tools gets a call (two for one question in
// ParallelEvery, where parallel calls are allowed) whose arguments follow
// the tool's schema, naming a file and a record id that change with the
// question; anything else is echoed.
func (p *Provider) decide(v *view, newID func() string) reply {
	if len(v.results) > 0 {
		quotes := make([]string, len(v.results))
		for i, r := range v.results {
			quotes[i] = truncate(r, resultQuote)
		}
		return reply{text: "result: " + strings.Join(quotes, "; ")}
	}
	if len(v.tools) > 0 && v.userTurns > 0 && v.lastUser != "" {
		// The question picks the call: a conversation compacted by the
		// proxy shows the provider fewer turns than the client made, so
		// their count would repeat itself.
		h := fnv.New32a()
		h.Write([]byte(v.lastUser))
		turn := int(h.Sum32() % 10000)
		n := 1
		if p.opts.ParallelEvery > 0 && v.parallel && turn%p.opts.ParallelEvery == 0 {
			n = 2
		}
		var calls []call
		for i := 0; i < n; i++ {
			t := v.tools[(turn+i)%len(v.tools)]
			calls = append(calls, call{id: newID(), name: t.name, args: arguments(t.schema, turn, i, v.lastUser)})
		}
		return reply{calls: calls}
	}
	if v.lastUser != "" {
		return reply{text: "echo: " + v.lastUser}
	}
	return reply{text: "hello"}
}

// arguments fills a tool's parameters from its JSON schema: a string
// property named like a path or file gets a file path, one named like an
// id a record id, any other string the user's text; numbers get the
// question's number, booleans true, enums their first value. Without properties in the
// schema the call is {"query": text}.
func arguments(schema json.RawMessage, turn, call int, text string) string {
	var s struct {
		Properties map[string]struct {
			Type any   `json:"type"`
			Enum []any `json:"enum"`
		} `json:"properties"`
	}
	json.Unmarshal(schema, &s)
	if len(s.Properties) == 0 {
		b, _ := json.Marshal(map[string]string{"query": text})
		return string(b)
	}
	names := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		names = append(names, k)
	}
	sort.Strings(names)
	args := map[string]any{}
	for _, k := range names {
		prop := s.Properties[k]
		typ, _ := prop.Type.(string)
		if list, ok := prop.Type.([]any); ok && len(list) > 0 {
			typ, _ = list[0].(string)
		}
		lk := strings.ToLower(k)
		switch {
		case len(prop.Enum) > 0:
			args[k] = prop.Enum[0]
		case typ == "integer" || typ == "number":
			args[k] = turn
		case typ == "boolean":
			args[k] = true
		case typ == "array":
			args[k] = []string{}
		case typ == "object":
			args[k] = map[string]any{}
		case strings.Contains(lk, "path") || strings.Contains(lk, "file"):
			args[k] = fmt.Sprintf("src/module_%02d/handler_%d.go", turn%17, turn*10+call)
		case lk == "id" || strings.HasSuffix(lk, "_id") || strings.HasSuffix(lk, "id") && len(lk) > 2:
			args[k] = fmt.Sprintf("REC-%04d-%d", turn*7+3, call)
		default:
			args[k] = text
		}
	}
	b, _ := json.Marshal(args)
	return string(b)
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// words splits text into the pieces a stream sends (each word with the
// space before it).
func words(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// halves splits a tool call's arguments in two stream deltas.
func halves(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	return []string{s[:len(s)/2], s[len(s)/2:]}
}

// promptTokens counts a request's prompt: its texts with compactd's
// tokenizer, four tokens a message, three to prime the reply, and a
// quarter of the tools' JSON bytes.
func (p *Provider) promptTokens(v *view, toolsJSON int) int {
	n := 3 + 4*v.messages + toolsJSON/4
	for _, t := range v.texts {
		n += p.tok.Count(t)
	}
	return n
}

func (p *Provider) completionTokens(r reply) int {
	n := p.tok.Count(r.text) + 1
	for _, c := range r.calls {
		n += p.tok.Count(c.args) + 4
	}
	return n
}
