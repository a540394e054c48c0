package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/policyconfig"
	"github.com/compactd/compactd/registry"
)

// Error codes: the stable "code" of an error answer. docs/api.md, "Errors", lists them.
const (
	CodeBadRequest          = "bad_request"          // 400: the request is not what the endpoint takes
	CodeInvalidJSON         = "invalid_json"         // 400: the body is not the JSON the endpoint takes
	CodeInvalidConversation = "invalid_conversation" // 400: messages malformed or structurally invalid
	CodeUnsupportedFormat   = "unsupported_format"   // 400: messages in another provider's format (Anthropic)
	CodeInvalidConfig       = "invalid_config"       // 400: a policy config or config update is invalid
	CodeNoPolicy            = "no_policy"            // 400: no policy named and no default configured
	CodeUnauthorized        = "unauthorized"         // 401: TCP listener without the bearer token
	CodeForbidden           = "forbidden"            // 403: a config update the running config forbids (proxy.allow_upstream_change)
	CodeUnknownPolicy       = "unknown_policy"       // 404: no plugin serves that policy
	CodeNotFound            = "not_found"            // 404: no such endpoint or conversation
	CodeMethodNotAllowed    = "method_not_allowed"   // 405
	CodeRequestTooLarge     = "request_too_large"    // 413: body over limits.max_body_bytes
	CodeTooManyMessages     = "too_many_messages"    // 413: more than limits.max_messages
	CodeInternal            = "internal"             // 500
)

// APIError is an error answer: the HTTP status and the body's code and
// message. Handlers return it; writeError renders it as
// {"error":{"code":…,"message":…}}.
type APIError struct {
	Status  int
	Code    string
	Message string
	Err     error // the cause, if any (not shown to the caller)
}

func (e *APIError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// Unwrap returns the cause.
func (e *APIError) Unwrap() error { return e.Err }

func apiErrorf(status int, code, format string, args ...any) *APIError {
	return &APIError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// toAPIError maps an error from the compaction path or the config to its
// answer. Anything unknown is a 500.
func toAPIError(err error) *APIError {
	var ae *APIError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return &APIError{Status: http.StatusRequestEntityTooLarge, Code: CodeRequestTooLarge,
			Message: fmt.Sprintf("request body over %d bytes (limits.max_body_bytes)", mbe.Limit), Err: err}
	case errors.Is(err, chat.ErrUnsupportedFormat):
		return &APIError{Status: http.StatusBadRequest, Code: CodeUnsupportedFormat, Message: err.Error(), Err: err}
	case errors.Is(err, chat.ErrMalformed), errors.Is(err, chat.ErrInvalid):
		return &APIError{Status: http.StatusBadRequest, Code: CodeInvalidConversation, Message: err.Error(), Err: err}
	case errors.Is(err, registry.ErrUnknownPolicy):
		return &APIError{Status: http.StatusNotFound, Code: CodeUnknownPolicy, Message: err.Error(), Err: err}
	case errors.Is(err, config.ErrUpstreamLocked):
		return &APIError{Status: http.StatusForbidden, Code: CodeForbidden, Message: err.Error(), Err: err}
	case errors.Is(err, policyconfig.ErrInvalid), errors.Is(err, config.ErrInvalid):
		return &APIError{Status: http.StatusBadRequest, Code: CodeInvalidConfig, Message: err.Error(), Err: err}
	case errors.Is(err, compactor.ErrBadRequest):
		return &APIError{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: err.Error(), Err: err}
	}
	return &APIError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error(), Err: err}
}

// writeErrorFor writes compactd's error e for the request r: in
// Anthropic's error shape when r carries Anthropic's headers
// (anthropic-version or x-api-key), so an Anthropic SDK pointed at the
// wrong path or listener shows the message, else in compactd's.
func writeErrorFor(w http.ResponseWriter, r *http.Request, e *APIError) {
	if body, ok := proxy.ErrorFor(r, e.Status, e.Code, e.Message); ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(e.Status)
		w.Write(body)
		return
	}
	writeError(w, e)
}

func writeError(w http.ResponseWriter, e *APIError) {
	var body client.ErrorBody
	body.Error.Code, body.Error.Message = e.Code, e.Message
	writeJSON(w, e.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
