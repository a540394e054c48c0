package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/chat"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/tokens"
)

func runCompact(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var common commonFlags
	common.register(fs, env)
	policy := fs.String("policy", "", "the `policy` to apply")
	pipeline := fs.String("pipeline", "", "comma-separated `policies` to apply in order")
	model := fs.String("model", "", "the agent's `model` (selects the tokenizer and context window)")
	convID := fs.String("conversation-id", "", "conversation `id` (default: derived from the system messages and first user message)")
	target := fs.Int("target-tokens", 0, "pipelines: stop once the conversation fits in `n` tokens")
	breakpoints := fs.Bool("cache-breakpoints", false, "mark the policy's prompt-cache breakpoints with Anthropic's \"cache_control\" (up to 3 messages)")
	var sets setFlags
	fs.Var(&sets, "set", "config override `key=value` (repeatable; policy.key=value in a pipeline)")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: compactd compact --policy NAME [--set key=value ...] [flags] [FILE|-]\n\nReads a conversation (a JSON array of messages, or an object with \"messages\")\nfrom FILE or stdin, prints the compacted conversation on stdout and a summary on stderr.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	names := splitList(*pipeline)
	switch {
	case *policy != "" && len(names) > 0:
		fmt.Fprintln(env.Stderr, "compactd compact: give --policy or --pipeline, not both")
		return ExitUsage
	case *policy != "":
		names = []string{*policy}
	case len(names) == 0:
		fmt.Fprintln(env.Stderr, "compactd compact: --policy or --pipeline is required")
		return ExitUsage
	}
	if fs.NArg() > 1 {
		fmt.Fprintln(env.Stderr, "compactd compact: at most one input file")
		return ExitUsage
	}
	overrides, err := sets.overrides(names)
	if err != nil {
		fmt.Fprintln(env.Stderr, "compactd compact:", err)
		return ExitUsage
	}

	input, err := readInput(env, fs.Arg(0))
	if err != nil {
		fmt.Fprintln(env.Stderr, "compactd compact:", err)
		return ExitInput
	}
	conv, err := chat.Parse(input)
	if err == nil {
		err = conv.Validate()
	}
	if err != nil {
		fmt.Fprintln(env.Stderr, "compactd compact:", err)
		return ExitInput
	}

	logger := common.logger(env)
	engine, reg, err := common.openRegistry(env, logger)
	if err != nil {
		fmt.Fprintln(env.Stderr, "compactd compact:", err)
		return ExitFailure
	}
	defer engine.Close(context.WithoutCancel(ctx))
	defer reg.Close(context.WithoutCancel(ctx))
	for _, n := range names {
		if err := reg.Resolve(ctx, n); err != nil {
			fmt.Fprintln(env.Stderr, "compactd compact:", err)
			return exitFor(err)
		}
	}

	c := compactor.New(compactor.Options{Policies: reg, Tokens: tokens.New(tokens.Options{}), Config: envConfig{getenv: env.Getenv}, Logger: logger})
	start := time.Now()
	resp, err := c.Compact(ctx, compactor.Request{
		Conversation: conv, Pipeline: names, Overrides: overrides,
		Model: *model, ConversationID: *convID, TargetTokens: *target,
	})
	if err != nil {
		fmt.Fprintln(env.Stderr, "compactd compact:", err)
		return exitFor(err)
	}
	conv = resp.Conversation
	if *breakpoints {
		if conv, err = conv.WithCacheBreakpoints(resp.CacheBreakpoints); err != nil {
			fmt.Fprintln(env.Stderr, "compactd compact: cache breakpoints:", err)
			return ExitFailure
		}
	}
	out := conv.Encode()
	if _, err := env.Stdout.Write(append(out, '\n')); err != nil {
		fmt.Fprintln(env.Stderr, "compactd compact: writing output:", err)
		return ExitFailure
	}
	fmt.Fprintln(env.Stderr, summaryLine(resp, time.Since(start)))
	failed := false
	for _, st := range resp.Stats.Stages {
		failed = failed || st.Error != ""
	}
	for _, w := range resp.Warnings {
		fmt.Fprintln(env.Stderr, "warning:", w)
	}
	if failed {
		return ExitPluginFailed
	}
	return ExitOK
}

// summaryLine is the one-line account printed on stderr.
func summaryLine(resp *compactor.Response, took time.Duration) string {
	var stages []string
	for _, st := range resp.Stats.Stages {
		s := st.Policy + "@" + st.Version
		switch {
		case st.Error != "":
			s += " (failed; input kept)"
		case st.Skipped != "":
			s += " (skipped: " + st.Skipped + ")"
		case !st.Compacted:
			s += " (nothing to compact)"
		}
		stages = append(stages, s)
	}
	st := resp.Stats
	return fmt.Sprintf("%s: %d → %d tokens, %d → %d messages, %s (%s)",
		strings.Join(stages, " → "), st.TokensBefore, st.TokensAfter, st.MessagesBefore, st.MessagesAfter,
		took.Round(time.Microsecond), st.Encoding)
}

func readInput(env *Env, name string) ([]byte, error) {
	if name == "" || name == "-" {
		return io.ReadAll(env.Stdin)
	}
	b, err := os.ReadFile(name)
	if err != nil {
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
