package abi

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestVersionJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    VersionString
		wantErr bool
	}{
		{`"1.0"`, VersionString{1, 0}, false},
		{`"1.3"`, VersionString{1, 3}, false},
		{`1`, VersionString{1, 0}, false},
		{`"2"`, VersionString{2, 0}, false},
		{`"one"`, VersionString{}, true},
		{`"1.x"`, VersionString{}, true},
		{`"-1.0"`, VersionString{}, true},
	}
	for _, tt := range tests {
		var v VersionString
		err := json.Unmarshal([]byte(tt.in), &v)
		if (err != nil) != tt.wantErr || (!tt.wantErr && v != tt.want) {
			t.Errorf("%s: got %v, %v", tt.in, v, err)
		}
	}
	if b, _ := json.Marshal(Version); string(b) != `"`+strconv.Itoa(Major)+`.`+strconv.Itoa(Minor)+`"` {
		t.Errorf("Version marshals to %s", b)
	}
	if !Compatible(VersionString{1, 0}, VersionString{1, 7}) || Compatible(VersionString{1, 0}, VersionString{2, 0}) {
		t.Error("Compatible must compare majors only")
	}
}

func TestContent(t *testing.T) {
	tests := []struct {
		name, json, text string
		null, str        bool
	}{
		{"string", `"hi \u003c there"`, "hi < there", false, true},
		{"null", `null`, "", true, false},
		{"parts", `[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]`, "a\nb", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Message
			if err := json.Unmarshal([]byte(`{"role":"user","content":`+tt.json+`}`), &m); err != nil {
				t.Fatal(err)
			}
			if m.Text() != tt.text || m.Content.IsNull() != tt.null || m.Content.IsString() != tt.str {
				t.Fatalf("text=%q null=%v string=%v", m.Text(), m.Content.IsNull(), m.Content.IsString())
			}
			b, _ := json.Marshal(m.Content)
			if string(b) != tt.json {
				t.Fatalf("content re-encodes as %s, want the original %s", b, tt.json)
			}
		})
	}
	var m Message
	if err := json.Unmarshal([]byte(`{"role":"user","content":{"x":1}}`), &m); err == nil || !strings.Contains(err.Error(), "an object") {
		t.Fatalf("object content: err = %v", err)
	}
	var absent Message
	_ = json.Unmarshal([]byte(`{"role":"assistant"}`), &absent)
	if b, _ := json.Marshal(absent); !strings.Contains(string(b), `"content":null`) {
		t.Fatalf("absent content marshals as %s", b)
	}
}

func TestItemJSON(t *testing.T) {
	tests := []struct {
		in      string
		ref     int
		isRef   bool
		wantErr string
	}{
		{`{"ref":3}`, 3, true, ""},
		{`{"role":"user","content":"x"}`, 0, false, ""},
		{`{"ref":1,"role":"user"}`, 0, false, `both "ref" and "role"`},
		{`{"content":"x"}`, 0, false, `neither "ref" nor "role"`},
		{`{"ref":"1"}`, 0, false, "cannot unmarshal"},
	}
	for _, tt := range tests {
		var it Item
		err := json.Unmarshal([]byte(tt.in), &it)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || it.IsRef() != tt.isRef || (tt.isRef && it.Ref != tt.ref) {
			t.Errorf("%s: got %+v, %v", tt.in, it, err)
		}
		b, _ := json.Marshal(it)
		var back Item
		if err := json.Unmarshal(b, &back); err != nil || back.IsRef() != it.IsRef() {
			t.Errorf("%s: round trip %s: %v", tt.in, b, err)
		}
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"sliding": true, "llm-v2": true, "a_b9": true, "": false, "9lives": false,
		"Sliding": false, "a b": false, strings.Repeat("a", 65): false, strings.Repeat("a", 64): true,
	} {
		if ValidName(name) != want {
			t.Errorf("ValidName(%q) = %v", name, !want)
		}
	}
}

func TestParseError(t *testing.T) {
	if e := ParseError([]byte(`{"code":"invalid_config","message":"m"}`)); e.Code != CodeInvalidConfig || e.Message != "m" {
		t.Errorf("json body: %+v", e)
	}
	if e := ParseError([]byte("  boom \n")); e.Code != CodeInternal || e.Message != "boom" {
		t.Errorf("text body: %+v", e)
	}
}

func FuzzItem(f *testing.F) {
	f.Add([]byte(`{"ref":3}`))
	f.Add([]byte(`{"role":"tool","tool_call_id":"x","content":[{"type":"text","text":"a"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var it Item
		if json.Unmarshal(b, &it) != nil {
			return
		}
		out, err := json.Marshal(it)
		if err != nil {
			t.Fatalf("decoded item does not encode: %v", err)
		}
		var back Item
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
	})
}

func TestDecodeConfigCache(t *testing.T) {
	type cfg struct {
		N    int    `json:"n"`
		Mode string `json:"mode"`
		Keep bool   `json:"keep"`
	}
	cache := NewConfigCache(2)
	decode := func(config string, start cfg) (cfg, error) {
		req := &CompactRequest{Config: json.RawMessage(config)}
		req.UseConfigCache(cache)
		c := start
		err := req.DecodeConfig(&c)
		return c, err
	}
	defaults := cfg{N: 5, Mode: "a", Keep: true}
	for i := 0; i < 3; i++ { // decoded, then served from the cache
		got, err := decode(`{"n":7}`, defaults)
		if err != nil || got != (cfg{N: 7, Mode: "a", Keep: true}) {
			t.Fatalf("round %d: %+v, %v", i, got, err)
		}
	}
	if len(cache.entries) != 1 {
		t.Fatalf("cache holds %d entries", len(cache.entries))
	}
	// Another starting value is another entry.
	if got, _ := decode(`{"n":7}`, cfg{Mode: "b"}); got != (cfg{N: 7, Mode: "b"}) {
		t.Fatalf("other start: %+v", got)
	}
	// Errors are not cached, and the cache stays bounded.
	if _, err := decode(`{"x":1}`, defaults); err == nil {
		t.Fatal("unknown key accepted")
	}
	decode(`{"n":8}`, defaults)
	if len(cache.entries) != 2 {
		t.Fatalf("cache holds %d entries, max 2", len(cache.entries))
	}
	// Types with references are never cached.
	type withSlice struct {
		L []int `json:"l"`
	}
	req := &CompactRequest{Config: json.RawMessage(`{"l":[1]}`)}
	req.UseConfigCache(cache)
	var ws withSlice
	if err := req.DecodeConfig(&ws); err != nil || len(ws.L) != 1 || len(cache.entries) != 2 {
		t.Fatalf("slice config: %+v %v (%d entries)", ws, err, len(cache.entries))
	}
}

func TestContentStringJSON(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`"a\nb"`)
	tests := []struct {
		name string
		c    Content
		want string
		ok   bool
	}{
		{"a string content with its JSON", StringContent(raw, "a\nb"), `"a\nb"`, true},
		{"a text alone", TextContent("a"), "", false},
		{"raw parts", RawContent(json.RawMessage(`[{"type":"text","text":"x"}]`)), "", false},
		{"null", Content{}, "", false},
	}
	for _, tt := range tests {
		got, ok := tt.c.StringJSON()
		if ok != tt.ok || string(got) != tt.want {
			t.Errorf("%s: StringJSON() = %s, %v; want %s, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
