package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/eval"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wire"
)

// Shadow policies (proxy.shadow) run beside the live pipeline on every
// proxied request, off the request path: the request hands its
// conversation to a bounded pool after the live filter decided, and the
// shadow's result is only measured, never forwarded.
//
// Each request is measured as `compactd eval` measures a replayed one
// (internal/eval): what the live pipeline forwarded, what sending every
// message would have sent ("full"), and what each shadow would have sent
// are each counted, billed under the eval's cost models with their prompt
// caches (each against the same way's previous request of the
// conversation: eval.Biller), and probed for the identifiers of the
// history (eval.ProbeSet) and the task. A conversation's requests go to
// one worker, in order, so each way's cache prefix is the one it would
// have had.
//
// Each shadow run gets the host's decision the live one got: when the
// live pipeline was due (usage, pre-flight or trigger_tokens), the shadow
// is told to compact with the same reason and target; when it was not,
// the shadow runs with no decision, as a direct /v1/compact call (and
// `compactd eval`) would, so its own threshold decides.

// ShadowFigures are what one way of sending a conversation's requests
// sent, summed over the requests measured.
type ShadowFigures struct {
	// Requests measured.
	Requests int `json:"requests"`
	// TokensSent sums the requests' tokens as `compactd eval` counts them
	// (the messages', without reply priming).
	TokensSent int `json:"tokens_sent"`
	// CostsUSD is the requests' input side priced under each cost model
	// with its prompt cache, in the order of Proxy.ShadowCostModels.
	CostsUSD []float64 `json:"costs_usd"`
	// Probes are identifiers of the requests' histories looked for;
	// ProbesKept were still in what was sent. TaskKept counts the
	// requests that still held the task.
	Probes     int `json:"probes"`
	ProbesKept int `json:"probes_kept"`
	TaskKept   int `json:"task_kept"`
}

func (f *ShadowFigures) add(o ShadowFigures) {
	f.Requests += o.Requests
	f.TokensSent += o.TokensSent
	f.Probes += o.Probes
	f.ProbesKept += o.ProbesKept
	f.TaskKept += o.TaskKept
	if len(f.CostsUSD) < len(o.CostsUSD) {
		f.CostsUSD = append(f.CostsUSD, make([]float64, len(o.CostsUSD)-len(f.CostsUSD))...)
	}
	for i, c := range o.CostsUSD {
		f.CostsUSD[i] += c
	}
}

func (f ShadowFigures) clone() ShadowFigures {
	f.CostsUSD = append([]float64(nil), f.CostsUSD...)
	return f
}

// ShadowResult is one shadow pipeline's figures for a conversation.
type ShadowResult struct {
	// Pipeline is the shadow's policies, joined by ",".
	Pipeline string `json:"pipeline"`
	ShadowFigures
	// Compacted runs shortened the conversation; Failed runs ended in an
	// error (the request is measured as sent uncompacted, as the proxy
	// forwards it when compaction fails); Dropped requests were not
	// measured because the pool's queue was full.
	Compacted int `json:"compacted"`
	Failed    int `json:"failed"`
	Dropped   int `json:"dropped"`
}

// ShadowComparison is a conversation's (or all conversations') live and
// shadow figures, over the same requests.
type ShadowComparison struct {
	// Live is what the live pipeline forwarded, Full what sending every
	// message would have sent.
	Live, Full ShadowFigures
	// Pipelines are the shadows', by pipeline.
	Pipelines []ShadowResult
}

// ShadowCostModel is a model the shadow figures are priced under.
type ShadowCostModel struct {
	// Name is the model; Cache its prompt cache's rules (eval's Cache*
	// modes: "automatic", "breakpoints").
	Name, Cache string
}

// ShadowStats counts the shadow pool (GET /metrics, /v1/status).
type ShadowStats struct {
	// Runs finished, Dropped for a full queue, Failed runs (per shadow
	// pipeline).
	Runs, Dropped, Failed uint64
	// InFlight requests queued or being measured.
	InFlight int
}

// maxShadowConversations bounds the conversations whose shadow figures
// are held; past it an arbitrary other conversation's are forgotten.
const maxShadowConversations = 10_000

// shadowJob is one request's conversation, for every shadow pipeline.
type shadowJob struct {
	id, model string
	prov      wire.Format
	system    json.RawMessage
	messages  []json.RawMessage
	// live is what the live pipeline forwarded when it compacted, with
	// the policies' cache breakpoints (liveMarks); nil: the request as it
	// came. forwarded is the body forwarded when live could not be kept
	// (a prepared compaction): it is read back.
	live       *chat.Conversation
	liveMarks  []int
	forwarded  []byte
	pipelines  [][]string
	decision   *abi.Decision
	summarizer string
	window     int
	timeout    time.Duration
}

// shadowPrev is where each way of sending a conversation left its
// previous request (a nil Sent: the first).
type shadowPrev struct {
	live, full *eval.Sent
	pipelines  []*eval.Sent // in shadowJob.pipelines' order
}

// shadowMeasure is one way's figures for one request.
type shadowMeasure struct {
	figures ShadowFigures
	sent    *eval.Sent
}

// shadowOutcome is one request's measures.
type shadowOutcome struct {
	live, full shadowMeasure
	pipelines  []pipelineMeasure // in shadowJob.pipelines' order
}

type pipelineMeasure struct {
	shadowMeasure
	compacted, failed bool
}

// shadowWay is one way's running figures and its previous request.
type shadowWay struct {
	figures ShadowFigures
	sent    *eval.Sent
}

// shadowConv is one conversation's shadow figures.
type shadowConv struct {
	live, full shadowWay
	pipelines  map[string]*shadowPipeline
}

type shadowPipeline struct {
	shadowWay
	compacted, failed, dropped int
}

// shadowRunner measures one request; err means its conversation could
// not be read (no way is measured).
type shadowRunner func(context.Context, shadowJob, shadowPrev) (shadowOutcome, error)

// shadower measures the shadow jobs on a bounded pool: one queue per
// worker, a conversation's jobs always on the same worker.
type shadower struct {
	ctx    context.Context
	cancel context.CancelFunc
	queues []chan shadowJob
	seed   maphash.Seed
	wg     sync.WaitGroup
	run    shadowRunner

	mu       sync.Mutex
	byConv   map[string]*shadowConv
	maxConvs int // past it, another conversation's figures are forgotten

	runs, dropped, failed atomic.Uint64
	inflight              atomic.Int64
}

// newShadower starts workers that share a queue of queue entries, split
// between them (0: a job is accepted only when its worker is idle).
func newShadower(workers, queue int, run shadowRunner) *shadower {
	workers = max(workers, 1)
	ctx, cancel := context.WithCancel(context.Background())
	s := &shadower{ctx: ctx, cancel: cancel, run: run, seed: maphash.MakeSeed(),
		byConv: map[string]*shadowConv{}, maxConvs: maxShadowConversations}
	per := (max(queue, 0) + workers - 1) / workers
	for range workers {
		q := make(chan shadowJob, per)
		s.queues = append(s.queues, q)
		s.wg.Add(1)
		go s.work(q)
	}
	return s
}

func (s *shadower) work(q chan shadowJob) {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case j := <-q:
			s.do(j)
		}
	}
}

func (s *shadower) do(j shadowJob) {
	defer s.inflight.Add(-1)
	if s.ctx.Err() != nil {
		return
	}
	keys := make([]string, len(j.pipelines))
	for i, pl := range j.pipelines {
		keys[i] = strings.Join(pl, ",")
	}
	s.mu.Lock()
	c := s.conv(j.id)
	prev := shadowPrev{live: c.live.sent, full: c.full.sent, pipelines: make([]*eval.Sent, len(keys))}
	for i, k := range keys {
		prev.pipelines[i] = c.pipeline(k).sent
	}
	s.mu.Unlock()

	out, err := s.run(s.ctx, j, prev)
	if s.ctx.Err() != nil {
		return // cancelled at shutdown: not a result
	}
	s.runs.Add(uint64(len(keys)))

	s.mu.Lock()
	defer s.mu.Unlock()
	c = s.conv(j.id)
	if err != nil {
		for _, k := range keys {
			c.pipeline(k).failed++
		}
		s.failed.Add(uint64(len(keys)))
		return
	}
	c.live.take(out.live)
	c.full.take(out.full)
	for i, k := range keys {
		if i >= len(out.pipelines) {
			break
		}
		m, sp := out.pipelines[i], c.pipeline(k)
		sp.take(m.shadowMeasure)
		if m.compacted {
			sp.compacted++
		}
		if m.failed {
			sp.failed++
			s.failed.Add(1)
		}
	}
}

func (w *shadowWay) take(m shadowMeasure) {
	w.figures.add(m.figures)
	w.sent = m.sent
}

// conv returns the conversation's figures, made if new (s.mu held).
func (s *shadower) conv(id string) *shadowConv {
	c := s.byConv[id]
	if c != nil {
		return c
	}
	for other := range s.byConv {
		if len(s.byConv) < s.maxConvs {
			break
		}
		delete(s.byConv, other)
	}
	c = &shadowConv{pipelines: map[string]*shadowPipeline{}}
	s.byConv[id] = c
	return c
}

// pipeline returns the pipeline's figures in c, made if new (s.mu held).
func (c *shadowConv) pipeline(key string) *shadowPipeline {
	p := c.pipelines[key]
	if p == nil {
		p = &shadowPipeline{}
		c.pipelines[key] = p
	}
	return p
}

// submit queues a job on its conversation's worker; it never blocks:
// with that queue full the job is dropped and counted.
func (s *shadower) submit(j shadowJob) bool {
	if s.ctx.Err() != nil {
		return false
	}
	s.inflight.Add(1)
	q := s.queues[maphash.String(s.seed, j.id)%uint64(len(s.queues))]
	select {
	case q <- j:
		return true
	default:
		s.inflight.Add(-1)
		s.dropped.Add(uint64(len(j.pipelines)))
		s.mu.Lock()
		c := s.conv(j.id)
		for _, pl := range j.pipelines {
			c.pipeline(strings.Join(pl, ",")).dropped++
		}
		s.mu.Unlock()
		return false
	}
}

// close cancels the queued and running shadow runs and waits for the
// workers to end.
func (s *shadower) close() {
	s.cancel()
	s.wg.Wait()
	for _, q := range s.queues {
	drain:
		for {
			select {
			case <-q:
				s.inflight.Add(-1)
			default:
				break drain
			}
		}
	}
}

func (s *shadower) stats() ShadowStats {
	return ShadowStats{Runs: s.runs.Load(), Dropped: s.dropped.Load(), Failed: s.failed.Load(), InFlight: int(s.inflight.Load())}
}

// comparison returns c's figures (s.mu held).
func (c *shadowConv) comparison() ShadowComparison {
	out := ShadowComparison{Live: c.live.figures.clone(), Full: c.full.figures.clone(), Pipelines: make([]ShadowResult, 0, len(c.pipelines))}
	for k, p := range c.pipelines {
		out.Pipelines = append(out.Pipelines, ShadowResult{Pipeline: k, ShadowFigures: p.figures.clone(),
			Compacted: p.compacted, Failed: p.failed, Dropped: p.dropped})
	}
	sort.Slice(out.Pipelines, func(i, k int) bool { return out.Pipelines[i].Pipeline < out.Pipelines[k].Pipeline })
	return out
}

// ShadowStats returns the shadow pool's counts.
func (p *Proxy) ShadowStats() ShadowStats { return p.shadow.stats() }

// ShadowCostModels returns the models the shadow figures' CostsUSD are
// priced under, in their order.
func (p *Proxy) ShadowCostModels() []ShadowCostModel {
	if p.biller == nil {
		return nil
	}
	var out []ShadowCostModel
	for _, m := range p.biller.Models() {
		out = append(out, ShadowCostModel{Name: m.Name, Cache: m.Rules.Mode})
	}
	return out
}

// ShadowResults returns a conversation's live and shadow figures; ok is
// false when no request of it was shadowed (proxy.shadow empty, or the
// conversation unknown or forgotten).
func (p *Proxy) ShadowResults(conversation string) (ShadowComparison, bool) {
	s := p.shadow
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.byConv[conversation]
	if c == nil {
		return ShadowComparison{}, false
	}
	return c.comparison(), true
}

// ShadowTotals returns the live and shadow figures summed over the
// conversations held; ok is false when there are none.
func (p *Proxy) ShadowTotals() (ShadowComparison, bool) {
	s := p.shadow
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byConv) == 0 {
		return ShadowComparison{}, false
	}
	var out ShadowComparison
	sum := map[string]*ShadowResult{}
	for _, c := range s.byConv {
		out.Live.add(c.live.figures)
		out.Full.add(c.full.figures)
		for k, sp := range c.pipelines {
			t := sum[k]
			if t == nil {
				t = &ShadowResult{Pipeline: k}
				sum[k] = t
			}
			t.add(sp.figures)
			t.Compacted += sp.compacted
			t.Failed += sp.failed
			t.Dropped += sp.dropped
		}
	}
	for _, r := range sum {
		out.Pipelines = append(out.Pipelines, *r)
	}
	sort.Slice(out.Pipelines, func(i, k int) bool { return out.Pipelines[i].Pipeline < out.Pipelines[k].Pipeline })
	return out, true
}

// runShadow measures one request: the live forward, the full request,
// and each shadow pipeline's compaction of it.
func (p *Proxy) runShadow(ctx context.Context, j shadowJob, prev shadowPrev) (shadowOutcome, error) {
	wc, err := j.prov.Convert(j.system, j.messages)
	if err != nil {
		return shadowOutcome{}, fmt.Errorf("shadow: the conversation: %w", err)
	}
	in := wc.Chat()
	live, liveMarks := j.live, j.liveMarks
	if live != nil {
		// The live compaction's result is the request's too (its detail
		// record may still read it): bill a copy, whose messages' token
		// counts the biller may fill in.
		c := *live
		c.Messages = slices.Clone(live.Messages)
		live = &c
	}
	if live == nil && j.forwarded != nil {
		live, err = p.readForwarded(j)
		if err != nil {
			return shadowOutcome{}, err
		}
	}
	if live == nil {
		live = in
	}
	tok := p.opts.Tokens.ForModel(j.model)
	ps := eval.NewProbeSet(in.Messages, j.id, eval.ProbeOptions{})
	probes := ps.Draw(in.Len())
	measure := func(prev *eval.Sent, out *chat.Conversation, marks []int) shadowMeasure {
		bill, sent := p.biller.Bill(tok, prev, out, marks, nil)
		f := ShadowFigures{Requests: 1, CostsUSD: p.biller.Costs(bill)}
		for i := range out.Messages {
			f.TokensSent += out.Messages[i].Tokens
		}
		ret := ps.Retain(probes, out.Messages)
		f.Probes, f.ProbesKept = ret.Probes, ret.Retained
		if k := eval.TaskKept(in, out); k != nil && *k {
			f.TaskKept = 1
		}
		return shadowMeasure{figures: f, sent: sent}
	}
	out := shadowOutcome{full: measure(prev.full, in, nil)}
	if live == in {
		out.live = shadowMeasure{figures: out.full.figures.clone(), sent: out.full.sent}
		if prev.live != prev.full {
			out.live = measure(prev.live, in, nil)
		}
	} else {
		out.live = measure(prev.live, live, liveMarks)
	}
	for i, pl := range j.pipelines {
		if err := ctx.Err(); err != nil {
			return shadowOutcome{}, err
		}
		resp, err := p.compactShadow(ctx, j, in, pl)
		var m pipelineMeasure
		switch {
		case err != nil:
			p.logger.Debug("proxy: shadow run failed", "conversation", j.id, "pipeline", strings.Join(pl, ","), "error", err)
			m.failed = true
			m.shadowMeasure = measure(prev.pipelines[i], in, nil)
		default:
			// Measured as eval measures it: the policies' cache
			// breakpoints count even on a request they kept.
			sent := resp.Conversation
			if sent == nil {
				sent = in
			}
			m.compacted = resp.Compacted
			m.shadowMeasure = measure(prev.pipelines[i], sent, resp.CacheBreakpoints)
		}
		out.pipelines = append(out.pipelines, m)
	}
	return out, nil
}

// compactShadow compacts the request's conversation with one shadow
// pipeline, under its own state.
func (p *Proxy) compactShadow(ctx context.Context, j shadowJob, in *chat.Conversation, pipeline []string) (*compactor.Response, error) {
	if j.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, j.timeout)
		defer cancel()
	}
	var d *abi.Decision
	if j.decision != nil {
		c := *j.decision
		d = &c
	}
	return p.opts.Compactor.Compact(ctx, compactor.Request{
		Conversation: in, Pipeline: pipeline, Model: j.model, ConversationID: shadowStateID(j.id, pipeline),
		ContextWindow: j.window, SummarizerModel: j.summarizer, Decision: d,
	})
}

// readForwarded reads the live conversation back from the body forwarded.
func (p *Proxy) readForwarded(j shadowJob) (*chat.Conversation, error) {
	req, err := parseRequest(j.forwarded, j.prov)
	if err != nil {
		return nil, fmt.Errorf("shadow: the forwarded request: %w", err)
	}
	wc, err := j.prov.Convert(req.system, req.messages)
	if err != nil {
		return nil, fmt.Errorf("shadow: the forwarded conversation: %w", err)
	}
	return wc.Chat(), nil
}

// shadowRequest hands the request's conversation to the shadow pool. It
// runs after the live filter, whose decision (nil when the live pipeline
// was not due) and forwarded body it passes on.
func (x *exchange) shadowRequest(req *request, cfg *config.Config, decision *abi.Decision, forwarded []byte) {
	if len(cfg.Proxy.Shadow) == 0 || req == nil || x.p.biller == nil {
		return
	}
	j := shadowJob{id: x.id, model: req.model, prov: x.prov, system: req.system, messages: req.messages,
		pipelines: cfg.Proxy.ShadowPipelines(), decision: decision, summarizer: cfg.LLMModel(),
		window: cfg.Proxy.ContextWindow, timeout: cfg.Limits.RequestTimeout.D()}
	if x.compacted {
		if c := x.compaction; c != nil && !x.fromPrepared && c.Response != nil {
			j.live, j.liveMarks = c.Response.Conversation, c.Response.CacheBreakpoints
		} else {
			j.forwarded = forwarded
		}
	}
	x.p.shadow.submit(j)
}

// shadowStateID is the conversation id a shadow pipeline's policies keep
// their state under: the conversation's, set apart per shadow pipeline,
// so that a shadow never reads or writes the live pipeline's state (nor
// another shadow's), even when it runs the same policy.
func shadowStateID(id string, pipeline []string) string {
	return id + "\x1fshadow:" + strings.Join(pipeline, ",")
}

// newShadowBiller is the eval's biller over its default pricing table's
// comparison models (nil, logged, if the table cannot be read: shadows
// are then not measured).
func newShadowBiller(counter *tokens.Counter) (*eval.Biller, error) {
	pr, err := eval.LoadPricing("default")
	if err != nil {
		return nil, err
	}
	return eval.NewBiller(pr, nil, counter)
}
