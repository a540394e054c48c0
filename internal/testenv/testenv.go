// Package testenv tells a test what the run it is part of allows.
//
// `make test-unit` runs the suite with COMPACTD_TEST=unit (and -short): the
// tests that start a daemon (in the test process or as `compactd serve`),
// a browser, node or the compactd binary skip themselves (Integration), and
// so do the ones that take many seconds by design, such as hostile plugins
// run to their limits (Long). What is left runs in about a minute. `make
// test` runs everything.
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
// a unit run does not start ("a daemon", "chromium", "node").
func Integration(tb testing.TB, needs string) {
	tb.Helper()
	if Unit() {
		tb.Skipf("needs %s: skipped in a unit run (%s=unit)", needs, Env)
	}
}

// Long skips tb in a unit run: the test takes many seconds by design.
// why says what takes them ("hostile plugins run to their limits").
func Long(tb testing.TB, why string) {
	tb.Helper()
	if Unit() {
		tb.Skipf("%s: skipped in a unit run (%s=unit)", why, Env)
	}
}
