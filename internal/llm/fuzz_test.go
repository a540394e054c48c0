package llm

import (
	"net/http"
	"testing"
	"time"

	tokenusage "github.com/compactd/compactd/internal/usage"
)

// FuzzParse feeds provider bodies to both parsers: they must never panic,
// and a success must carry text.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`))
	f.Add([]byte(`{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":1,"output_tokens":2}}`))
	f.Add([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"x"}}`))
	f.Add([]byte(`{"error":{"message":"x","code":429}}`))
	f.Add([]byte(`{"choices":[{"message":{"content":null}}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range []provider{openAI{}, anthropic{}} {
			text, _, u, err := p.parse(body)
			if err == nil && text == "" {
				t.Fatalf("%s: success without text for %q", p.kind(), body)
			}
			if u != nil && (u.InputTokens < 0 || u.InputTokens > tokenusage.Max || u.OutputTokens < 0 || u.OutputTokens > tokenusage.Max) {
				t.Fatalf("%s: usage %+v outside 0 to 2^53 for %q", p.kind(), u, body)
			}
			if err != nil && err.Kind == nil {
				t.Fatalf("%s: error without a kind", p.kind())
			}
			p.parseError(body)
		}
	})
}

// FuzzRetryAfter: any header value gives a wait in [0, maxRetryAfter].
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "0.5", "Wed, 21 Oct 2015 07:28:00 GMT", "-1", "1e300", "NaN", ""} {
		f.Add(s, "")
	}
	f.Add("", "250")
	now := time.Date(2015, 10, 21, 7, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ra, ms string) {
		h := http.Header{}
		h.Set("Retry-After", ra)
		h.Set("retry-after-ms", ms)
		if d := retryAfter(h, now); d < 0 || d > maxRetryAfter {
			t.Fatalf("retryAfter(%q, %q) = %v", ra, ms, d)
		}
	})
}
