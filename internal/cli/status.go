package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/compactd/compactd/client"
)

const statusAbout = `
Asks the running daemon (GET /v1/status, /healthz and /v1/config) how it
is: version, uptime, health ("starting" while it loads its plugins,
"degraded" while no policy is loaded or the default one cannot load),
policies serving and failed, where its plugins, config and state live,
totals, and the conversations it tracks, most recent first. Exit 1 when no
daemon answers.`

func runStatus(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet("status", "[--socket PATH] [--limit N | --conversation ID] [--json]", statusAbout)
	var daemon daemonFlags
	daemon.register(fs, env, false)
	limit := fs.Int("limit", 10, "list at most `N` conversations")
	convID := fs.String("conversation", "", "show one conversation by `ID`")
	asJSON := fs.Bool("json", false, "print the daemon's JSON answer (GET /v1/status)")
	pos, code, ok := fs.parse(env, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return fs.usageError(env, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	if *limit < 1 {
		return fs.usageError(env, fmt.Sprintf("--limit %d: want a positive number", *limit))
	}
	c := daemon.client()
	defer c.Close()
	socket := daemon.path()

	if *convID != "" {
		conv, err := c.Conversation(ctx, *convID)
		if err != nil {
			return daemonFailure(env, socket, err)
		}
		if *asJSON {
			return printJSON(env, conv)
		}
		printConversation(env.Stdout, conv)
		return ExitOK
	}
	st, err := c.Status(ctx, *limit)
	if err != nil {
		return daemonFailure(env, socket, err)
	}
	if *asJSON {
		return printJSON(env, st)
	}
	health, err := c.Health(ctx)
	if err != nil {
		return daemonFailure(env, socket, err)
	}
	var cfg struct {
		PluginsDir string `json:"plugins_dir"`
	}
	doc, err := c.Config(ctx)
	if err != nil {
		return daemonFailure(env, socket, err)
	}
	json.Unmarshal(doc.Config, &cfg)

	w := env.Stdout
	fmt.Fprintf(w, "compactd %s (plugin ABI %s) on %s, up %s\n", st.Version, st.ABI, socket, roundDuration(time.Duration(st.UptimeSeconds*float64(time.Second))))
	h := health.Status
	switch {
	case health.Status == "starting":
		h += fmt.Sprintf(" (loading %d plugin files; policies serve as they load)", health.Loading)
	case health.Status != "ok" && len(health.Problems) == 0:
		h += " (no policy loaded: every compaction fails until a plugin loads; see below)"
	}
	fmt.Fprintf(w, "health:         %s\n", h)
	for _, p := range health.Problems {
		fmt.Fprintf(w, "  problem:      %s\n", p)
	}
	fmt.Fprintf(w, "policies:       %d serving, %d failed to load (compactd policies --socket %s)\n", st.Policies.Serving, st.Policies.Failed, socket)
	fmt.Fprintf(w, "plugins:        %s\n", cfg.PluginsDir)
	fmt.Fprintf(w, "config:         %s\n", doc.File)
	fmt.Fprintf(w, "state:          %s (a conversation is kept %s after its last request, at most %d)\n", st.Store.Path, st.Store.TTL, st.Store.MaxConversations)
	t := st.Totals
	fmt.Fprintf(w, "conversations:  %d tracked, %d requests, %d compactions, %d failures, %d tokens saved\n",
		t.Conversations, t.Requests, t.Compactions, t.Failures, t.TokensSaved)
	if health.Status != "ok" {
		fmt.Fprintln(w, "\n"+strings.TrimPrefix(noPoliciesMessage(cfg.PluginsDir, 0), "compactd: "))
	}
	if len(st.Conversations) == 0 {
		return ExitOK
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONVERSATION\tMODEL\tPOLICY\tMESSAGES\tTOKENS\tWINDOW USED\tREQUESTS\tCOMPACTIONS\tLAST SEEN")
	now := time.Now()
	for _, cv := range st.Conversations {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d → %d\t%d → %d\t%s\t%d\t%d\t%s ago\n", cv.ID, orDash(cv.Model), strings.Join(cv.Pipeline, ","),
			cv.Messages, cv.MessagesAfter, cv.Tokens, cv.TokensAfter, windowUsed(cv), cv.Requests, cv.Compactions, roundDuration(now.Sub(cv.LastSeen)))
	}
	tw.Flush()
	if t.Conversations > len(st.Conversations) {
		fmt.Fprintf(w, "(%d more; --limit N shows more)\n", t.Conversations-len(st.Conversations))
	}
	return ExitOK
}

func printConversation(w io.Writer, cv *client.Conversation) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("conversation", cv.ID)
	row("model", orDash(cv.Model))
	row("policy", strings.Join(cv.Pipeline, ","))
	row("messages", fmt.Sprintf("%d → %d (last request)", cv.Messages, cv.MessagesAfter))
	row("tokens", fmt.Sprintf("%d → %d (last request)", cv.Tokens, cv.TokensAfter))
	row("context window", fmt.Sprintf("%d (%s used)", cv.ContextWindow, windowUsed(*cv)))
	row("requests", cv.Requests)
	row("compactions", cv.Compactions)
	row("failures", cv.Failures)
	row("tokens saved", cv.TokensSaved)
	row("first seen", cv.FirstSeen.Local().Format(time.RFC3339))
	row("last seen", cv.LastSeen.Local().Format(time.RFC3339))
	if !cv.LastCompacted.IsZero() {
		row("last compacted", cv.LastCompacted.Local().Format(time.RFC3339))
	}
	tw.Flush()
}

func printJSON(env *Env, v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return env.fail(ExitFailure, err)
	}
	fmt.Fprintln(env.Stdout, string(b))
	return ExitOK
}

// windowUsed is the share of the context window the last request's input took.
func windowUsed(cv client.Conversation) string {
	if cv.ContextWindow <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*cv.UsageRatio)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// roundDuration rounds to what a person reads: 850ms, 42s, 3m12s, 5h4m.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Hour:
		return d.Round(time.Second)
	}
	return d.Round(time.Minute)
}
