package proxy

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wire"
)

// Shadow policies (proxy.shadow) run beside the live pipeline on every
// proxied request, off the request path: the request hands its
// conversation to a bounded pool after the live filter decided, and the
// shadow's result is only counted, never forwarded.
//
// Each shadow run gets the host's decision the live one got: when the
// live pipeline was due (usage, pre-flight or trigger_tokens), the shadow
// is told to compact with the same reason and target; when it was not,
// the shadow runs with no decision, as a direct /v1/compact call would,
// so its own threshold decides.

// ShadowResult is one shadow pipeline's counts for one conversation.
type ShadowResult struct {
	// Pipeline is the shadow's policies, joined by ",".
	Pipeline string `json:"pipeline"`
	// Requests the shadow ran on; Compacted of them it shortened; Failed
	// runs (a conversion or compaction error); Dropped runs not started
	// because the pool's queue was full.
	Requests  int `json:"requests"`
	Compacted int `json:"compacted"`
	Failed    int `json:"failed"`
	Dropped   int `json:"dropped"`
	// TokensSent sums what the shadow would have sent (its output's
	// tokens, with the reply priming), and LiveTokens what the live
	// pipeline forwarded for the same requests.
	TokensSent int `json:"tokens_sent"`
	LiveTokens int `json:"live_tokens"`
}

// ShadowStats counts the shadow pool (GET /metrics, /v1/status).
type ShadowStats struct {
	// Runs finished, Dropped for a full queue, Failed runs.
	Runs, Dropped, Failed uint64
	// InFlight runs, queued or running.
	InFlight int
}

// maxShadowConversations bounds the conversations whose shadow results
// are held; past it an arbitrary other conversation's are forgotten.
const maxShadowConversations = 10_000

// shadowJob is one request's conversation for one shadow pipeline.
type shadowJob struct {
	id, model  string
	prov       wire.Format
	system     json.RawMessage
	messages   []json.RawMessage
	pipeline   []string
	decision   *abi.Decision
	liveTokens int
	summarizer string
	window     int
	timeout    time.Duration
}

// shadower runs the shadow jobs on a bounded pool.
type shadower struct {
	ctx    context.Context
	cancel context.CancelFunc
	jobs   chan shadowJob
	wg     sync.WaitGroup
	run    func(context.Context, shadowJob) (tokens int, compacted bool, err error)

	mu       sync.Mutex
	byConv   map[string]map[string]*ShadowResult // conversation → pipeline
	maxConvs int                                 // past it, another conversation's results are forgotten

	runs, dropped, failed atomic.Uint64
	inflight              atomic.Int64
}

// newShadower starts workers that take jobs from a queue of queue
// entries (0: a job is accepted only when a worker is idle).
func newShadower(workers, queue int, run func(context.Context, shadowJob) (int, bool, error)) *shadower {
	ctx, cancel := context.WithCancel(context.Background())
	s := &shadower{ctx: ctx, cancel: cancel, jobs: make(chan shadowJob, max(queue, 0)), run: run,
		byConv: map[string]map[string]*ShadowResult{}, maxConvs: maxShadowConversations}
	for range max(workers, 1) {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

func (s *shadower) work() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case j := <-s.jobs:
			s.do(j)
		}
	}
}

func (s *shadower) do(j shadowJob) {
	defer s.inflight.Add(-1)
	if s.ctx.Err() != nil {
		return
	}
	n, compacted, err := s.run(s.ctx, j)
	if s.ctx.Err() != nil {
		return // cancelled at shutdown: not a result
	}
	s.runs.Add(1)
	s.record(j, func(r *ShadowResult) {
		r.Requests++
		r.LiveTokens += j.liveTokens
		if err != nil {
			r.Failed++
			r.TokensSent += j.liveTokens
			return
		}
		r.TokensSent += n
		if compacted {
			r.Compacted++
		}
	})
	if err != nil {
		s.failed.Add(1)
	}
}

// submit queues a job; it never blocks: with the queue full the job is
// dropped and counted.
func (s *shadower) submit(j shadowJob) bool {
	if s.ctx.Err() != nil {
		return false
	}
	s.inflight.Add(1)
	select {
	case s.jobs <- j:
		return true
	default:
		s.inflight.Add(-1)
		s.dropped.Add(1)
		s.record(j, func(r *ShadowResult) { r.Dropped++ })
		return false
	}
}

func (s *shadower) record(j shadowJob, f func(*ShadowResult)) {
	key := strings.Join(j.pipeline, ",")
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.byConv[j.id]
	if m == nil {
		for id := range s.byConv {
			if len(s.byConv) < s.maxConvs {
				break
			}
			delete(s.byConv, id)
		}
		m = map[string]*ShadowResult{}
		s.byConv[j.id] = m
	}
	r := m[key]
	if r == nil {
		r = &ShadowResult{Pipeline: key}
		m[key] = r
	}
	f(r)
}

// close cancels the queued and running shadow runs and waits for the
// workers to end.
func (s *shadower) close() {
	s.cancel()
	s.wg.Wait()
	for {
		select {
		case <-s.jobs:
			s.inflight.Add(-1)
		default:
			return
		}
	}
}

func (s *shadower) stats() ShadowStats {
	return ShadowStats{Runs: s.runs.Load(), Dropped: s.dropped.Load(), Failed: s.failed.Load(), InFlight: int(s.inflight.Load())}
}

// results returns the conversation's shadow results, by pipeline.
func (s *shadower) results(id string) []ShadowResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ShadowResult, 0, len(s.byConv[id]))
	for _, r := range s.byConv[id] {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Pipeline < out[k].Pipeline })
	return out
}

// ShadowStats returns the shadow pool's counts.
func (p *Proxy) ShadowStats() ShadowStats { return p.shadow.stats() }

// ShadowResults returns a conversation's shadow results, by pipeline
// (none when proxy.shadow is empty or no request of it was shadowed).
func (p *Proxy) ShadowResults(conversation string) []ShadowResult {
	return p.shadow.results(conversation)
}

// runShadow converts the job's conversation and compacts it with the
// shadow pipeline; it returns the tokens the shadow would have sent.
func (p *Proxy) runShadow(ctx context.Context, j shadowJob) (int, bool, error) {
	wc, err := j.prov.Convert(j.system, j.messages)
	if err != nil {
		return 0, false, err
	}
	if j.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, j.timeout)
		defer cancel()
	}
	resp, err := p.opts.Compactor.Compact(ctx, compactor.Request{
		Conversation: wc.Chat(), Pipeline: j.pipeline, Model: j.model, ConversationID: shadowStateID(j.id, j.pipeline),
		ContextWindow: j.window, SummarizerModel: j.summarizer, Decision: j.decision,
	})
	if err != nil {
		return 0, false, err
	}
	if !resp.Compacted {
		return resp.Stats.TokensBefore + tokens.ReplyPrimingTokens, false, nil
	}
	return resp.Stats.TokensAfter + tokens.ReplyPrimingTokens, true, nil
}

// shadowRequest hands the request's conversation to each shadow
// pipeline. It runs after the live filter, whose decision (nil when the
// live pipeline was not due) and forwarded tokens it passes on.
func (x *exchange) shadowRequest(req *request, cfg *config.Config, decision *abi.Decision, live int) {
	if len(cfg.Proxy.Shadow) == 0 || req == nil {
		return
	}
	var d *abi.Decision
	if decision != nil {
		c := *decision
		d = &c
	}
	for _, pl := range cfg.Proxy.ShadowPipelines() {
		x.p.shadow.submit(shadowJob{id: x.id, model: req.model, prov: x.prov, system: req.system, messages: req.messages,
			pipeline: pl, decision: d, liveTokens: live, summarizer: cfg.LLMModel(), window: cfg.Proxy.ContextWindow,
			timeout: cfg.Limits.RequestTimeout.D()})
	}
}

// ShadowTotals returns each shadow pipeline's counts summed over the
// conversations, by pipeline.
func (p *Proxy) ShadowTotals() []ShadowResult {
	s := p.shadow
	s.mu.Lock()
	sum := map[string]*ShadowResult{}
	for _, m := range s.byConv {
		for k, r := range m {
			t := sum[k]
			if t == nil {
				t = &ShadowResult{Pipeline: k}
				sum[k] = t
			}
			t.Requests += r.Requests
			t.Compacted += r.Compacted
			t.Failed += r.Failed
			t.Dropped += r.Dropped
			t.TokensSent += r.TokensSent
			t.LiveTokens += r.LiveTokens
		}
	}
	s.mu.Unlock()
	out := make([]ShadowResult, 0, len(sum))
	for _, r := range sum {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Pipeline < out[k].Pipeline })
	return out
}

// shadowStateID is the conversation id a shadow pipeline's policies keep
// their state under: the conversation's, set apart per shadow pipeline,
// so that a shadow never reads or writes the live pipeline's state (nor
// another shadow's), even when it runs the same policy.
func shadowStateID(id string, pipeline []string) string {
	return id + "\x1fshadow:" + strings.Join(pipeline, ",")
}
