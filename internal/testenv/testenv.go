// Package testenv tells a test what the run it is part of allows.
//
// `make test-unit` runs the suite with COMPACTD_TEST=unit (and -short):
// the tests that start a daemon (in the test process or as `compactd
// serve`), a browser or node skip themselves through Integration, so what
// is left needs none of them and runs in about a minute. `make test` runs
// everything.
package testenv

import (
	"os"
	"testing"
)

// Env is the environment variable that selects the kind of run.
const Env = "COMPACTD_TEST"

// Unit reports whether the run is a unit run (COMPACTD_TEST=unit).
func Unit() bool { return os.Getenv(Env) == "unit" }

// Integration skips tb in a unit run. needs says what the test needs that
// a unit run does not have ("a daemon", "chromium", "node").
func Integration(tb testing.TB, needs string) {
	tb.Helper()
	if Unit() {
		tb.Skipf("needs %s: skipped in a unit run (%s=unit)", needs, Env)
	}
}
