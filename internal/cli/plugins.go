package cli

import (
	"context"
	"fmt"
	"path/filepath"
)

const pluginsAbout = `
Acts on the running daemon's plugin files.

  retry NAME   loads the plugin file of NAME (a policy, or a file of the
               plugins directory, NAME.wasm) again now, lifting what keeps
               it from loading: its quarantine (the daemon died while
               loading or compiling it) or the failure of its bytes the
               daemon remembers (failed loads are not tried again until the
               file's bytes change). It waits for the load and says how it
               went (POST /v1/policies/NAME/retry). Exit 5 when the file
               still does not load.`

// runPlugins is `compactd plugins SUBCOMMAND`.
func runPlugins(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet("plugins", "retry NAME [--socket PATH] [--json]", pluginsAbout)
	var daemon daemonFlags
	daemon.register(fs, env, false)
	asJSON := fs.Bool("json", false, "print the daemon's JSON answer (the file's policy, as GET /v1/policies/NAME)")
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) == 0:
		return fs.usageError(env, "name a subcommand: retry NAME")
	case pos[0] != "retry":
		return fs.usageError(env, fmt.Sprintf("unknown subcommand %q (plugins has: retry NAME)", pos[0]))
	case len(pos) != 2:
		return fs.usageError(env, "retry takes one NAME: a policy, or a plugin file's name")
	}
	name := pos[1]
	c := daemon.client()
	defer c.Close()
	p, err := c.RetryPolicy(ctx, name)
	if err != nil {
		return daemonFailure(env, daemon.path(), err)
	}
	if *asJSON {
		if code := printJSON(env, p); code != ExitOK {
			return code
		}
	}
	file := filepath.Base(p.File)
	switch {
	case p.Serving && p.Error == nil:
		if !*asJSON {
			fmt.Fprintf(env.Stdout, "%s serves %s %s (%s)\n", file, p.Name, p.Version, p.Tier)
		}
		return ExitOK
	case p.Error != nil:
		return env.errorf(ExitPolicy, "%s still does not load: %s", file, p.Error.Message)
	}
	return env.errorf(ExitPolicy, "%s does not serve yet (the load goes on; 'compactd policies --socket %s' shows it)", file, daemon.path())
}
