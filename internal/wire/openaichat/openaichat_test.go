package openaichat

import (
	"encoding/json"
	"testing"
)

func TestWithoutMember(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"a":1,"usage":null}`, `{"a":1}`},
		{`{"usage":null,"a":1}`, `{"a":1}`},
		{`{ "usage" : {"x":[1,{"usage":2}]} , "a":"usage"}`, `{  "a":"usage"}`},
		{`{"a":1,"usage":{"prompt_tokens":3},"b":[]}`, `{"a":1,"b":[]}`},
		{`{"usage":null}`, `{}`},
		{`{"us\u0061ge":null,"a":1}`, `{"a":1}`},
	} {
		got, ok := WithoutMember([]byte(tc.in), "usage")
		if !ok || string(got) != tc.want || !json.Valid(got) {
			t.Errorf("WithoutMember(%s) = %s, %v; want %s", tc.in, got, ok, tc.want)
		}
	}
	for _, in := range []string{`{"a":1}`, `[1]`, `{"a":`, `null`} {
		if got, ok := WithoutMember([]byte(in), "usage"); ok {
			t.Errorf("WithoutMember(%s) = %s, want no member", in, got)
		}
	}
}
