package proxy

import (
	"strings"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/internal/wire/anthropic"
	"github.com/compactd/compactd/internal/wire/openaichat"
	"github.com/compactd/compactd/internal/wire/responses"
)

// TestSameLead: a header-less request takes the previous request's
// derived id only when the elements and system prompt that decided it are
// the same bytes, and then that id is the one its own leading part
// derives. Each case is a previous request (remembered as filterRequest
// remembers it) and the next one.
func TestSameLead(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("You are a careful agent. ", 60)
	type format struct {
		prov wire.Format
		body func(system string, msgs ...string) string
		user func(text string) string
		asst func(text string) string
	}
	formats := []format{
		{openaichat.Format{},
			func(system string, msgs ...string) string {
				return `{"model":"gpt-4o","messages":[{"role":"system","content":"` + system + `"},` + strings.Join(msgs, ",") + `]}`
			},
			func(s string) string { return `{"role":"user","content":"` + s + `"}` },
			func(s string) string { return `{"role":"assistant","content":"` + s + `"}` }},
		{anthropic.Format{},
			func(system string, msgs ...string) string {
				return `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[` + strings.Join(msgs, ",") + `],"system":"` + system + `"}`
			},
			func(s string) string { return `{"role":"user","content":"` + s + `"}` },
			func(s string) string { return `{"role":"assistant","content":"` + s + `"}` }},
		{responses.Format{},
			func(system string, msgs ...string) string {
				return `{"model":"gpt-5","instructions":"` + system + `","input":[` + strings.Join(msgs, ",") + `]}`
			},
			func(s string) string {
				return `{"type":"message","role":"user","content":[{"type":"input_text","text":"` + s + `"}]}`
			},
			func(s string) string {
				return `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` + s + `"}]}`
			}},
	}
	for _, f := range formats {
		t.Run(f.prov.Name(), func(t *testing.T) {
			t.Parallel()
			u, a := f.user, f.asst
			cases := []struct {
				name       string
				prev, next string
				header     bool // prev's id was named by a header
				noBody     bool // prev's body was not held
				want       bool
			}{
				{"turns added", f.body(long, u("fix the parser"), a("on it")), f.body(long, u("fix the parser"), a("on it"), u("go on"), a("done")), false, false, true},
				{"the same request", f.body(long, u("fix the parser")), f.body(long, u("fix the parser")), false, false, true},
				{"the task edited", f.body(long, u("fix the parser"), a("on it")), f.body(long, u("fix the printer"), a("on it")), false, false, false},
				{"the system prompt changed", f.body(long, u("fix the parser")), f.body(long+"!", u("fix the parser")), false, false, false},
				{"no user message settled it", f.body(long, a("hello")), f.body(long, a("hello"), u("fix the parser")), false, false, false},
				{"named by a header", f.body(long, u("fix the parser")), f.body(long, u("fix the parser"), a("ok")), true, false, false},
				{"its body dropped", f.body(long, u("fix the parser")), f.body(long, u("fix the parser"), a("ok")), false, true, false},
			}
			for _, c := range cases {
				pr, err := parseRequest([]byte(c.prev), f.prov)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				lead, settled, err := f.prov.Leading(pr.system, pr.messages)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				prev := chat.LastRequest{Format: f.prov.Name(), Body: pr.body, ListStart: pr.msgs.start, Spans: pr.spans,
					DerivedID: compactor.ConversationID(lead), LeadElems: settled, System: pr.systemSpan}
				if c.header {
					prev.DerivedID = ""
				}
				if c.noBody {
					prev.Body, prev.Spans = nil, nil
				}
				next, err := parseRequestAfter([]byte(c.next), f.prov, &prev)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				got := sameLead(next, &prev)
				if got != c.want {
					t.Errorf("%s: sameLead = %v, want %v", c.name, got, c.want)
				}
				own, _, err := f.prov.Leading(next.system, next.messages)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if id := compactor.ConversationID(own); got && id != prev.DerivedID {
					t.Errorf("%s: took id %s, its own leading part derives %s", c.name, prev.DerivedID, id)
				}
			}
		})
	}
}
