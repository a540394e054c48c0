package testenv

import "testing"

func TestIntegrationSkipsOnlyInUnitRuns(t *testing.T) {
	for _, tt := range []struct {
		env  string
		skip bool
	}{{"", false}, {"unit", true}, {"all", false}} {
		t.Run("COMPACTD_TEST="+tt.env, func(t *testing.T) {
			t.Setenv(Env, tt.env)
			if Unit() != tt.skip {
				t.Errorf("Unit() = %v", Unit())
			}
			ran := false
			t.Run("inner", func(t *testing.T) {
				Integration(t, "a daemon")
				ran = true
			})
			if ran == tt.skip {
				t.Errorf("the test ran: %v, want %v", ran, !tt.skip)
			}
		})
	}
}
