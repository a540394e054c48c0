package usage

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		json    string
		n       int
		set     bool
		refused string
	}{
		{`0`, 0, true, ""},
		{`1234`, 1234, true, ""},
		{`12.0`, 12, true, ""},
		{`1.2e1`, 12, true, ""},
		{`9007199254740992`, Max, true, ""},
		{`null`, 0, false, ""},
		{`-5`, 0, false, "-5"},
		{`-0.5`, 0, false, "-0.5"},
		{`1.5`, 0, false, "1.5"},
		{`9007199254740993`, 0, false, "9007199254740993"},
		{`9223372036854775807`, 0, false, "9223372036854775807"},
		{`18446744073709551616`, 0, false, "18446744073709551616"},
		{`1e300`, 0, false, "1e300"},
		{`"12"`, 0, false, `"12"`},
		{`true`, 0, false, "true"},
		{`{"a":1}`, 0, false, `{"a":1}`},
		{`[1]`, 0, false, "[1]"},
	} {
		var v struct {
			C     Count `json:"c"`
			Other int   `json:"other"`
		}
		if err := json.Unmarshal([]byte(fmt.Sprintf(`{"c":%s,"other":7}`, tc.json)), &v); err != nil {
			t.Errorf("%s: %v", tc.json, err)
			continue
		}
		if v.C.N != tc.n || v.C.Set != tc.set || v.C.Refused != tc.refused || v.Other != 7 {
			t.Errorf("%s: got %+v (other %d), want n=%d set=%v refused=%q", tc.json, v.C, v.Other, tc.n, tc.set, tc.refused)
		}
	}
	var c Count
	json.Unmarshal([]byte(`"`+string(make([]byte, 100))+`"`), &c)
	if len(c.Refused) > 44 {
		t.Errorf("a refused value is kept whole: %d bytes", len(c.Refused))
	}
}

func TestSumAndRefused(t *testing.T) {
	if Sum(Max, Max, Max) != Max || Sum(1, 2, 3) != 6 {
		t.Error("Sum")
	}
	got := Refused(map[string]Count{"b": {Refused: "-1"}, "a": {Refused: "x"}, "c": {N: 3, Set: true}})
	if fmt.Sprint(got) != "[a=x b=-1]" {
		t.Errorf("Refused = %v", got)
	}
}
