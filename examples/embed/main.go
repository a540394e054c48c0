// Command embed is compactd's host and registry embedded in another Go
// program: it loads the policies of a plugins directory and compacts the
// conversation on its standard input with one of them, without a daemon.
//
// It is a module of its own, outside compactd's (its go.mod replaces
// github.com/compactd/compactd with this checkout), so it can use only
// compactd's public packages; a test in compactd builds and runs it
// (embed_test.go at the repository's root).
//
//	embed -plugins DIR -policy NAME [-set key=value]... < conversation.json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/policyconfig"
	"github.com/compactd/compactd/registry"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

// countTokens is this program's token counter: about four bytes a token.
// A real embedder passes its tokenizer here.
func countTokens(text string) int { return (len(text) + 3) / 4 }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("plugins", "", "plugins `DIR`")
	policy := fs.String("policy", "", "the policy `NAME`")
	var sets []string
	fs.Func("set", "a config `key=value` for the policy (repeatable)", func(s string) error {
		sets = append(sets, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}

	// The host: one engine compiles and runs every plugin.
	engine, err := host.NewEngine(host.Config{Limits: host.Limits{MaxInstances: 2}})
	if err != nil {
		return err
	}
	defer engine.Close(ctx)

	// The registry: the plugins directory, each new version checked by
	// this program's own smoke test before it serves.
	reg := registry.New(registry.Options{Dir: *dir, Engine: engine, Smoke: smoke})
	defer reg.Close(ctx)
	if err := reg.LoadAll(ctx); err != nil {
		return err
	}
	for _, in := range reg.Policies() {
		if in.Error != nil {
			fmt.Fprintf(stderr, "%s did not load: %v\n", in.File, in.Error)
		}
	}
	p, release, err := reg.Acquire(ctx, *policy)
	if errors.Is(err, registry.ErrUnknownPolicy) {
		return fmt.Errorf("no plugin in %s serves %q: %w", *dir, *policy, err)
	}
	if err != nil {
		return err
	}
	defer release()

	// The conversation, kept as its bytes and its parsed form.
	body, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	conv, err := chat.Parse(body)
	if err != nil {
		return err
	}
	if err := conv.Validate(); err != nil {
		return err
	}
	for i := range conv.Messages {
		conv.Messages[i].Tokens = countTokens(conv.Messages[i].Text())
	}

	// The policy's config: its defaults under this program's settings.
	values := map[string]any{}
	for _, kv := range sets {
		k, v, _ := strings.Cut(kv, "=")
		values[k] = policyconfig.ParseValue(v)
	}
	cfg, err := p.Schema().Resolve(policyconfig.Layer{Source: "-set", Values: values})
	if err != nil {
		return err
	}

	resp, err := p.Compact(ctx, &host.Request{
		Conversation: conv,
		Config:       cfg,
		Context:      abi.Context{ContextWindow: 8192},
		Env:          host.CallEnv{CountTokens: countTokens},
	})
	if err != nil {
		return err // a *host.PluginError: the input is untouched
	}
	fmt.Fprintf(stderr, "%s@%s (%s path): %d messages -> %d, %d dropped: %s\n",
		p.Name(), p.Version(), p.Path(), conv.Len(), resp.Conversation.Len(), len(resp.Dropped), resp.Result.Summary)
	_, err = stdout.Write(resp.Conversation.Encode())
	return err
}

// smoke is this program's check of a new plugin version: it must compact
// a two-message conversation with its default config.
func smoke(ctx context.Context, p *host.Plugin) error {
	conv, err := chat.Parse([]byte(`[{"role":"system","content":"Be brief."},{"role":"user","content":"hello"}]`))
	if err != nil {
		return err
	}
	cfg, err := p.Schema().Resolve()
	if err != nil {
		return err
	}
	_, err = p.Compact(ctx, &host.Request{Conversation: conv, Config: cfg})
	return err
}
