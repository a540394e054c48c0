// Command buildplugins builds every built-in plugin under plugins/ (a
// directory with a main.go is a Go plugin, one with a single .c file a C
// plugin) into a directory of .wasm files. `make plugins` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/compactd/compactd/internal/wasmbuild"
)

func main() {
	out := flag.String("out", "bin/plugins", "output `directory`")
	src := flag.String("src", "plugins", "plugin sources `directory`")
	flag.Parse()
	if err := run(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "buildplugins:", err)
		os.Exit(1)
	}
}

func run(src, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	dirs, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	ctx := context.Background()
	built := 0
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == "internal" || d.Name() == "testdata" {
			continue
		}
		dir := filepath.Join(src, d.Name())
		target := filepath.Join(out, d.Name()+".wasm")
		tmp := target + ".tmp"
		if _, err := os.Stat(filepath.Join(dir, "main.go")); err == nil {
			err = wasmbuild.Go(ctx, dir, tmp)
			if err != nil {
				return err
			}
		} else if cs, _ := filepath.Glob(filepath.Join(dir, "*.c")); len(cs) == 1 {
			if err := wasmbuild.C(ctx, cs[0], tmp, nil); err != nil {
				return err
			}
		} else {
			continue
		}
		// Rename into place: a daemon watching the directory sees one
		// complete file, never a half-written one.
		if err := os.Rename(tmp, target); err != nil {
			return err
		}
		built++
		fmt.Println(strings.TrimPrefix(target, "./"))
	}
	if built == 0 {
		return fmt.Errorf("no plugins under %s", src)
	}
	return nil
}
