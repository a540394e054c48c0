package loadbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// The baselines: what a service costs that does no compaction at all.

// EchoHandler answers every request with its body: the transport's cost
// (HTTP over the Unix socket, reading and writing the bytes).
func EchoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
}

// jsonRequest is the request as a plain Go service would decode it: the
// OpenAI message shape, content a string or an array of parts.
type jsonRequest struct {
	Policy         string         `json:"policy,omitempty"`
	Model          string         `json:"model,omitempty"`
	ConversationID string         `json:"conversation_id,omitempty"`
	Config         map[string]any `json:"config,omitempty"`
	Messages       []jsonMessage  `json:"messages"`
}

type jsonMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	Name       string         `json:"name,omitempty"`
	ToolCalls  []jsonToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type jsonToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// JSONHandler decodes the request with encoding/json and answers
// {"messages": [...]} re-encoded from what it decoded: the least a Go
// service that reads the conversation does.
func JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req jsonRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := json.Marshal(struct {
			Messages []jsonMessage `json:"messages"`
		}{req.Messages})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.Write(out)
	})
}

// Baseline returns the handler of a baseline by name: "echo" or "json".
func Baseline(name string) (http.Handler, error) {
	switch name {
	case "echo":
		return EchoHandler(), nil
	case "json":
		return JSONHandler(), nil
	}
	return nil, fmt.Errorf("loadbench: unknown baseline %q (want echo or json)", name)
}

// ServeBaseline serves a baseline on a Unix socket until ctx ends. The
// command runs it in a child process, so a baseline's costs are measured
// on their own, as compactd's are.
func ServeBaseline(ctx context.Context, name, socket string) error {
	h, err := Baseline(name)
	if err != nil {
		return err
	}
	os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
