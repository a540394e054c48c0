package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/compactd/compactd/internal/scaffold"
)

// runNew is `compactd new LANG NAME [DIR]`: it writes a policy project
// that builds, tests and installs with make.
func runNew(_ context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("new", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, `usage: compactd new LANG NAME [DIR]

Writes a compactd policy project named NAME in DIR (default ./NAME): the
example policy (keep the task and the last units, mask older tool outputs
to their first line), its unit tests, the language's kit and a Makefile:

  make          builds NAME.wasm
  make test     runs the unit tests
  make install  copies NAME.wasm into the plugins directory
                ($COMPACTD_PLUGINS, else ~/.local/share/compactd/plugins)

LANG is one of: %s.
`, strings.Join(scaffold.Languages(), ", "))
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() < 2 || fs.NArg() > 3 {
		fs.Usage()
		return ExitUsage
	}
	lang, name := fs.Arg(0), fs.Arg(1)
	dir := name
	if fs.NArg() == 3 {
		dir = fs.Arg(2)
	}
	files, err := scaffold.Write(lang, name, dir)
	if err != nil {
		fmt.Fprintln(env.Stderr, "compactd new:", err)
		if errors.Is(err, scaffold.ErrLanguage) || errors.Is(err, scaffold.ErrName) || errors.Is(err, scaffold.ErrExists) {
			return ExitUsage
		}
		return ExitFailure
	}
	fmt.Fprintf(env.Stdout, "wrote %d files for policy %q in %s\n\n", len(files), name, dir)
	fmt.Fprintf(env.Stdout, "  cd %s\n  make          # builds %s.wasm\n  make test     # runs its tests\n  make install  # serves it: the daemon loads it from the plugins directory\n",
		shellQuote(filepath.Clean(dir)), name)
	return ExitOK
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
