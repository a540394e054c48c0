package responses

import (
	"bytes"
	"encoding/json"

	"github.com/compactd/compactd/internal/usage"
)

// Usage is a response's token usage. Counts outside usage's rule
// (negative, fractional, over 2^53, not numbers) are unset.
type Usage struct {
	InputTokens        usage.Count `json:"input_tokens"`
	OutputTokens       usage.Count `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens usage.Count `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// Cached returns the prompt tokens read from the provider's cache (0 when
// not reported), at most the input tokens.
func (u *Usage) Cached() int {
	if u.InputTokensDetails == nil {
		return 0
	}
	return min(u.InputTokensDetails.CachedTokens.N, u.InputTokens.N)
}

// Refused names the counts refused (name=value).
func (u *Usage) Refused() []string {
	named := map[string]usage.Count{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens}
	if u.InputTokensDetails != nil {
		named["input_tokens_details.cached_tokens"] = u.InputTokensDetails.CachedTokens
	}
	return usage.Refused(named)
}

// ResponseUsage reads the usage of a response object (a non-streamed
// answer's body, or the "response" of a response.completed event); nil
// when it has none.
func ResponseUsage(body []byte) *Usage {
	var r struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil {
		return nil
	}
	return r.Usage
}

// usageEvents are the events whose response carries the final usage.
var usageEvents = map[string]bool{"response.completed": true, "response.incomplete": true, "response.failed": true}

var usageKey = []byte(`"usage"`)

// EventUsage reads the usage of a streamed event: response.completed (or
// response.incomplete, response.failed) carries the response with its
// usage; other events have none (nil). typ is the event's "event:" line;
// when it is empty the data's "type" decides.
func EventUsage(typ string, data []byte) *Usage {
	if typ != "" && !usageEvents[typ] || !bytes.Contains(data, usageKey) {
		return nil
	}
	var e struct {
		Type     string          `json:"type"`
		Response json.RawMessage `json:"response"`
	}
	if json.Unmarshal(data, &e) != nil || !usageEvents[e.Type] || len(e.Response) == 0 {
		return nil
	}
	return ResponseUsage(e.Response)
}

// ErrorBody renders an error compactd answers itself, in OpenAI's error
// shape ({"error": {message, type: "compactd_error", param, code}}),
// which the SDKs raise as an APIError.
func ErrorBody(code, msg string) []byte {
	var body struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	body.Error.Message, body.Error.Type, body.Error.Code = "compactd: "+msg, "compactd_error", code
	b, _ := json.Marshal(body)
	return b
}

// StreamError renders the event that ends a stream compactd cannot
// complete: the Responses API's "error" event, which the SDKs raise.
func StreamError(code, msg string) []byte {
	var e struct {
		Type           string  `json:"type"`
		Code           string  `json:"code"`
		Message        string  `json:"message"`
		Param          *string `json:"param"`
		SequenceNumber int     `json:"sequence_number"`
	}
	e.Type, e.Code, e.Message = "error", code, "compactd: "+msg
	b, _ := json.Marshal(e)
	out := make([]byte, 0, len(b)+24)
	out = append(append(append(out, "event: error\ndata: "...), b...), "\n\n"...)
	return out
}
