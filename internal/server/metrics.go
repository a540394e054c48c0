package server

import (
	"fmt"
	"github.com/compactd/compactd/internal/proxy"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The metrics are written by hand in Prometheus's text exposition format
// (version 0.0.4): compactd needs a handful of counters and histograms,
// and client_golang would add a dependency tree larger than the daemon.
// The format is stable and small; TestMetrics parses the output.

// counterVec is a counter with labels.
type counterVec struct {
	name, help string
	labels     []string
	mu         sync.Mutex
	values     map[string]*atomic.Uint64 // by joined label values
}

func newCounterVec(name, help string, labels ...string) *counterVec {
	return &counterVec{name: name, help: help, labels: labels, values: map[string]*atomic.Uint64{}}
}

// labelSep joins label values in map keys; it cannot occur in a value
// compactd sets (policy names, handler names, codes).
const labelSep = "\x00"

func (c *counterVec) add(n uint64, values ...string) {
	key := strings.Join(values, labelSep)
	c.mu.Lock()
	v, ok := c.values[key]
	if !ok {
		v = new(atomic.Uint64)
		c.values[key] = v
	}
	c.mu.Unlock()
	v.Add(n)
}

func (c *counterVec) write(w io.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", c.name, c.help, c.name)
	c.mu.Lock()
	keys := sortedKeys(c.values)
	vals := make([]uint64, len(keys))
	for i, k := range keys {
		vals[i] = c.values[k].Load()
	}
	c.mu.Unlock()
	for i, k := range keys {
		fmt.Fprintf(w, "%s%s %d\n", c.name, labelString(c.labels, k, "", ""), vals[i])
	}
}

// histogramVec is a histogram with labels.
type histogramVec struct {
	name, help string
	labels     []string
	buckets    []float64 // upper bounds, increasing; +Inf is implicit
	mu         sync.Mutex
	values     map[string]*histogram
}

type histogram struct {
	counts  []atomic.Uint64 // per bucket, not cumulative; last is +Inf
	count   atomic.Uint64
	sumBits atomic.Uint64 // float64 bits
}

func newHistogramVec(name, help string, buckets []float64, labels ...string) *histogramVec {
	return &histogramVec{name: name, help: help, labels: labels, buckets: buckets, values: map[string]*histogram{}}
}

// latencyBuckets are seconds, from 250µs to 30s.
var latencyBuckets = []float64{0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

func (h *histogramVec) observe(v float64, values ...string) {
	key := strings.Join(values, labelSep)
	h.mu.Lock()
	hist, ok := h.values[key]
	if !ok {
		hist = &histogram{counts: make([]atomic.Uint64, len(h.buckets)+1)}
		h.values[key] = hist
	}
	h.mu.Unlock()
	i := sort.SearchFloat64s(h.buckets, v) // first bound >= v
	hist.counts[i].Add(1)
	hist.count.Add(1)
	for {
		old := hist.sumBits.Load()
		if hist.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			break
		}
	}
}

func (h *histogramVec) write(w io.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", h.name, h.help, h.name)
	h.mu.Lock()
	keys := sortedKeys(h.values)
	hists := make([]*histogram, len(keys))
	for i, k := range keys {
		hists[i] = h.values[k]
	}
	h.mu.Unlock()
	for i, k := range keys {
		hist := hists[i]
		var cum uint64
		for b, bound := range h.buckets {
			cum += hist.counts[b].Load()
			fmt.Fprintf(w, "%s_bucket%s %d\n", h.name, labelString(h.labels, k, "le", formatFloat(bound)), cum)
		}
		cum += hist.counts[len(h.buckets)].Load()
		fmt.Fprintf(w, "%s_bucket%s %d\n", h.name, labelString(h.labels, k, "le", "+Inf"), cum)
		fmt.Fprintf(w, "%s_sum%s %s\n", h.name, labelString(h.labels, k, "", ""), formatFloat(math.Float64frombits(hist.sumBits.Load())))
		// The count is the +Inf bucket, read once, so the two agree.
		fmt.Fprintf(w, "%s_count%s %d\n", h.name, labelString(h.labels, k, "", ""), cum)
	}
}

// gauge writes one value computed at scrape time.
func writeGauge(w io.Writer, name, help string, v float64) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name, formatFloat(v))
}

// writeCounter writes one unlabeled counter computed at scrape time.
func writeCounter(w io.Writer, name, help string, v uint64) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
}

func labelString(names []string, joined, extraName, extraValue string) string {
	var values []string
	if len(names) > 0 {
		values = strings.Split(joined, labelSep)
	}
	if len(names) == 0 && extraName == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteString(`="`)
		b.WriteString(escapeLabel(values[i]))
		b.WriteByte('"')
	}
	if extraName != "" {
		if len(names) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(extraName + `="` + extraValue + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func formatFloat(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// metrics are the daemon's instruments.
type metrics struct {
	requests      *counterVec   // handler, code
	latency       *histogramVec // handler
	compactions   *counterVec   // policy, outcome
	stageLatency  *histogramVec // policy
	tokensSaved   *counterVec   // policy
	tokensIn      atomic.Uint64
	tokensOut     atomic.Uint64
	inflight      atomic.Int64
	configReloads *counterVec // result
}

func newMetrics() *metrics {
	return &metrics{
		requests:      newCounterVec("compactd_http_requests_total", "API requests by handler and HTTP status.", "handler", "code"),
		latency:       newHistogramVec("compactd_http_request_duration_seconds", "API request latency by handler.", latencyBuckets, "handler"),
		compactions:   newCounterVec("compactd_compactions_total", "Policy runs by policy and outcome (compacted, unchanged, skipped, failed).", "policy", "outcome"),
		stageLatency:  newHistogramVec("compactd_policy_duration_seconds", "Time one policy took on one request.", latencyBuckets, "policy"),
		tokensSaved:   newCounterVec("compactd_tokens_saved_total", "Tokens removed by each policy.", "policy"),
		configReloads: newCounterVec("compactd_config_reloads_total", "Config reloads and updates by result.", "result"),
	}
}

// writePrepareMetrics writes the proxy's background preparation counts
// (proxy.prepare_threshold; docs/proxy.md).
func writePrepareMetrics(w io.Writer, st proxy.PrepareStats) {
	c := newCounterVec("compactd_proxy_prepare_total", "Background preparations of proxied conversations' compactions, by outcome: started; used (a request at the trigger sent as the prepared compaction plus its new messages); discarded (unused: the prefix no longer matched, or replaced, or too many held); dropped (not started: proxy.prepare_queue was full); failed; missed (not ready for a request at the trigger).", "outcome")
	for _, o := range []struct {
		name string
		n    uint64
	}{{"started", st.Started}, {"used", st.Used}, {"discarded", st.Discarded}, {"dropped", st.Dropped}, {"failed", st.Failed}, {"missed", st.Missed}} {
		c.add(o.n, o.name)
	}
	c.write(w)
	writeGauge(w, "compactd_proxy_prepare_in_flight", "Background preparations queued or running.", float64(st.InFlight))
	writeGauge(w, "compactd_proxy_prepare_held", "Prepared compactions held for use at the trigger (in this process only).", float64(st.Held))
	writeGauge(w, "compactd_proxy_prepare_waiting", "Requests at the trigger waiting for their conversation's preparation (proxy.prepare_wait).", float64(st.Waiting))
}
