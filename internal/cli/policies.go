package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/conform"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/tokens"
)

const policiesAbout = `
Lists the plugins directory: each .wasm file with the policy it serves
(name, version, ABI) and its description, or the error that kept it from
loading. With --socket PATH (or --daemon) it lists what the running daemon
serves instead, with its call counters. Exit 5 when a file failed to load.`

func runPolicies(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet("policies", "[--plugins DIR | --socket PATH | --daemon] [--json]", policiesAbout)
	var common commonFlags
	var daemon daemonFlags
	common.register(fs, env)
	daemon.register(fs, env, true)
	asJSON := fs.Bool("json", false, "print JSON (each plugin's describe output; with --socket, GET /v1/policies)")
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return fs.usageError(env, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	if daemon.remote() {
		if code, ok := checkLocalFlags(fs, env); !ok {
			return code
		}
		return policiesRemote(ctx, env, &daemon, *asJSON)
	}
	logger := common.logger(env)
	engine, reg, err := common.openRegistry(logger)
	if err != nil {
		return env.fail(ExitFailure, err)
	}
	defer engine.Close(context.WithoutCancel(ctx))
	defer reg.Close(context.WithoutCancel(ctx))
	if err := reg.LoadAll(ctx); err != nil {
		return env.fail(exitFor(err), err)
	}
	infos := reg.Policies()
	if *asJSON {
		type entry struct {
			File  string           `json:"file"`
			Error string           `json:"error,omitempty"`
			Path  string           `json:"path,omitempty"`
			Desc  *abi.Description `json:"describe,omitempty"`
		}
		out := []entry{}
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
		fmt.Fprintf(env.Stderr, "no .wasm files in %s (make install puts the built-in policies there)\n", common.plugins)
	}
	if failed > 0 {
		return ExitPolicy
	}
	return ExitOK
}

// policiesRemote lists the daemon's policies (GET /v1/policies).
func policiesRemote(ctx context.Context, env *Env, daemon *daemonFlags, asJSON bool) int {
	c := daemon.client()
	defer c.Close()
	list, err := c.Policies(ctx)
	if err != nil {
		return daemonFailure(env, daemon.path(), err)
	}
	if asJSON {
		b, _ := json.MarshalIndent(client.PolicyList{Policies: list}, "", "  ")
		fmt.Fprintln(env.Stdout, string(b))
		return ExitOK
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tABI\tPATH\tCALLS\tFAILURES\tFILE\tDESCRIPTION")
	failed := 0
	for _, p := range list {
		file := filepath.Base(p.File)
		if !p.Serving {
			failed++
			msg := "not serving"
			if p.Error != nil {
				msg = p.Error.Message
			}
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%s\tERROR: %s\n", p.Name, file, msg)
			continue
		}
		desc := p.Description
		if p.Error != nil {
			failed++
			desc = "ERROR (previous version serving): " + p.Error.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", p.Name, p.Version, p.ABI, p.Path, p.Calls, p.Failures, file, desc)
	}
	tw.Flush()
	if len(list) == 0 {
		fmt.Fprintf(env.Stderr, "the daemon on %s serves no policies: its plugins directory is empty ('compactd status' names it)\n", daemon.path())
	}
	if failed > 0 {
		return ExitPolicy
	}
	return ExitOK
}

func runConform(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet("conform", "[flags] PLUGIN.wasm | POLICY", "Checks a plugin, in any language, against the ABI contract (abi/README.md).")
	var common commonFlags
	common.register(fs, env)
	dataFile := fs.String("data", "", "also run on turn-by-turn prefixes of the conversations in this JSONL `FILE`")
	maxConvs := fs.Int("max-conversations", 5, "with --data: how many conversations to use (`N`)")
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return fs.usageError(env, "name one plugin file or policy")
	}
	logger := common.logger(env)
	target := pos[0]
	if filepath.Ext(target) == ".wasm" {
		common.plugins = filepath.Dir(target)
		target = ""
	}
	engine, reg, err := common.openRegistry(logger)
	if err != nil {
		return env.fail(ExitFailure, err)
	}
	defer engine.Close(context.WithoutCancel(ctx))
	defer reg.Close(context.WithoutCancel(ctx))
	var name string
	if target == "" {
		name, err = reg.LoadFile(ctx, pos[0])
	} else {
		name, err = target, reg.Resolve(ctx, target)
	}
	if err != nil {
		return env.errorf(exitFor(err), "FAIL load: %v", err)
	}
	p, release, err := reg.Acquire(ctx, name)
	if err != nil {
		return env.errorf(exitFor(err), "FAIL: %v", err)
	}
	defer release()
	tok := tokens.New(tokens.Options{}).ForModel("")
	var extra []*chat.Conversation
	if *dataFile != "" {
		convs, err := dataset.ReadFile(*dataFile)
		if err != nil {
			return env.fail(ExitInput, err)
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
