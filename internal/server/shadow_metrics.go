package server

import (
	"io"

	"github.com/compactd/compactd/internal/proxy"
)

// writeShadowMetrics writes the proxy's shadow policy counts
// (proxy.shadow; docs/proxy.md, "Shadow policies").
func writeShadowMetrics(w io.Writer, st proxy.ShadowStats, totals []proxy.ShadowResult) {
	runs := newCounterVec("compactd_proxy_shadow_runs_total", "Shadow policy runs on proxied requests, by shadow pipeline and outcome: ran (finished), compacted (of those, shortened the conversation), failed, dropped (not started: proxy.shadow_queue was full). Their results are never forwarded.", "pipeline", "outcome")
	tok := newCounterVec("compactd_proxy_shadow_tokens_total", "Tokens of the requests shadow pipelines ran on, by shadow pipeline and side: shadow (what the shadow would have sent), live (what the live pipeline forwarded).", "pipeline", "side")
	for _, r := range totals {
		runs.add(uint64(r.Requests), r.Pipeline, "ran")
		runs.add(uint64(r.Compacted), r.Pipeline, "compacted")
		runs.add(uint64(r.Failed), r.Pipeline, "failed")
		runs.add(uint64(r.Dropped), r.Pipeline, "dropped")
		tok.add(uint64(r.TokensSent), r.Pipeline, "shadow")
		tok.add(uint64(r.LiveTokens), r.Pipeline, "live")
	}
	runs.write(w)
	tok.write(w)
	writeGauge(w, "compactd_proxy_shadow_in_flight", "Shadow policy runs queued or running.", float64(st.InFlight))
}
