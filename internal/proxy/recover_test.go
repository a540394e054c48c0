package proxy

import (
	"strconv"
	"testing"
)

func TestContextOverflow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		status int
		body   string
		ok     bool
		limit  int
	}{
		{"openai chat", 400, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130123 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, true, 128000},
		{"openai responses", 400, `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`, true, 0},
		{"anthropic", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, true, 200000},
		{"anthropic max_tokens", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"input length and ` + "`max_tokens`" + ` exceed context limit: 199759 + 8192 > 200000, decrease input length or ` + "`max_tokens`" + ` and try again"}}`, true, 200000},
		{"413 anthropic", 413, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`, true, 0},
		{"413 not json", 413, `<html>too large</html>`, true, 0},
		{"other 400", 400, `{"error":{"message":"Invalid value for 'role'","type":"invalid_request_error","param":"messages","code":null}}`, false, 0},
		{"anthropic other 400", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}`, false, 0},
		{"not json", 400, `bad request`, false, 0},
		{"429", 429, `{"error":{"code":"context_length_exceeded"}}`, false, 0},
	} {
		ok, limit := contextOverflow(c.status, []byte(c.body))
		if ok != c.ok || limit != c.limit {
			t.Errorf("%s: got %v %d, want %v %d", c.name, ok, limit, c.ok, c.limit)
		}
	}
}

func TestLearnedWindow(t *testing.T) {
	t.Parallel()
	p := &Proxy{}
	if w := p.windowFor("m", 128000); w != 128000 {
		t.Fatalf("nothing learned: %d", w)
	}
	p.learn("m", 100000)
	if w := p.windowFor("m", 128000); w != 100000 {
		t.Fatalf("learned below the table: %d", w)
	}
	if w := p.windowFor("m", 0); w != 100000 {
		t.Fatalf("learned, table unknown: %d", w)
	}
	if w := p.windowFor("m", 50000); w != 50000 {
		t.Fatalf("a smaller configured window stays: %d", w)
	}
	for i := range maxLearnedModels + 10 {
		p.learn("model-"+strconv.Itoa(i), 1000)
	}
	if n := len(p.rec.learned); n != maxLearnedModels {
		t.Fatalf("learned %d models, bound %d", n, maxLearnedModels)
	}
}
