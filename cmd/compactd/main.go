// Command compactd keeps LLM conversations inside their context budget.
// See `compactd help` and docs/cli.md.
package main

import (
	"os"

	"github.com/compactd/compactd/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
