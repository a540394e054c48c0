package server

import (
	"io"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/proxy"
)

// shadowOf returns a conversation's shadow figures for /v1/status (nil:
// no shadow ran on it here).
func (s *Server) shadowOf(id string) *client.Shadow {
	if s.opts.Proxy == nil {
		return nil
	}
	sc, ok := s.opts.Proxy.ShadowResults(id)
	if !ok {
		return nil
	}
	return shadowStatus(s.opts.Proxy.ShadowCostModels(), sc)
}

// shadowStatus is a shadow comparison in the API's shape.
func shadowStatus(models []proxy.ShadowCostModel, sc proxy.ShadowComparison) *client.Shadow {
	out := &client.Shadow{CostModels: make([]client.ShadowCostModel, len(models)),
		Live: shadowFigures(sc.Live, len(models)), Full: shadowFigures(sc.Full, len(models)),
		Pipelines: make([]client.ShadowPipeline, len(sc.Pipelines))}
	for i, m := range models {
		out.CostModels[i] = client.ShadowCostModel{Model: m.Name, Cache: m.Cache}
	}
	for i, r := range sc.Pipelines {
		out.Pipelines[i] = client.ShadowPipeline{Pipeline: r.Pipeline, ShadowFigures: shadowFigures(r.ShadowFigures, len(models)),
			Compacted: r.Compacted, Failed: r.Failed, Dropped: r.Dropped}
	}
	return out
}

// shadowFigures converts figures, with one cost per model (0 where none
// was measured).
func shadowFigures(f proxy.ShadowFigures, models int) client.ShadowFigures {
	costs := make([]float64, models)
	copy(costs, f.CostsUSD)
	return client.ShadowFigures{Requests: f.Requests, TokensSent: f.TokensSent, CostsUSD: costs,
		Probes: f.Probes, ProbesKept: f.ProbesKept, TaskKept: f.TaskKept}
}

// writeShadowMetrics writes the proxy's shadow policy counts
// (proxy.shadow; docs/proxy.md, "Shadow policies").
func writeShadowMetrics(w io.Writer, st proxy.ShadowStats, totals proxy.ShadowComparison) {
	runs := newCounterVec("compactd_proxy_shadow_runs_total", "Shadow policy runs on proxied requests, by shadow pipeline and outcome: ran (measured), compacted (of those, shortened the conversation), failed, dropped (not started: proxy.shadow_queue was full). Their results are never forwarded.", "pipeline", "outcome")
	tok := newCounterVec("compactd_proxy_shadow_tokens_total", "Tokens of the requests the shadow pipelines were measured on, as compactd eval counts them, by way: live (what the live pipeline forwarded), full (every message), shadow (what the pipeline would have sent).", "way", "pipeline")
	tok.add(uint64(totals.Live.TokensSent), "live", "")
	tok.add(uint64(totals.Full.TokensSent), "full", "")
	for _, r := range totals.Pipelines {
		runs.add(uint64(r.Requests), r.Pipeline, "ran")
		runs.add(uint64(r.Compacted), r.Pipeline, "compacted")
		runs.add(uint64(r.Failed), r.Pipeline, "failed")
		runs.add(uint64(r.Dropped), r.Pipeline, "dropped")
		tok.add(uint64(r.TokensSent), "shadow", r.Pipeline)
	}
	runs.write(w)
	tok.write(w)
	writeGauge(w, "compactd_proxy_shadow_in_flight", "Requests queued for the shadow policies or being measured.", float64(st.InFlight))
}
