# compactd's front door. `make run` starts the daemon with the built-in
# policies; `make test` runs every test (`make test-unit` the ones that need
# no daemon, browser or node); `make check` is the presubmit;
# `make install` puts compactd and the built-in policies where
# `compactd serve` finds them.

GO       ?= go
BIN      := bin
PLUGINS  := $(BIN)/plugins
# staticcheck release 2025.1.1 (the module proxy resolves only its semver tag)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.6.1

# The commit `compactd --version` reports when the go command stamps none
# (GOFLAGS=-buildvcs=false); empty outside a git checkout.
COMMIT   := $(shell git rev-parse HEAD 2>/dev/null)
DIRTY    := $(shell git status --porcelain 2>/dev/null | grep -q . && echo true)
LDFLAGS  := -X github.com/compactd/compactd/internal/cli.commit=$(COMMIT) -X github.com/compactd/compactd/internal/cli.dirty=$(DIRTY)

.PHONY: all build plugins run test test-short test-unit bench check deps install uninstall clean

all: build plugins

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/compactd ./cmd/compactd

plugins: deps
	$(GO) run ./internal/wasmbuild/buildplugins -out $(PLUGINS)

# run starts the daemon in the foreground with the built-in policies; its
# socket, state and config file live under bin/ (docs/operations.md).
# Ctrl-C stops it. readme_test.go starts a daemon with this target for the
# examples of README.md and docs/ (BIN and SOCKET pointed elsewhere).
SOCKET   ?= $(CURDIR)/$(BIN)/compactd.sock
run: build plugins
	$(BIN)/compactd serve --plugins $(PLUGINS) --socket $(SOCKET) --state-dir $(BIN)/state --config $(BIN)/compactd.yaml

# test runs every test with the race detector (docs/benchmarks.md, "Test
# suite", has its time per package; scripts/test-busy.sh runs it beside
# busy loops). test-short runs the quick variant of each test, without
# -race. test-unit leaves out the tests that start a daemon, a browser or
# node (they skip themselves when COMPACTD_TEST=unit, and the test files
# whose tests all do are built out by -tags unit, see internal/testenv):
# about a minute. TESTFLAGS go to go test (-json, -v,
# -run ...). TESTTIMEOUT is each package's hang guard, not its budget (5
# minutes, quiet): under -race on a 2-core machine other work kept at a
# load average of 20-30, the host package's tests alone took about go
# test's default of 10 minutes.
TESTFLAGS ?=
TESTTIMEOUT ?= 30m
# TESTLINK links the test binaries without DWARF (-w): linking some fifty
# of them is a fixed cost of every run, and -w takes a quarter off it.
# Stack traces, panics and race reports do not read DWARF.
TESTLINK := -ldflags=-w
# test first compiles the plugins the tests load most into the tests'
# shared compilation cache without the race detector, in a fraction of
# the time the race-built test binaries took to do it one package at a
# time (internal/wasmbuild/warmtestcache). TESTLDFLAGS is
# wasmbuild.TestLDFlags: it makes the program fill the cache the test
# binaries read. A failure there only costs time, and the tests that load
# the same plugins say what is wrong, so it does not stop the run.
TESTLDFLAGS := -X github.com/tetratelabs/wazero/internal/version.version=dev
test: deps
	-$(GO) run -ldflags "$(TESTLDFLAGS)" ./internal/wasmbuild/warmtestcache
	$(GO) test -race -count=1 -timeout $(TESTTIMEOUT) $(TESTLINK) $(TESTFLAGS) ./...

test-short: deps
	$(GO) test -short -count=1 $(TESTLINK) $(TESTFLAGS) ./...

test-unit: deps
	COMPACTD_TEST=unit $(GO) test -short -tags unit -count=1 $(TESTLINK) $(TESTFLAGS) ./...

# bench runs every benchmark and `compactd eval` on the full data set
# ($COMPACTD_DATA, default ../shared/data) and rewrites docs/benchmarks.md
# (several minutes; BENCHTIME, POLICIES and BENCH_PKGS narrow it, see
# scripts/benchmarks.sh).
bench: deps
	scripts/benchmarks.sh

check:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./abi ./convo ./pdk
	$(GO) run $(STATICCHECK) ./...
	$(GO) mod tidy
	cd examples/embed && $(GO) vet . && $(GO) run $(STATICCHECK) . && $(GO) mod tidy
	git diff --exit-code -- go.mod go.sum examples/embed/go.mod examples/embed/go.sum

# deps installs the Debian packages the plugins and tests need when one is
# missing; FORCE=1 runs the install even when all are present (.ci/run does,
# so every CI run executes it). The package list is in scripts/deps.sh.
deps:
	FORCE=$(FORCE) scripts/deps.sh

# install copies the binary to $(PREFIX)/bin and the built-in policies to
# the plugins directory `compactd serve` reads by default ($COMPACTD_PLUGINS,
# else $XDG_DATA_HOME/compactd/plugins, i.e. ~/.local/share/compactd/plugins),
# so `compactd serve` with no flags serves them. A running daemon picks the
# new plugins up without a restart. DESTDIR is prepended for packaging.
PREFIX      ?= $(HOME)/.local
BINDIR      ?= $(PREFIX)/bin
PLUGINS_DIR ?= $(or $(COMPACTD_PLUGINS),$(or $(XDG_DATA_HOME),$(HOME)/.local/share)/compactd/plugins)
install: build plugins
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(PLUGINS_DIR)"
	install -m 0755 $(BIN)/compactd "$(DESTDIR)$(BINDIR)/compactd"
	install -m 0644 $(PLUGINS)/*.wasm "$(DESTDIR)$(PLUGINS_DIR)/"
	@echo "installed $(DESTDIR)$(BINDIR)/compactd and $$(ls $(PLUGINS)/*.wasm | wc -l) policies in $(DESTDIR)$(PLUGINS_DIR)"
	@case ":$$PATH:" in *":$(BINDIR):"*) ;; *) echo "note: $(BINDIR) is not on your PATH";; esac
	@echo "start it with: compactd serve   (or as a systemd user service: docs/operations.md, \"Install\")"

# uninstall removes what install copied (the built-in plugins by name;
# other plugins in the directory stay).
uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/compactd"
	for d in plugins/*/; do n=$$(basename $$d); [ "$$n" = internal ] || rm -f "$(DESTDIR)$(PLUGINS_DIR)/$$n.wasm"; done

clean:
	rm -rf $(BIN)
