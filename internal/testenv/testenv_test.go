package testenv

import (
	"testing"
)

func TestSkipsOnlyInUnitRuns(t *testing.T) {
	for _, tt := range []struct {
		env  string
		skip bool
	}{{"", false}, {"unit", true}, {"all", false}} {
		t.Run("COMPACTD_TEST="+tt.env, func(t *testing.T) {
			t.Setenv(Env, tt.env)
			if Unit() != tt.skip {
				t.Errorf("Unit() = %v", Unit())
			}
			for name, skip := range map[string]func(testing.TB, string){"Integration": Integration, "Long": Long} {
				ran := false
				t.Run(name, func(t *testing.T) {
					skip(t, "a reason")
					ran = true
				})
				if ran == tt.skip {
					t.Errorf("%s: the test ran: %v, want %v", name, ran, !tt.skip)
				}
			}
		})
	}
}
