package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/eval"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/policyconfig"
	"github.com/compactd/compactd/registry"
)

// listFlag collects a repeatable flag whose values may also be
// comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range splitList(v) {
		*l = append(*l, s)
	}
	return nil
}

// retentionFlag collects --min-retention: SHARE for every policy, or
// POLICY=SHARE; a share is a fraction (0.85) or a percentage (85%).
type retentionFlag map[string]float64

func (r retentionFlag) String() string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(r)) {
		if k == "" {
			out = append(out, fmt.Sprint(r[k]))
		} else {
			out = append(out, fmt.Sprintf("%s=%v", k, r[k]))
		}
	}
	return strings.Join(out, ",")
}

func (r retentionFlag) Set(v string) error {
	policy, value, named := strings.Cut(v, "=")
	if !named {
		policy, value = "", v
	} else if policy == "" {
		return fmt.Errorf("%q: want SHARE or POLICY=SHARE", v)
	}
	pct := strings.HasSuffix(value, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(value, "%"), 64)
	if err != nil {
		return fmt.Errorf("%q: want a share such as 0.85 or 85%%", v)
	}
	if pct {
		f /= 100
	}
	if f < 0 || f > 1 {
		return fmt.Errorf("%q: a share is between 0 and 1 (0%% and 100%%)", v)
	}
	r[policy] = f
	return nil
}

// of returns the threshold for a policy, and whether there is one.
func (r retentionFlag) of(policy string) (float64, bool) {
	if f, ok := r[policy]; ok {
		return f, true
	}
	f, ok := r[""]
	return f, ok
}

// repeatFlag collects a repeatable flag as given.
type repeatFlag []string

func (r *repeatFlag) String() string     { return strings.Join(*r, " ") }
func (r *repeatFlag) Set(v string) error { *r = append(*r, v); return nil }

const evalAbout = `
Replays each conversation turn by turn as a stateless agent sends it, through
the same compaction path as the daemon, and reports for every policy (and the
uncompressed baseline "none"): tokens sent, validity, prompt-cache reuse,
session cost, retention (the facts of each request's history its compacted
form still holds, early, middle and late) and compaction latency. Prints
tables on stdout and writes report.json, summary.md and SVG charts to --out.
docs/eval.md explains every figure.

Without --data it reads the full data set: $COMPACTD_DATA, else a
shared/data directory beside or above the working directory; the error says
where it looked. The repository's small fixture set is testdata/conversations.`

func runEval(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet("eval", "[--data FILE.jsonl|DIR ...] [--policy P|all ...] [--pipeline a,b ...] [flags]", evalAbout)
	var common commonFlags
	common.register(fs, env)
	var data listFlag
	var policies listFlag
	var pipelines repeatFlag
	var sets setFlags
	var costModels listFlag
	fs.Var(&data, "data", "conversations: a JSONL `FILE` or a DIR of them (repeatable; default: every file of $COMPACTD_DATA, else of shared/data beside or above the working directory)")
	fs.Var(&policies, "policy", "`POLICY` to evaluate (repeatable or comma-separated; \"all\" = every plugin in the plugins directory)")
	fs.Var(&pipelines, "pipeline", "comma-separated `POLICIES` to evaluate as one pipeline (repeatable)")
	fs.Var(&sets, "set", "config override `KEY=VALUE` (repeatable; policy.key=value when several policies are evaluated)")
	model := fs.String("model", "gpt-4o", "the agent's `MODEL`: the tokenizer and context window the policies see")
	window := fs.Int("context-window", 0, "override the model's context window (`TOKENS`)")
	target := fs.Int("target-tokens", 0, "pipelines: stop once the conversation fits in `N` tokens")
	pricing := fs.String("pricing", "default", "pricing table: a shipped `NAME` or a JSON file (see --print-pricing)")
	fs.Var(&costModels, "cost-models", "`MODELS` to price sessions under (comma-separated; default: the table's \"compare\" list)")
	printPricing := fs.Bool("print-pricing", false, "print the pricing table (to copy and edit) and exit")
	out := fs.String("out", "eval-out", "`DIR` for report.json, summary.md and the SVG charts (\"\" writes none)")
	maxConvs := fs.Int("max-conversations", 0, "use only the first `N` conversations of each file (0 = all)")
	jobs := fs.Int("jobs", 0, "conversations replayed at once (default GOMAXPROCS)")
	progress := fs.Bool("progress", false, "draw a progress bar on stderr even when it is not a terminal")
	breakpoints := fs.Bool("cache-breakpoints", true, "requests ask for the policies' cache breakpoints, and Anthropic-style caches are priced with them (false: the agent marks only its system prompt and each request's end)")
	check := fs.Bool("check", false, "exit 4 when a policy drops the task (the first user message) from a request, as well as when it sends an invalid one; exit 1 when the uncompressed baseline loses a probe (a bug in eval)")
	minRetention := retentionFlag{}
	fs.Var(minRetention, "min-retention", "exit 4 when a policy keeps less than `SHARE` of its probes on a file (0.85 or 85%; POLICY=SHARE for one policy; repeatable)")
	chart := fs.String("chart-conversation", "", "the conversation `ID` the tokens chart shows (default: each file's longest)")
	llm := fs.String("llm", "none", "what answers plugins' llm_complete: none (every call fails with no_provider) or stub (offline fixed-ratio summaries, for call counts and cost only)")
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	fail := env.fail
	if *printPricing {
		b, err := eval.ShippedPricing(*pricing)
		if err != nil {
			if b, err = os.ReadFile(*pricing); err != nil {
				return fail(ExitUsage, err)
			}
		}
		env.Stdout.Write(b)
		return ExitOK
	}
	if len(pos) > 0 {
		return fs.usageError(env, fmt.Sprintf("unexpected argument %q (data files go after --data)", pos[0]))
	}
	if len(policies) == 0 && len(pipelines) == 0 {
		return fs.usageError(env, "--policy or --pipeline is required (--policy all evaluates every plugin)")
	}
	var completer host.Completer
	tok := tokens.New(tokens.Options{})
	switch *llm {
	case "none":
	case "stub":
		completer = eval.StubLLM{Ratio: 0.1, Count: tok.ForModel(*model).Count}
	default:
		return fail(ExitUsage, fmt.Errorf("--llm %q: want none or stub", *llm))
	}
	files, err := dataFiles(data)
	if err != nil {
		return fail(ExitInput, err)
	}
	table, err := eval.LoadPricing(*pricing)
	if err != nil {
		return fail(ExitUsage, err)
	}

	logger := common.logger(env)
	engine, reg, err := common.openRegistry(logger)
	if err != nil {
		return fail(ExitFailure, err)
	}
	defer engine.Close(context.WithoutCancel(ctx))
	defer reg.Close(context.WithoutCancel(ctx))

	var names []string
	for _, p := range policies {
		if p != "all" {
			names = append(names, p)
			continue
		}
		all, err := allPolicies(ctx, env, reg, common.plugins)
		if err != nil {
			return fail(exitFor(err), err)
		}
		names = append(names, all...)
	}
	var specs []eval.Spec
	seen := map[string]bool{}
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			specs = append(specs, eval.Spec{Name: n, Pipeline: []string{n}})
		}
	}
	for _, p := range pipelines {
		pl := splitList(p)
		if len(pl) == 0 {
			return fail(ExitUsage, fmt.Errorf("--pipeline %q: no policies", p))
		}
		specs = append(specs, eval.Spec{Name: strings.Join(pl, ","), Pipeline: pl})
	}
	for _, s := range specs {
		for _, n := range s.Pipeline {
			if n == eval.Baseline {
				return fail(ExitUsage, fmt.Errorf("%q is the baseline, evaluated always; name a policy", eval.Baseline))
			}
			if err := reg.Resolve(ctx, n); err != nil {
				return fail(exitFor(err), err)
			}
		}
	}
	if err := specOverrides(specs, sets); err != nil {
		return fail(ExitUsage, err)
	}

	opts := eval.Options{
		Policies: reg, Tokens: tok, Config: envConfig{getenv: env.Getenv}, Logger: logger, LLM: completer,
		Specs: specs, Model: *model, ContextWindow: *window, TargetTokens: *target, CacheBreakpoints: *breakpoints,
		Pricing: table, CostModels: costModels, MaxConversations: *maxConvs, Workers: *jobs,
		ChartConversation: *chart,
	}
	if *progress || isTerminal(env.Stderr) {
		opts.Progress = env.Stderr
	}
	rep, err := eval.Run(ctx, opts, files)
	if err != nil {
		code := exitFor(err)
		switch {
		case errors.Is(err, eval.ErrData):
			code = ExitInput
		case errors.Is(err, eval.ErrPricing) || errors.Is(err, eval.ErrOptions):
			code = ExitUsage
		}
		return fail(code, err)
	}
	rep.Command = "compactd eval " + shellJoin(args)
	rep.LLM = *llm
	rep.Machine = eval.ThisMachine()
	rep.WriteText(env.Stdout)
	if *out != "" {
		written, err := rep.Write(*out)
		if err != nil {
			return fail(ExitFailure, err)
		}
		fmt.Fprintf(env.Stderr, "wrote %s\n", strings.Join(written, ", "))
	}
	return evalVerdict(env, rep, *check, minRetention)
}

// evalVerdict prints what fails in a report and returns the exit code
// (the last failure's): invalid requests; with check, a dropped task or a
// baseline that lost a probe (eval's own bug); a policy under its
// --min-retention floor; a data file with no conversation evaluated.
func evalVerdict(env *Env, rep *eval.Report, check bool, floors retentionFlag) int {
	code := ExitOK
	for _, f := range rep.Files {
		for _, p := range f.Policies {
			if p.Validity.Valid < p.Validity.Turns {
				code = env.errorf(ExitPluginFailed, "%s sent %d invalid requests on %s", p.Policy, p.Validity.Turns-p.Validity.Valid, f.File)
			}
			if check && p.Task.Kept < p.Task.Turns {
				code = env.errorf(ExitPluginFailed, "%s dropped the task from %d of %d requests on %s", p.Policy, p.Task.Turns-p.Task.Kept, p.Task.Turns, f.File)
			}
			r := p.Retention
			if floor, ok := floors.of(p.Policy); ok && p.Policy != eval.Baseline && r.Probes > 0 && r.Share < floor {
				code = env.errorf(ExitPluginFailed, "%s kept %.1f%% of its probes on %s (%d of %d), under the %.1f%% required", p.Policy, r.Share*100, f.File, r.Retained, r.Probes, floor*100)
			}
			if check && p.Policy == eval.Baseline && r.Retained < r.Probes {
				code = env.errorf(ExitFailure, "the uncompressed baseline lost %d of %d probes on %s: eval's probes are wrong", r.Probes-r.Retained, r.Probes, f.File)
			}
		}
	}
	// A run that evaluated nothing has no figures, whatever the tables
	// would say: the data was wrong.
	evaluated := 0
	for _, f := range rep.Files {
		evaluated += f.Conversations
		if f.Conversations == 0 {
			code = env.errorf(ExitInput, "%s: no conversation evaluated (%s)", f.File, skipSummary(f.Skipped))
		}
	}
	if evaluated == 0 && len(rep.Files) > 1 {
		code = env.errorf(ExitInput, "no conversation evaluated in any of %d data files", len(rep.Files))
	}
	return code
}

// skipSummary says why a file's conversations were all skipped.
func skipSummary(skipped []eval.Skip) string {
	switch len(skipped) {
	case 0:
		return "the file holds no conversation"
	case 1:
		return fmt.Sprintf("its one conversation was skipped: %s", skipped[0].Reason)
	}
	return fmt.Sprintf("all %d skipped, e.g. %s: %s", len(skipped), skipped[0].Conversation, skipped[0].Reason)
}

// dataFiles expands --data values (files or directories of .jsonl files);
// none means every file of the data directory.
func dataFiles(data []string) ([]string, error) {
	if len(data) == 0 {
		files, err := dataset.Files()
		if err != nil {
			return nil, fmt.Errorf("%w; or pass --data FILE.jsonl", err)
		}
		return files, nil
	}
	var files []string
	for _, d := range data {
		st, err := os.Stat(d)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, d)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(d, "*.jsonl"))
		if err != nil {
			return nil, err
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("no .jsonl files in %s: %w", d, os.ErrNotExist)
		}
		sort.Strings(matches)
		files = append(files, matches...)
	}
	return files, nil
}

// allPolicies returns the policies of the plugins directory: each
// NAME.wasm that serves the policy NAME (the built-in plugins are named
// so). A file that fails to load or describes itself under another name
// is reported and skipped.
func allPolicies(ctx context.Context, env *Env, reg *registry.Registry, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.wasm"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("%w: %s", registry.ErrNoDir, dir)
		}
		return nil, fmt.Errorf("%w: no .wasm files in %s", registry.ErrNoDir, dir)
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".wasm")
		if err := reg.Resolve(ctx, name); err != nil {
			fmt.Fprintf(env.Stderr, "warning: skipping %s: %v (evaluate it with --policy and its described name)\n", filepath.Base(f), err)
			continue
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no loadable policy in %s", registry.ErrNoDir, dir)
	}
	return names, nil
}

// specOverrides applies --set flags: key=value when exactly one spec of one
// policy is evaluated, else policy.key=value, applied to every spec whose
// pipeline runs that policy.
func specOverrides(specs []eval.Spec, sets setFlags) error {
	for _, kv := range sets {
		key, value, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return fmt.Errorf("--set %q: want key=value", kv)
		}
		policy, k, dotted := strings.Cut(key, ".")
		if !dotted {
			if len(specs) != 1 || len(specs[0].Pipeline) != 1 {
				return fmt.Errorf("--set %q: with several policies, name the policy (policy.key=value)", kv)
			}
			policy, k = specs[0].Pipeline[0], key
		}
		applied := false
		for i := range specs {
			for _, p := range specs[i].Pipeline {
				if p != policy {
					continue
				}
				if specs[i].Overrides == nil {
					specs[i].Overrides = map[string]map[string]any{}
				}
				if specs[i].Overrides[p] == nil {
					specs[i].Overrides[p] = map[string]any{}
				}
				specs[i].Overrides[p][k] = policyconfig.ParseValue(value)
				applied = true
			}
		}
		if !applied {
			return fmt.Errorf("--set %q: no evaluated policy is named %q", kv, policy)
		}
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// shellJoin quotes args for a POSIX shell where needed.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
