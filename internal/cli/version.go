package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/compactd/compactd/abi"
)

// Version is compactd's release version.
const Version = "0.1.0"

// commit and dirty describe the source for builds the go command did not
// stamp with VCS information (GOFLAGS=-buildvcs=false, or a source archive
// without .git). The Makefile sets them from git; packagers can too:
//
//	go build -ldflags "-X github.com/compactd/compactd/internal/cli.commit=REV" ./cmd/compactd
//
// dirty is "true" for a tree with uncommitted changes.
var commit, dirty string

// buildInfo describes this binary.
type buildInfo struct {
	Version   string // Version
	Commit    string // VCS revision, or "unknown"
	Modified  bool   // built from a tree with uncommitted changes
	GoVersion string // the toolchain that built it
	Platform  string // GOOS/GOARCH
	ABI       string // the plugin ABI version it speaks
}

// readBuildInfo reads the VCS revision the go command stamped into the
// binary (vcs.revision, vcs.modified), else the linker-set commit.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: Version, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, ABI: abi.Version.String()}
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.GoVersion != "" {
			b.GoVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Commit == "" && commit != "" {
		b.Commit, b.Modified = commit, dirty == "true"
	}
	if len(b.Commit) > 12 {
		b.Commit = b.Commit[:12]
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// String is the --version line: "compactd 0.1.0 (commit 0123456789ab,
// go1.26.8 linux/amd64, plugin ABI 1.0)"; "-dirty" marks uncommitted
// changes.
func (b buildInfo) String() string {
	c := b.Commit
	if b.Modified {
		c += "-dirty"
	}
	return fmt.Sprintf("compactd %s (commit %s, %s %s, plugin ABI %s)", b.Version, c, b.GoVersion, b.Platform, b.ABI)
}

func runVersion(_ context.Context, env *Env, args []string) int {
	fs := newFlagSet("version", "", "Prints compactd's version, the commit it was built from, the Go version\nthat built it and the plugin ABI version it speaks.")
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return fs.usageError(env, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	fmt.Fprintln(env.Stdout, readBuildInfo())
	return ExitOK
}
