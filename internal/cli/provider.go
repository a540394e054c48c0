package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"time"

	"github.com/compactd/compactd/internal/provider"
)

const providerAbout = `
Runs a local LLM provider for trying compactd's proxy without a real
one: it speaks OpenAI's Chat Completions (/v1/chat/completions) and
Responses (/v1/responses) and Anthropic's Messages (/v1/messages), JSON
and streamed, and answers with a scripted model that calls the request's
tools (naming files and record ids) and answers their results. It checks
each request as the real APIs do (tool calls paired with their results,
Anthropic's turn order, at most 4 cache_control markers, no unknown
fields) and refuses a bad one with a 400 in the provider's error shape,
logged on stderr. Point the daemon's proxy at it (proxy.openai.upstream
http://ADDRESS/v1, proxy.anthropic.upstream http://ADDRESS). SIGINT or
SIGTERM stops it and prints what it served. See docs/quickstarts.md.`

// runProvider is `compactd provider`: the local provider, until SIGINT or
// SIGTERM.
func runProvider(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet("provider", "[flags]", providerAbout)
	listen := fs.String("listen", "127.0.0.1:8089", "`ADDRESS` to listen on (port 0 picks a free one)")
	addrFile := fs.String("addr-file", "", "write the address it listens on to `FILE` once it accepts connections")
	openaiKey := fs.String("openai-key", "", "the only OpenAI `KEY` accepted (default: any non-empty key)")
	anthropicKey := fs.String("anthropic-key", "", "the only Anthropic `KEY` accepted (default: any non-empty key)")
	parallel := fs.Int("parallel-every", 3, "every `N`th user turn gets two tool calls in parallel (0: never)")
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return fs.usageError(env, fmt.Sprintf("unexpected argument %q (provider takes only flags)", pos[0]))
	}
	if *parallel < 0 {
		return fs.usageError(env, fmt.Sprintf("--parallel-every %d: want 0 or more", *parallel))
	}
	p := provider.New(provider.Options{OpenAIKey: *openaiKey, AnthropicKey: *anthropicKey, ParallelEvery: *parallel,
		Logf: func(format string, args ...any) { fmt.Fprintf(env.Stderr, format+"\n", args...) }})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return env.errorf(ExitFailure, "provider: %v", err)
	}
	addr := ln.Addr().String()
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(addr+"\n"), 0o644); err != nil {
			ln.Close()
			return env.errorf(ExitFailure, "provider: writing the address: %v", err)
		}
	}
	fmt.Fprintf(env.Stderr, "provider: listening on %s (OpenAI base URL http://%s/v1, Anthropic base URL http://%s)\n", addr, addr, addr)
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return env.errorf(ExitFailure, "provider: %v", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return env.errorf(ExitFailure, "provider: stopping: %v", err)
	}
	st := p.Stats()
	apis := make([]string, 0, len(st.APIs))
	for a := range st.APIs {
		apis = append(apis, a)
	}
	sort.Strings(apis)
	for _, a := range apis {
		s := st.APIs[a]
		fmt.Fprintf(env.Stderr, "provider: %s: %d requests (%d streamed), %d refused, %d tool calls\n", a, s.Requests, s.Streamed, s.Rejected, s.ToolCall)
	}
	return ExitOK
}
