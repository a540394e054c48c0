package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/tokens"
)

const compactAbout = `
Reads a conversation (a JSON array of OpenAI chat messages, or an object
with "messages" whose other keys are kept) from FILE or stdin ("-"),
prints the compacted conversation on stdout and a one-line summary on
stderr.

By default the command loads the policy from the plugins directory itself.
With --socket PATH (or --daemon, for the default socket) it asks the
running daemon instead, so the daemon's plugins, its config file (policy
defaults, the compact: block) and its LLM provider apply; --policy may then
be left out to use the daemon's default.

Exit codes: 0 done, 2 usage, 3 bad input (missing file, malformed JSON,
invalid conversation, unsupported format), 4 the plugin failed (the input
is printed unchanged), 5 unknown policy, no plugins or invalid config,
1 anything else (no daemon answering, say).`

// compactFlags are compact's flags.
type compactFlags struct {
	common   commonFlags
	daemon   daemonFlags
	policy   string
	pipeline string
	model    string
	convID   string
	target   int
	force    bool
	sets     setFlags
	// breakpoints marks the policy's cache breakpoints (cache_control).
	breakpoints bool
}

func runCompact(ctx context.Context, env *Env, args []string) int {
	var f compactFlags
	fs := newFlagSet("compact", "[--policy NAME | --pipeline a,b] [--set key=value ...] [flags] [FILE | -]", compactAbout)
	f.common.register(fs, env)
	f.daemon.register(fs, env, true)
	fs.StringVar(&f.policy, "policy", "", "the `POLICY` to apply")
	fs.StringVar(&f.pipeline, "pipeline", "", "comma-separated `POLICIES` to apply in order")
	fs.StringVar(&f.model, "model", "", "the agent's `MODEL` (selects the tokenizer and context window)")
	fs.StringVar(&f.convID, "conversation-id", "", "conversation `ID` (default: derived from the system messages and first user message)")
	fs.IntVar(&f.target, "target-tokens", 0, "pipelines: stop once the conversation fits in `N` tokens")
	fs.BoolVar(&f.force, "force", false, "compact now: the policy is told the caller decided (its own thresholds do not apply), aiming at --target-tokens")
	fs.BoolVar(&f.breakpoints, "cache-breakpoints", false, "mark the policy's prompt-cache breakpoints with Anthropic's \"cache_control\" (up to 3 messages)")
	fs.Var(&f.sets, "set", "config override `KEY=VALUE` (repeatable; policy.key=value in a pipeline)")
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		return fs.usageError(env, fmt.Sprintf("at most one input file, got %d: %s", len(pos), strings.Join(pos, " ")))
	}
	names := splitList(f.pipeline)
	switch {
	case f.policy != "" && len(names) > 0:
		return fs.usageError(env, "give --policy or --pipeline, not both")
	case f.policy != "":
		names = []string{f.policy}
	case len(names) == 0 && !f.daemon.remote():
		return fs.usageError(env, "--policy or --pipeline is required (or --socket/--daemon to use the daemon's default)")
	case len(names) == 0 && len(f.sets) > 0:
		return fs.usageError(env, "--set needs --policy or --pipeline (it configures the policies named)")
	}
	var overrides map[string]map[string]any
	if len(names) > 0 {
		var err error
		if overrides, err = f.sets.overrides(names); err != nil {
			return fs.usageError(env, err.Error())
		}
	}
	if f.daemon.remote() {
		if code, ok := checkLocalFlags(fs, env); !ok {
			return code
		}
	}

	file, name := "", "stdin"
	if len(pos) == 1 && pos[0] != "-" {
		file, name = pos[0], pos[0]
	}
	input, err := readInput(env, file)
	if err != nil {
		return env.fail(ExitInput, err)
	}
	conv, err := chat.Parse(input)
	if err != nil {
		return env.errorf(ExitInput, "%s: %v", name, err)
	}
	if f.daemon.remote() {
		return compactRemote(ctx, env, &f, names, overrides, conv)
	}
	if err := conv.Validate(); err != nil {
		return env.errorf(ExitInput, "%s: %v", name, err)
	}

	logger := f.common.logger(env)
	engine, reg, err := f.common.openRegistry(logger)
	if err != nil {
		return env.fail(ExitFailure, err)
	}
	defer engine.Close(context.WithoutCancel(ctx))
	defer reg.Close(context.WithoutCancel(ctx))
	for _, n := range names {
		if err := reg.Resolve(ctx, n); err != nil {
			return env.fail(exitFor(err), err)
		}
	}

	c := compactor.New(compactor.Options{Policies: reg, Tokens: tokens.New(tokens.Options{}), Config: envConfig{getenv: env.Getenv}, Logger: logger})
	start := time.Now()
	resp, err := c.Compact(ctx, compactor.Request{
		Conversation: conv, Pipeline: names, Overrides: overrides,
		Model: f.model, ConversationID: f.convID, TargetTokens: f.target,
		Decision: forceDecision(f.force, f.target),
	})
	if err != nil {
		return env.fail(exitFor(err), err)
	}
	out := resp.Conversation
	if f.breakpoints {
		if out, err = out.WithCacheBreakpoints(resp.CacheBreakpoints); err != nil {
			return env.errorf(ExitFailure, "cache breakpoints: %v", err)
		}
	}
	return writeCompacted(env, out, localSummary(resp.Stats), resp.Warnings, time.Since(start))
}

// forceDecision is --force as the host's decision (reason manual).
func forceDecision(force bool, target int) *abi.Decision {
	if !force {
		return nil
	}
	return &abi.Decision{Reason: abi.ReasonManual, TargetTokens: target}
}

// compactRemote sends the conversation to the daemon (POST /v1/compact).
func compactRemote(ctx context.Context, env *Env, f *compactFlags, names []string, overrides map[string]map[string]any, conv *chat.Conversation) int {
	c := f.daemon.client()
	defer c.Close()
	req := &client.CompactRequest{Model: f.model, ConversationID: f.convID, TargetTokens: f.target, Force: f.force, CacheBreakpoints: f.breakpoints, Messages: conv.Raw}
	switch {
	case len(names) == 1 && f.pipeline == "":
		req.Policy = names[0]
		if o := overrides[names[0]]; len(o) > 0 {
			req.Config = o
		}
	case len(names) > 0:
		req.Pipeline = names
		if len(overrides) > 0 {
			req.Config = map[string]any{}
			for p, o := range overrides {
				req.Config[p] = o
			}
		}
	}
	start := time.Now()
	resp, err := c.Compact(ctx, req)
	if err != nil {
		return daemonFailure(env, f.daemon.path(), err)
	}
	out, err := chat.FromRaw(resp.Messages)
	if err != nil {
		return env.errorf(ExitFailure, "the daemon on %s returned messages that do not parse: %v", f.daemon.path(), err)
	}
	return writeCompacted(env, conv.WithMessages(out.Raw, out.Messages), remoteSummary(resp.Stats), resp.Warnings, time.Since(start))
}

// writeCompacted prints the result, the summary line and the warnings,
// and returns ExitPluginFailed when a stage failed (its input was kept).
func writeCompacted(env *Env, out *chat.Conversation, sum runSummary, warnings []string, took time.Duration) int {
	if _, err := env.Stdout.Write(append(out.Encode(), '\n')); err != nil {
		return env.errorf(ExitFailure, "writing output: %v", err)
	}
	fmt.Fprintln(env.Stderr, sum.line(took))
	for _, w := range warnings {
		fmt.Fprintln(env.Stderr, "warning:", w)
	}
	for _, st := range sum.stages {
		if st.err != "" {
			return ExitPluginFailed
		}
	}
	return ExitOK
}

// runSummary is what the summary line reports, from a local run or the
// daemon's answer.
type runSummary struct {
	stages                                                   []stageSummary
	tokensBefore, tokensAfter, messagesBefore, messagesAfter int
	encoding                                                 string
}

type stageSummary struct {
	policy, version, err, skipped string
	compacted                     bool
}

func localSummary(st compactor.Stats) runSummary {
	s := runSummary{tokensBefore: st.TokensBefore, tokensAfter: st.TokensAfter, messagesBefore: st.MessagesBefore,
		messagesAfter: st.MessagesAfter, encoding: st.Encoding}
	for _, g := range st.Stages {
		s.stages = append(s.stages, stageSummary{g.Policy, g.Version, g.Error, g.Skipped, g.Compacted})
	}
	return s
}

func remoteSummary(st client.Stats) runSummary {
	s := runSummary{tokensBefore: st.TokensBefore, tokensAfter: st.TokensAfter, messagesBefore: st.MessagesBefore,
		messagesAfter: st.MessagesAfter, encoding: st.Encoding}
	for _, g := range st.Stages {
		s.stages = append(s.stages, stageSummary{g.Policy, g.Version, g.Error, g.Skipped, g.Compacted})
	}
	return s
}

// line is the one-line account printed on stderr:
// "sliding@1.0.0: 21368 → 7086 tokens, 73 → 25 messages, 1.3ms (o200k_base)".
func (s runSummary) line(took time.Duration) string {
	var stages []string
	for _, st := range s.stages {
		x := st.policy + "@" + st.version
		switch {
		case st.err != "":
			x += " (failed; input kept)"
		case st.skipped != "":
			x += " (skipped: " + st.skipped + ")"
		case !st.compacted:
			x += " (nothing to compact)"
		}
		stages = append(stages, x)
	}
	return fmt.Sprintf("%s: %d → %d tokens, %d → %d messages, %s (%s)",
		strings.Join(stages, " → "), s.tokensBefore, s.tokensAfter, s.messagesBefore, s.messagesAfter,
		took.Round(time.Microsecond), s.encoding)
}

// readInput reads the file, or stdin when name is "".
func readInput(env *Env, name string) ([]byte, error) {
	if name == "" {
		return io.ReadAll(env.Stdin)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("reading %s: %w", name, pe.Err)
		}
		return nil, fmt.Errorf("reading input: %w", err)
	}
	return b, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
