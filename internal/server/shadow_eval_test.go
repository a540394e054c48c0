package server

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/eval"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/tokens"
)

// TestProxyShadowMatchesEval: an agent replays a recorded conversation
// through the proxy, request by request, with two shadow policies; then
// `compactd eval`'s runner replays the same conversation with the same
// policies, config and window. Every shadow figure /v1/status shows —
// tokens, the cost under each cost model's prompt cache (the input side),
// identifiers and task kept — is the eval's, and the live pipeline (which
// the window never made compact) is the eval's baseline.
func TestProxyShadowMatchesEval(t *testing.T) {
	t.Parallel()
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conv := convs[0]
	tok := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	window := 2 * (tok.CountMessages(conv.Chat.Messages) + tokens.ReplyPrimingTokens) // the live pipeline is never due
	up := upstreamtest.New()
	t.Cleanup(up.Close)
	cfg := fmt.Sprintf("policy: sliding\ncompact: {token_threshold: 1000, retention_window: 4}\n"+
		"proxy: {openai: {upstream: '%s'}, context_window: %d, shadow: [deterministic, 'toolresult,sliding']}\n", up.OpenAIBase(), window)
	td := startDaemon(t, cfg, "plugins/sliding", "plugins/deterministic", "plugins/toolresult")

	turns := eval.Turns(conv.Chat)
	if len(turns) < 10 {
		t.Fatalf("the fixture's first conversation has %d requests: too few to measure", len(turns))
	}
	id := map[string]string{proxy.HeaderConversation: conv.ID}
	for _, at := range turns {
		resp, body := td.post(t, proxy.RouteOpenAI, openAIBody(conv.Chat.Raw[:at], ""), id)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" {
			t.Fatalf("request of %d messages: %d %v %s", at, resp.StatusCode, resp.Header, body)
		}
	}
	px := td.server.opts.Proxy
	want := uint64(2 * len(turns))
	waitFor(t, "the shadow runs", 5*time.Minute, func() bool { st := px.ShadowStats(); return st.Runs == want && st.InFlight == 0 })

	got, err := td.c.Conversation(bg, conv.ID)
	if err != nil {
		t.Fatal(err)
	}
	sh := got.Shadow
	if sh == nil || len(sh.Pipelines) != 2 || len(sh.CostModels) < 2 {
		t.Fatalf("/v1/status shadow: %+v", sh)
	}

	rep, err := eval.Run(bg, eval.Options{
		Policies: td.server.opts.Registry, Config: td.cfg, Model: "gpt-4o", ContextWindow: window,
		CacheBreakpoints: true, MaxConversations: 1, Workers: 1,
		Specs: []eval.Spec{{Pipeline: []string{"deterministic"}}, {Pipeline: []string{"toolresult", "sliding"}}},
	}, []string{path})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.CostModels) != len(sh.CostModels) {
		t.Fatalf("eval prices under %d models, the shadows under %d", len(rep.CostModels), len(sh.CostModels))
	}
	for k, cm := range rep.CostModels {
		if sh.CostModels[k].Model != cm.Model || sh.CostModels[k].Cache != cm.Cache {
			t.Fatalf("cost model %d: eval %s (%s), shadow %+v", k, cm.Model, cm.Cache, sh.CostModels[k])
		}
	}
	// evalFigures sums a policy's replay of the conversation the way the
	// shadow figures are summed: the input side of each bill.
	evalFigures := func(name string) (client.ShadowFigures, int) {
		for _, pr := range rep.Files[0].Policies {
			if pr.Policy != name {
				continue
			}
			var f client.ShadowFigures
			f.CostsUSD = make([]float64, len(rep.CostModels))
			compacted := 0
			for _, tn := range pr.Conversations[0].Turns {
				f.Requests++
				f.TokensSent += tn.Tokens
				f.Probes += tn.Probes
				f.ProbesKept += tn.ProbesKept
				if tn.TaskKept != nil && *tn.TaskKept {
					f.TaskKept++
				}
				if tn.Compacted {
					compacted++
				}
				for k, u := range tn.Bills {
					u.Output = 0
					f.CostsUSD[k] += rep.CostModels[k].Price.Cost(u)
				}
			}
			return f, compacted
		}
		t.Fatalf("the eval report has no %s", name)
		return client.ShadowFigures{}, 0
	}
	same := func(what string, shadow, ev client.ShadowFigures) {
		t.Helper()
		if shadow.Requests != ev.Requests || shadow.TokensSent != ev.TokensSent || shadow.Probes != ev.Probes ||
			shadow.ProbesKept != ev.ProbesKept || shadow.TaskKept != ev.TaskKept {
			t.Errorf("%s: shadow %+v, eval %+v", what, shadow, ev)
		}
		for k := range ev.CostsUSD {
			if math.Abs(shadow.CostsUSD[k]-ev.CostsUSD[k]) > 1e-9 {
				t.Errorf("%s under %s: shadow $%.6f, eval $%.6f", what, rep.CostModels[k].Model, shadow.CostsUSD[k], ev.CostsUSD[k])
			}
		}
	}
	base, _ := evalFigures(eval.Baseline)
	same("full", sh.Full, base)
	same("live (never compacted)", sh.Live, base)
	for _, p := range sh.Pipelines {
		ev, compacted := evalFigures(p.Pipeline)
		same(p.Pipeline, p.ShadowFigures, ev)
		if p.Compacted != compacted || compacted == 0 || p.Failed != 0 || p.Dropped != 0 {
			t.Errorf("%s: compacted %d of %d requests (eval: %d), failed %d, dropped %d", p.Pipeline, p.Compacted, p.Requests, compacted, p.Failed, p.Dropped)
		}
		if p.TokensSent >= sh.Full.TokensSent {
			t.Errorf("%s sent %d tokens, sending everything %d", p.Pipeline, p.TokensSent, sh.Full.TokensSent)
		}
	}
	st, err := td.c.Status(bg, 10)
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Shadow == nil || len(st.Totals.Shadow.Pipelines) != 2 || st.Totals.Shadow.Full.TokensSent != sh.Full.TokensSent {
		t.Errorf("/v1/status totals: %+v", st.Totals.Shadow)
	}

	// The status page shows the same figures side by side, in the totals
	// and on the conversation's page.
	pageWant := func(key string, sh *client.Shadow) map[string]string {
		want := map[string]string{key + ":shadow:requests": formatInt(sh.Live.Requests)}
		add := func(name string, f client.ShadowFigures) {
			k := key + ":shadow:" + name
			want[k+":tokens_sent"] = formatInt(f.TokensSent)
			want[k+":tokens_ratio"] = ratio(float64(f.TokensSent), float64(sh.Full.TokensSent))
			want[k+":task_kept"] = formatInt(f.TaskKept)
			for i, c := range f.CostsUSD {
				want[fmt.Sprintf("%s:cost:%d", k, i)] = formatUSD(c)
				want[fmt.Sprintf("%s:cost_ratio:%d", k, i)] = ratio(c, sh.Full.CostsUSD[i])
			}
		}
		add("live", sh.Live)
		add("full", sh.Full)
		for _, p := range sh.Pipelines {
			add(p.Pipeline, p.ShadowFigures)
			want[key+":shadow:"+p.Pipeline+":compacted"] = formatInt(p.Compacted)
			want[key+":shadow:"+p.Pipeline+":dropped"] = formatInt(p.Dropped)
		}
		return want
	}
	code, page, _ := td.raw(t, http.MethodGet, "/", "")
	if code != http.StatusOK {
		t.Fatalf("the status page: %d", code)
	}
	compare(t, "the status page", shown(string(page)), pageWant("totals", st.Totals.Shadow))
	code, page, _ = td.raw(t, http.MethodGet, "/conversation?id="+url.QueryEscape(conv.ID), "")
	if code != http.StatusOK {
		t.Fatalf("the conversation's page: %d", code)
	}
	compare(t, "the conversation's page", shown(string(page)), pageWant("conv:"+conv.ID, sh))
}
