# compactd's front door. `make run` starts the daemon with the built-in
# policies; `make test` runs every test; `make check` is the presubmit.

GO       ?= go
BIN      := bin
PLUGINS  := $(BIN)/plugins
# staticcheck release 2025.1.1 (the module proxy resolves only its semver tag)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.6.1

.PHONY: all build plugins run test test-short bench check deps clean

all: build plugins

build:
	$(GO) build -o $(BIN)/compactd ./cmd/compactd

plugins: deps
	$(GO) run ./internal/wasmbuild/buildplugins -out $(PLUGINS)

# run starts the daemon in the foreground with the built-in policies; its
# socket, state and config file live under bin/ (README.md, "Run the
# daemon"). Ctrl-C stops it.
SOCKET   ?= $(CURDIR)/$(BIN)/compactd.sock
run: build plugins
	$(BIN)/compactd serve --plugins $(PLUGINS) --socket $(SOCKET) --state-dir $(BIN)/state --config $(BIN)/compactd.yaml

test: deps
	$(GO) test -race -count=1 ./...

test-short: deps
	$(GO) test -short -count=1 ./...

# bench runs every benchmark and `compactd eval` on ../shared/data and
# rewrites docs/benchmarks.md (several minutes; BENCHTIME, POLICIES and
# BENCH_PKGS narrow it, see scripts/benchmarks.sh).
bench: deps
	scripts/benchmarks.sh

check:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./abi ./convo ./pdk
	$(GO) run $(STATICCHECK) ./...
	$(GO) mod tidy
	git diff --exit-code -- go.mod go.sum

# deps installs the Debian packages the plugins and tests need when one is
# missing; FORCE=1 runs the install even when all are present (.ci/run does,
# so every CI run executes it). The package list is in scripts/deps.sh.
deps:
	FORCE=$(FORCE) scripts/deps.sh

clean:
	rm -rf $(BIN)
