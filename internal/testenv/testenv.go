// Package testenv tells a test what the run it is part of allows.
//
// `make test-unit` runs the suite with COMPACTD_TEST=unit (and -short): the
// tests that start a daemon (in the test process or as `compactd serve`),
// a browser, node or the compactd binary skip themselves (Integration), and
// so do the ones that take many seconds by design, such as hostile plugins
// run to their limits (Long). What is left runs in about a minute. `make
// test` runs everything.
//
// `make test-unit` also builds with -tags unit. A test file whose tests
// all skip in a unit run starts with the constraint `//go:build !unit`,
// so that a package made only of such files (clients, kits, the proxy's
// SDK and client tests) has no test binary to link: linking one that
// imports the daemon takes seconds, for tests that would all skip. The
// skips stay, so that COMPACTD_TEST=unit without the tag skips them too.
// TestUnitExcludedFilesOnlySkip holds every such file to this: each of its
// tests skips before it does anything else.
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
