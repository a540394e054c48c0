package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/chat"
	"github.com/compactd/compactd/internal/conform"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/tokens"
)

func runPolicies(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("policies", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var common commonFlags
	common.register(fs, env)
	asJSON := fs.Bool("json", false, "print JSON (describe output of each plugin)")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	logger := common.logger(env)
	engine, reg, err := common.openRegistry(env, logger)
	if err != nil {
		fmt.Fprintln(env.Stderr, "compactd policies:", err)
		return ExitFailure
	}
	defer engine.Close(context.WithoutCancel(ctx))
	defer reg.Close(context.WithoutCancel(ctx))
	if err := reg.LoadAll(ctx); err != nil {
		fmt.Fprintln(env.Stderr, "compactd policies:", err)
		return exitFor(err)
	}
	infos := reg.Policies()
	if *asJSON {
		type entry struct {
			File  string           `json:"file"`
			Error string           `json:"error,omitempty"`
			Path  string           `json:"path,omitempty"`
			Desc  *abi.Description `json:"describe,omitempty"`
		}
		var out []entry
		for _, in := range infos {
			e := entry{File: in.File}
			if in.Error != nil {
				e.Error = in.Error.Error()
			}
			if in.Plugin != nil {
				d := in.Plugin.Description()
				e.Desc, e.Path = &d, in.Plugin.Path()
			}
			out = append(out, e)
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(env.Stdout, string(b))
		return ExitOK
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tABI\tFILE\tDESCRIPTION")
	failed := 0
	for _, in := range infos {
		if in.Plugin == nil {
			failed++
			fmt.Fprintf(tw, "-\t-\t-\t%s\tERROR: %v\n", filepath.Base(in.File), in.Error)
			continue
		}
		d := in.Plugin.Description()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Name, d.Version, d.ABI, filepath.Base(in.File), d.Description)
	}
	tw.Flush()
	if len(infos) == 0 {
		fmt.Fprintf(env.Stderr, "no .wasm files in %s\n", common.plugins)
	}
	if failed > 0 {
		return ExitPolicy
	}
	return ExitOK
}

func runConform(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("conform", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var common commonFlags
	common.register(fs, env)
	dataFile := fs.String("data", "", "also run on turn-by-turn prefixes of the conversations in this JSONL `file`")
	maxConvs := fs.Int("max-conversations", 5, "with --data: how many conversations to use")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: compactd conform [flags] PLUGIN.wasm|POLICY\n\nChecks a plugin against the ABI contract (abi/README.md).\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		if err == nil {
			fs.Usage()
		}
		return ExitUsage
	}
	logger := common.logger(env)
	target := fs.Arg(0)
	if filepath.Ext(target) == ".wasm" {
		common.plugins = filepath.Dir(target)
		target = ""
	}
	engine, reg, err := common.openRegistry(env, logger)
	if err != nil {
		fmt.Fprintln(env.Stderr, "compactd conform:", err)
		return ExitFailure
	}
	defer engine.Close(context.WithoutCancel(ctx))
	defer reg.Close(context.WithoutCancel(ctx))
	var name string
	if target == "" {
		name, err = reg.LoadFile(ctx, fs.Arg(0))
	} else {
		name, err = target, reg.Resolve(ctx, target)
	}
	if err != nil {
		fmt.Fprintln(env.Stderr, "FAIL load:", err)
		return exitFor(err)
	}
	p, release, err := reg.Acquire(name)
	if err != nil {
		fmt.Fprintln(env.Stderr, "FAIL:", err)
		return exitFor(err)
	}
	defer release()
	tok := tokens.New(tokens.Options{}).ForModel("")
	var extra []*chat.Conversation
	if *dataFile != "" {
		convs, err := dataset.ReadFile(*dataFile)
		if err != nil {
			fmt.Fprintln(env.Stderr, "compactd conform:", err)
			return ExitInput
		}
		for i, c := range convs {
			if i >= *maxConvs {
				break
			}
			for _, n := range dataset.SamplePrefixes(c.Chat, 5) {
				pc := dataset.Prefix(c.Chat, n)
				tok.CountMessages(pc.Messages)
				extra = append(extra, pc)
			}
		}
	}
	report := conform.Run(ctx, p, tok, extra)
	for _, f := range report.Findings {
		if f.Err != nil {
			fmt.Fprintf(env.Stdout, "FAIL %s: %v\n", f.Check, f.Err)
		} else {
			fmt.Fprintf(env.Stdout, "ok   %s\n", f.Check)
		}
	}
	if !report.OK() {
		fmt.Fprintf(env.Stdout, "%s: %d of %d checks failed\n", report.Plugin, len(report.Failures()), len(report.Findings))
		return ExitPluginFailed
	}
	fmt.Fprintf(env.Stdout, "%s: all %d checks passed (path: %s)\n", report.Plugin, len(report.Findings), p.Path())
	return ExitOK
}

func runVersion(_ context.Context, env *Env, _ []string) int {
	fmt.Fprintf(env.Stdout, "compactd %s (plugin ABI %s)\n", Version, abi.Version)
	return ExitOK
}

// Version is compactd's version.
const Version = "0.1.0"
