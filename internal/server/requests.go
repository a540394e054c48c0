package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/models"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/wire/formats"
	"github.com/hashicorp/go-hclog"
)

// Listing bounds of GET /v1/requests.
const (
	defaultRequestsLimit = 50
	maxRequestsLimit     = 1000
)

// maxModelLabels bounds the distinct model names /metrics labels: the
// model comes from the client, so past this many the rest count as
// "other" rather than growing the scrape without bound.
const maxModelLabels = 100

// upstreamMetrics are the per-model upstream instruments.
type upstreamMetrics struct {
	requests, input, cached, output *counterVec // provider, model
	costPaid, costFull              *floatCounterVec
	latency, firstByte              *histogramVec // provider
	mu                              sync.Mutex
	models                          map[string]bool
}

func newUpstreamMetrics() *upstreamMetrics {
	return &upstreamMetrics{
		requests:  newCounterVec("compactd_upstream_requests_total", "Proxied requests answered by the upstream, by provider, model and HTTP status class.", "provider", "model", "status"),
		input:     newCounterVec("compactd_upstream_input_tokens_total", "Input tokens the upstream reported (cached ones included).", "provider", "model"),
		cached:    newCounterVec("compactd_upstream_cached_tokens_total", "Input tokens the upstream served from its prompt cache.", "provider", "model"),
		output:    newCounterVec("compactd_upstream_output_tokens_total", "Output tokens the upstream reported.", "provider", "model"),
		costPaid:  newFloatCounterVec("compactd_upstream_cost_dollars_total", "What the upstream usage cost at the models.dev catalog's prices (priced models only).", "provider", "model"),
		costFull:  newFloatCounterVec("compactd_upstream_uncompacted_cost_dollars_total", "What the same requests would have cost with nothing compacted away.", "provider", "model"),
		latency:   newHistogramVec("compactd_upstream_duration_seconds", "Time from sending a proxied request upstream to the end of its answer (compactd's own time is compactd_request_overhead_seconds).", latencyBuckets, "provider"),
		firstByte: newHistogramVec("compactd_upstream_first_byte_seconds", "Time from sending a proxied request upstream to its answer's headers.", latencyBuckets, "provider"),
		models:    map[string]bool{},
	}
}

// modelLabel is the model's label value (see maxModelLabels).
func (u *upstreamMetrics) modelLabel(model string) string {
	model = models.Normalize(model)
	if model == "" {
		return "unknown"
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.models[model] {
		return model
	}
	if len(u.models) >= maxModelLabels {
		return "other"
	}
	u.models[model] = true
	return model
}

func (u *upstreamMetrics) observe(r *requestlog.Record) {
	if r.Kind != requestlog.KindProxy || !r.Upstream {
		return
	}
	prov, model := providerOf(r.Format), u.modelLabel(r.Model)
	u.requests.add(1, prov, model, strconv.Itoa(r.Status/100)+"xx")
	if r.Usage != nil {
		u.input.add(uint64(r.Usage.InputTokens), prov, model)
		u.cached.add(uint64(r.Usage.CachedTokens), prov, model)
		u.output.add(uint64(r.Usage.OutputTokens), prov, model)
	}
	if r.CostUSD != nil {
		u.costPaid.add(*r.CostUSD, prov, model)
		u.costFull.add(*r.FullCostUSD, prov, model)
	}
	u.latency.observe(r.UpstreamMS/1000, prov)
	if r.FirstByteMS > 0 {
		u.firstByte.observe(r.FirstByteMS/1000, prov)
	}
}

func (u *upstreamMetrics) write(b *bytes.Buffer) {
	u.requests.write(b)
	u.input.write(b)
	u.cached.write(b)
	u.output.write(b)
	u.costPaid.write(b)
	u.costFull.write(b)
	u.latency.write(b)
	u.firstByte.write(b)
}

// providerOf names the provider of a wire format (the Responses API is
// OpenAI's); an unknown name is its own.
func providerOf(format string) string {
	if f, ok := formats.Lookup(format); ok {
		return f.Provider()
	}
	return format
}

// logRequest records a request in the log, the metrics and (compactd's
// own time) the overhead histogram.
func (s *Server) logRequest(r requestlog.Record) {
	s.upstream.observe(&r)
	s.overhead.observe(r.CompactdMS/1000, r.Kind)
	if s.opts.Requests != nil {
		s.opts.Requests.Add(r)
	}
}

// Money is what a listing's requests cost: paid, and what sending
// everything (nothing compacted away) would have cost.
type Money struct {
	PaidUSD float64 `json:"paid_usd"`
	FullUSD float64 `json:"full_usd"`
	// Priced counts the requests with a price; Unpriced those with usage
	// but a model the catalog does not price (UnpricedModels).
	Priced         int      `json:"priced"`
	Unpriced       int      `json:"unpriced"`
	UnpricedModels []string `json:"unpriced_models,omitempty"`
}

func moneyOf(recs []requestlog.Record) Money {
	var m Money
	seen := map[string]bool{}
	for _, r := range recs {
		switch {
		case r.CostUSD != nil:
			m.Priced++
			m.PaidUSD += *r.CostUSD
			m.FullUSD += *r.FullCostUSD
		case r.Usage != nil:
			m.Unpriced++
			if !seen[r.Model] && len(m.UnpricedModels) < 20 {
				seen[r.Model] = true
				m.UnpricedModels = append(m.UnpricedModels, r.Model)
			}
		}
	}
	return m
}

// requestsPage is GET /v1/requests's answer.
type requestsPage struct {
	requestlog.Page
	// Money sums the page's requests.
	Money Money `json:"money"`
}

// handleRequests serves GET /v1/requests?conversation=ID&limit=N&cursor=C.
func (s *Server) handleRequests(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Requests == nil {
		return apiErrorf(http.StatusNotFound, CodeNotFound, "the request log is off")
	}
	q := r.URL.Query()
	limit := defaultRequestsLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxRequestsLimit {
			return apiErrorf(http.StatusBadRequest, CodeBadRequest, "limit=%q: want an integer from 1 to %d", v, maxRequestsLimit)
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	page, err := s.opts.Requests.List(ctx, q.Get("conversation"), limit, q.Get("cursor"))
	if err != nil {
		return apiErrorf(http.StatusBadRequest, CodeBadRequest, "%v", err)
	}
	writeJSON(w, http.StatusOK, requestsPage{Page: page, Money: moneyOf(page.Requests)})
	return nil
}

// floatCounterVec is a counter of float values with labels (dollars).
type floatCounterVec struct {
	name, help string
	labels     []string
	mu         sync.Mutex
	values     map[string]float64
}

func newFloatCounterVec(name, help string, labels ...string) *floatCounterVec {
	return &floatCounterVec{name: name, help: help, labels: labels, values: map[string]float64{}}
}

func (c *floatCounterVec) add(v float64, values ...string) {
	key := strings.Join(values, labelSep)
	c.mu.Lock()
	c.values[key] += v
	c.mu.Unlock()
}

func (c *floatCounterVec) write(w io.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", c.name, c.help, c.name)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range sortedKeys(c.values) {
		fmt.Fprintf(w, "%s%s %s\n", c.name, labelString(c.labels, k, "", ""), formatFloat(c.values[k]))
	}
}

// openRequestLog opens the request log the config describes: in memory,
// copied to the store (bounded like its conversations, with its TTL), and
// to the access file if one is set.
func openRequestLog(cfg *config.Config, st store.Backend, flush time.Duration, logger hclog.Logger) (*requestlog.Log, error) {
	lc := cfg.Log
	opts := requestlog.Options{Max: lc.Requests, PerConversation: lc.RequestsPerConversation, Store: st,
		MaxConversations: cfg.State.MaxConversations, TTL: cfg.State.TTL.D(), FlushInterval: flush, Logger: logger}
	if lc.AccessFile != "" {
		f, err := requestlog.OpenFile(lc.AccessFile, lc.AccessMaxBytes, lc.AccessKeep)
		if err != nil {
			return nil, fmt.Errorf("log.access_file: %w", err)
		}
		opts.File = f
	}
	l, err := requestlog.New(opts)
	if err != nil {
		if opts.File != nil {
			opts.File.Close()
		}
		return nil, err
	}
	return l, nil
}

// fillCompactRecord fills a /v1/compact request's record from its
// compaction.
func fillCompactRecord(r *requestlog.Record, resp *compactor.Response, pipeline []string, window int) {
	st := resp.Stats
	r.ConversationID, r.Pipeline, r.Compacted = resp.ConversationID, pipeline, resp.Compacted
	r.TokensBefore, r.TokensAfter = st.TokensBefore, st.TokensAfter
	if window <= 0 {
		window = models.ContextWindow(r.Model)
	}
	r.ContextWindow = window
	if !resp.Compacted {
		r.NotCompacted = proxy.NotCompactedPolicyKept
	}
	r.Warnings = resp.Warnings
}

// logCompact records a /v1/compact request once it is answered (err: the
// error it was answered with).
func (s *Server) logCompact(r *requestlog.Record, err error) {
	r.Status = http.StatusOK
	if err != nil {
		r.Status = toAPIError(err).Status
		r.NotCompacted, r.Compacted = proxy.NotCompactedError, false
	}
	if r.Format == "" {
		r.Format = formats.Default
	}
	r.CompactdMS = float64(time.Since(r.Time).Microseconds()) / 1000
	s.logRequest(*r)
}
