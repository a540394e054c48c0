package decision

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/compactd/compactd/abi"
)

func TestLoadForced(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		state string
		limit int
		want  []int
	}{
		{"", 10, nil},
		{"null", 10, nil},
		{`[1,2]`, 10, nil},
		{`{"v":2}`, 10, nil},
		{`{"forced":[3,7]}`, 10, []int{3, 7}},
		{`{"forced":[3,7]}`, 5, []int{3}},
		{`{"forced":[7,3,0,-1,7,9]}`, 10, []int{7, 9}},
		{`{"forced":"x"}`, 10, nil},
	} {
		got := LoadForced(json.RawMessage(tt.state), tt.limit)
		if len(got) == 0 && len(tt.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("LoadForced(%s, %d) = %v, want %v", tt.state, tt.limit, got, tt.want)
		}
	}
}

func TestWithForcedKeepsTheRest(t *testing.T) {
	t.Parallel()
	if got := WithForced(json.RawMessage(`{"v":2}`), nil); string(got) != `{"v":2}` {
		t.Fatalf("no forced steps changed the state: %s", got)
	}
	got := WithForced(json.RawMessage(`{"v":2,"runs":[{"a":1}]}`), []int{4, 9})
	var m map[string]json.RawMessage
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatal(err)
	}
	if string(m["v"]) != "2" || string(m["runs"]) != `[{"a":1}]` || string(m["forced"]) != "[4,9]" {
		t.Fatalf("state %s", got)
	}
	if back := LoadForced(got, 10); !reflect.DeepEqual(back, []int{4, 9}) {
		t.Fatalf("read back %v", back)
	}
	if got := WithForced(json.RawMessage(`not json`), []int{2}); string(got) != `{"forced":[2]}` {
		t.Fatalf("a state that is not an object: %s", got)
	}
}

func TestDue(t *testing.T) {
	t.Parallel()
	msgs := []abi.Message{{Tokens: 40}, {Tokens: 60}}
	for _, tt := range []struct {
		d    *abi.Decision
		want bool
	}{
		{nil, false},
		{&abi.Decision{Reason: abi.ReasonUsage}, true},
		{&abi.Decision{Reason: abi.ReasonUsage, TargetTokens: 99}, true},
		{&abi.Decision{Reason: abi.ReasonUsage, TargetTokens: 100}, false},
	} {
		req := &abi.CompactRequest{Messages: msgs, Context: abi.Context{Compact: tt.d}}
		if got := Due(req); got != tt.want {
			t.Errorf("Due with %+v = %v, want %v", tt.d, got, tt.want)
		}
	}
}
