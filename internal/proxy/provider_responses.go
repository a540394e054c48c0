package proxy

import (
	"encoding/json"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/wire/responses"
)

// --- OpenAI Responses ---

// responsesAPI is the OpenAI Responses API (POST /v1/responses): its
// conversation is "instructions" and the "input" items
// (internal/wire/responses converts them), its usage comes in the
// response object, streamed in response.completed. Its upstream is
// OpenAI's.
type responsesAPI struct{}

func (responsesAPI) name() string                    { return OpenAI }
func (responsesAPI) format() string                  { return Responses }
func (responsesAPI) fields() (string, string)        { return "input", "instructions" }
func (responsesAPI) upstream(p *config.Proxy) string { return p.OpenAI.Upstream }

// target maps /v1/responses to {base}/responses, as for Chat Completions.
func (responsesAPI) target(base, path string) string { return base + strings.TrimPrefix(path, "/v1") }

// uncompactable: a request that continues a stored response holds its
// history on the provider's side, where compactd cannot see it.
func (responsesAPI) uncompactable(r *request) string {
	if r.previousResponseID != "" {
		return "previous_response_id: the conversation's history is stored by the provider, where compactd cannot see or compact it (send the whole input with store: false to have it compacted)"
	}
	return ""
}

func (responsesAPI) items(r *request) ([]json.RawMessage, bool) {
	if len(r.system) == 0 {
		return r.messages, false
	}
	items := make([]json.RawMessage, 0, len(r.messages)+1)
	return append(append(items, r.system), r.messages...), true
}

func (responsesAPI) chatItem(raw json.RawMessage, system bool) ([]abi.Message, error) {
	switch {
	case system:
		return responses.InstructionsMessage(raw)
	case len(raw) > 0 && raw[0] == '"': // a string input
		return []abi.Message{{Role: abi.RoleUser, Content: abi.RawContent(raw)}}, nil
	}
	return responses.ItemMessages(raw)
}

// input returns the request's "input" value.
func input(r *request) json.RawMessage { return r.body[r.msgs.start:r.msgs.end] }

func (responsesAPI) leading(r *request) ([]abi.Message, error) {
	return responses.Leading(r.system, input(r))
}

func (responsesAPI) conversation(r *request) (*chat.Conversation, func(*compactor.Response) ([]byte, error), error) {
	c, err := responses.Convert(r.system, input(r))
	if err != nil {
		return nil, nil, err
	}
	return c.Chat, func(resp *compactor.Response) ([]byte, error) {
		items, err := c.Back(resp.Conversation, resp.Origin)
		if err != nil {
			return nil, err
		}
		return arrayJSON(items), nil
	}, nil
}

func responsesUsage(u *responses.Usage) (store.Usage, bool, []string) {
	if u == nil {
		return store.Usage{}, false, nil
	}
	return store.Usage{InputTokens: u.InputTokens.N, OutputTokens: u.OutputTokens.N, CacheReadTokens: u.Cached()},
		u.InputTokens.Set, u.Refused()
}

func (responsesAPI) usage(body []byte) (store.Usage, bool, []string) {
	return responsesUsage(responses.ResponseUsage(body))
}

func (responsesAPI) newStream(bool) streamParser { return &responsesStream{} }

// responsesStream reads the response.* events; the usage is in
// response.completed's response (or response.incomplete's, or
// response.failed's).
type responsesStream struct {
	u       store.Usage
	ok      bool
	refused []string
}

func (s *responsesStream) event(typ string, data []byte) ([]byte, bool) {
	u, ok, refused := responsesUsage(responses.EventUsage(typ, data))
	if ok {
		s.u, s.ok = u, true
	}
	s.refused = noteRefused(s.refused, refused)
	return nil, false
}

func (s *responsesStream) usage() (store.Usage, bool, []string) { return s.u, s.ok, s.refused }

func (responsesAPI) errorBody(_ int, code, msg string) []byte {
	return responses.ErrorBody(code, msg)
}

func (responsesAPI) streamError(_ int, code, msg string) []byte {
	return responses.StreamError(code, msg)
}
