package policyconfig

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const schema = `{"type":"object","properties":{
  "window_size":{"type":"integer","minimum":1},
  "include_summary_marker":{"type":"boolean"},
  "start_on":{"enum":["","user"]},
  "max_tokens":{"type":["integer","null"],"minimum":0}},
 "additionalProperties":false}`

func TestResolve(t *testing.T) {
	s, err := Compile("sliding", []byte(schema), []byte(`{"window_size":5,"include_summary_marker":true,"start_on":"","max_tokens":null}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		layers  []Layer
		want    string
		wantErr string
	}{
		{name: "defaults", want: `{"include_summary_marker":true,"max_tokens":null,"start_on":"","window_size":5}`},
		{name: "later layer wins", layers: []Layer{{"env", map[string]any{"window_size": 7}}, {"request", map[string]any{"window_size": int64(9)}}},
			want: `{"include_summary_marker":true,"max_tokens":null,"start_on":"","window_size":9}`},
		{name: "unknown key named", layers: []Layer{{"request", map[string]any{"windowsize": 3}}}, wantErr: `request: unknown key "windowsize" for policy sliding (known: include_summary_marker, max_tokens, start_on, window_size)`},
		{name: "wrong type named", layers: []Layer{{"request", map[string]any{"window_size": "abc"}}}, wantErr: "window_size: got string, want integer"},
		{name: "below minimum", layers: []Layer{{"request", map[string]any{"window_size": 0}}}, wantErr: "window_size: minimum"},
		{name: "enum", layers: []Layer{{"request", map[string]any{"start_on": "assistant"}}}, wantErr: "start_on"},
		{name: "fraction for integer", layers: []Layer{{"request", map[string]any{"window_size": 2.5}}}, wantErr: "window_size"},
		// F10: JSON Schema calls 1e100 an integer; no plugin can read it.
		{name: "huge float for integer", layers: []Layer{{"config file", map[string]any{"window_size": 1e100}}},
			wantErr: "config file: policy sliding: window_size: 1e+100 is out of range (want an integer from -9223372036854775808 to 9223372036854775807)"},
		{name: "huge JSON number for integer", layers: []Layer{{"request", map[string]any{"window_size": json.Number("1e100")}}}, wantErr: "window_size: 1e100 is out of range"},
		{name: "over int64", layers: []Layer{{"request", map[string]any{"window_size": json.Number("9223372036854775808")}}}, wantErr: "out of range"},
		{name: "over int64 from YAML", layers: []Layer{{"config file", map[string]any{"window_size": uint64(1 << 63)}}}, wantErr: "out of range"},
		{name: "whole float sent as an integer", layers: []Layer{{"request", map[string]any{"window_size": json.Number("8.0"), "max_tokens": 1e3}}},
			want: `{"include_summary_marker":true,"max_tokens":1000,"start_on":"","window_size":8}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Resolve(tt.layers...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	// The defaults alone are kept once resolved: each answer is the
	// caller's own copy, and layers still apply after them.
	first, err := s.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	clear(first)
	if again, err := s.Resolve(); err != nil || string(again) != tests[0].want {
		t.Fatalf("defaults again: %s, %v; want %s", again, err, tests[0].want)
	}
	if layered, err := s.Resolve(tests[1].layers...); err != nil || string(layered) != tests[1].want {
		t.Fatalf("layers after the defaults: %s, %v; want %s", layered, err, tests[1].want)
	}
}

func TestCompileRejects(t *testing.T) {
	tests := []struct{ name, schema, defaults, wantErr string }{
		{"schema not json", `{`, `{}`, "not JSON"},
		{"schema not object", `[1]`, `{}`, "must be an object"},
		{"defaults violate schema", schema, `{"window_size":0}`, "defaults do not match"},
		{"defaults not object", schema, `[]`, "defaults"},
		{"remote ref refused", `{"$ref":"http://example.com/s.json"}`, `{}`, "config_schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile("p", []byte(tt.schema), []byte(tt.defaults))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestNoSchemaAcceptsAnything(t *testing.T) {
	s, err := Compile("p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Resolve(Layer{"request", map[string]any{"x": 1}})
	if err != nil || string(got) != `{"x":1}` {
		t.Fatalf("got %s, %v", got, err)
	}
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{"5", int64(5)}, {"2.5", 2.5}, {"true", true}, {"null", nil}, {"user", "user"},
		{`"5"`, "5"}, {"5 apples", "5 apples"}, {"", ""},
	}
	for _, tt := range tests {
		if got := ParseValue(tt.in); got != tt.want {
			t.Errorf("ParseValue(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}
