package client

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/config"
)

func TestDefaultSocketPathMatchesDaemon(t *testing.T) {
	for _, env := range []map[string]string{
		{"HOME": "/h"},
		{"HOME": "/h", "XDG_STATE_HOME": "/st"},
		{"HOME": "/h", "XDG_RUNTIME_DIR": "/run/user/7"},
		{"HOME": "/h", "XDG_RUNTIME_DIR": "/run/user/7", "COMPACTD_SOCKET": "/x.sock"},
	} {
		for _, k := range []string{"HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "COMPACTD_SOCKET"} {
			t.Setenv(k, env[k])
		}
		if got, want := DefaultSocketPath(), config.DefaultSocketPath(func(k string) string { return env[k] }); got != want {
			t.Errorf("env %v: client %s, daemon %s", env, got, want)
		}
	}
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
