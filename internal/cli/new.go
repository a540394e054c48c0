package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/compactd/compactd/internal/scaffold"
)

// runNew is `compactd new LANG NAME [DIR]`: it writes a policy project
// that builds, tests and installs with make.
func runNew(_ context.Context, env *Env, args []string) int {
	fs := newFlagSet("new", "LANG NAME [DIR]", fmt.Sprintf(`
Writes a compactd policy project named NAME in DIR (default ./NAME): the
example policy (keep the task and the last units, mask older tool outputs
to their first line), its unit tests, the language's kit and a Makefile:

  make          builds NAME.wasm
  make test     runs the unit tests
  make install  copies NAME.wasm into the plugins directory
                ($COMPACTD_PLUGINS, else ~/.local/share/compactd/plugins)

LANG is one of: %s.`, strings.Join(scaffold.Languages(), ", ")))
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	if len(pos) < 2 || len(pos) > 3 {
		return fs.usageError(env, "want LANG NAME [DIR]")
	}
	lang, name := pos[0], pos[1]
	dir := name
	if len(pos) == 3 {
		dir = pos[2]
	}
	files, err := scaffold.Write(lang, name, dir)
	if err != nil {
		if errors.Is(err, scaffold.ErrLanguage) || errors.Is(err, scaffold.ErrName) || errors.Is(err, scaffold.ErrExists) {
			return env.fail(ExitUsage, err)
		}
		return env.fail(ExitFailure, err)
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
