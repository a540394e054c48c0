package client

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSocketPath: the default socket's rule, which the daemon takes from
// here (internal/paths.Socket) and the Python and TypeScript clients
// follow.
func TestSocketPath(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"home only", map[string]string{"HOME": "/h"}, "/h/.local/state/compactd/compactd.sock"},
		{"state home", map[string]string{"HOME": "/h", "XDG_STATE_HOME": "/st"}, "/st/compactd/compactd.sock"},
		{"runtime dir", map[string]string{"HOME": "/h", "XDG_STATE_HOME": "/st", "XDG_RUNTIME_DIR": "/run/user/7"}, "/run/user/7/compactd.sock"},
		{"COMPACTD_SOCKET wins", map[string]string{"HOME": "/h", "XDG_RUNTIME_DIR": "/run/user/7", "COMPACTD_SOCKET": "/x.sock"}, "/x.sock"},
		{"no home", map[string]string{}, filepath.Join(os.TempDir(), ".local/state/compactd/compactd.sock")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SocketPath(func(k string) string { return tt.env[k] }); got != tt.want {
				t.Errorf("SocketPath = %s, want %s", got, tt.want)
			}
		})
	}
	t.Run("DefaultSocketPath reads the process's environment", func(t *testing.T) {
		t.Setenv("COMPACTD_SOCKET", "/env.sock")
		if got := DefaultSocketPath(); got != "/env.sock" {
			t.Errorf("DefaultSocketPath = %s, want /env.sock", got)
		}
	})
}

func TestEncodeKeepsMessageBytes(t *testing.T) {
	msgs := []json.RawMessage{
		json.RawMessage(`{ "role":"user", "content":"a <b> & c" }`),
		json.RawMessage("{\"role\":\"assistant\",\n \"content\":\"ok\"}"),
	}
	tests := []struct {
		name string
		req  CompactRequest
		want string
	}{
		{"only messages", CompactRequest{Messages: msgs},
			`{"messages":[{ "role":"user", "content":"a <b> & c" },{"role":"assistant",` + "\n" + ` "content":"ok"}]}`},
		{"with fields", CompactRequest{Policy: "p", Config: map[string]any{"n": 1}, Messages: msgs[:1]},
			`{"policy":"p","config":{"n":1},"messages":[{ "role":"user", "content":"a <b> & c" }]}`},
		{"no messages", CompactRequest{Policy: "p"}, `{"policy":"p","messages":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.req.encode()
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
			var back CompactRequest
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := (&CompactRequest{Messages: []json.RawMessage{json.RawMessage(`{"a":`)}}).encode(); err == nil || !strings.Contains(err.Error(), "message 0") {
		t.Errorf("invalid message accepted: %v", err)
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{StatusCode: 404, Code: "unknown_policy", Message: `unknown policy "x"`}
	if e.Error() != `compactd: unknown_policy (HTTP 404): unknown policy "x"` {
		t.Error(e.Error())
	}
	if IsCode(nil, "x") || !IsCode(e, "unknown_policy") {
		t.Error("IsCode")
	}
}
