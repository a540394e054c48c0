package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wire"
)

// Background preparation (proxy.prepare_threshold; docs/proxy.md,
// "Background preparation"; the extension rule is in abi/README.md).
//
// When a proxied request's pre-flight count passes prepare_threshold of
// the window, the request is forwarded untouched and its conversation's
// current prefix (every message of the request) is compacted in the
// background by the live pipeline, with the host's decision "prepare".
// When a later request of the conversation reaches the trigger, and the
// prepared prefix is an exact prefix of it (the same items, by hash, the
// same model, provider, pipeline and tools), the body forwarded is the
// prepared compaction followed by the request's later messages, verbatim:
// no policy runs on the request path. A prefix that no longer matches is
// discarded.
//
// One preparation per conversation runs at a time; a bounded set of
// workers runs them, with a bounded queue (past it a preparation is
// dropped and counted). Prepared results live in this process only, at
// most maxHeldPrepared of them, the oldest dropped first.

// maxHeldPrepared bounds the prepared results held (one per
// conversation).
const maxHeldPrepared = 256

// preparation is one conversation's prepared compaction, running or done.
type preparation struct {
	id, provider, model string
	pipeline            []string
	tools               uint64   // hash of the request's "tools" (cache markers depend on them)
	hashes              []uint64 // the prefix's items (system prompt first, when separate)
	done                chan struct{}
	seq                 uint64 // order of creation, for eviction

	// Set before done is closed.
	err    error
	kept   bool              // the policy kept the prefix as it was
	list   []json.RawMessage // the compacted prefix, as the list's elements
	tokens int               // compactd's count of the compacted prefix
	input  *chat.Conversation
	resp   *compactor.Response
}

func (pr *preparation) ready() bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

// matches reports whether the prefix is an exact prefix of a request.
func (pr *preparation) matches(provider, model string, pipeline []string, tools uint64, hashes []uint64) bool {
	return pr.provider == provider && pr.model == model && slices.Equal(pr.pipeline, pipeline) && pr.tools == tools &&
		len(pr.hashes) <= len(hashes) && slices.Equal(pr.hashes, hashes[:len(pr.hashes)])
}

// PrepareStats counts the background preparations (GET /metrics).
type PrepareStats struct {
	// Started preparations; Used: requests at the trigger that were sent
	// as a prepared compaction plus their new messages; Discarded:
	// prepared results dropped unused (the prefix no longer matched, a
	// newer one replaced it, or too many were held); Dropped:
	// preparations not started because the queue was full; Failed:
	// preparations whose compaction failed; Missed: requests at the
	// trigger whose preparation was not ready in time.
	Started, Used, Discarded, Dropped, Failed, Missed uint64
	// InFlight preparations (queued or running); Held prepared results;
	// Waiting requests at the trigger waiting for their preparation
	// (proxy.prepare_wait).
	InFlight, Held, Waiting int
}

// preparer runs and holds the preparations.
type preparer struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slots  chan struct{} // one per worker
	queue  int           // preparations waiting for a slot, at most the limit

	mu    sync.Mutex
	byID  map[string]*preparation
	seq   uint64
	fresh map[string]*preparation // the conversation's running preparation, if any

	started, used, discarded, dropped, failed, missed atomic.Uint64
	inflight, waiting                                 atomic.Int64
}

func newPreparer(workers int) *preparer {
	ctx, cancel := context.WithCancel(context.Background())
	return &preparer{ctx: ctx, cancel: cancel, slots: make(chan struct{}, max(workers, 1)),
		byID: map[string]*preparation{}, fresh: map[string]*preparation{}}
}

// close cancels the running preparations and waits for them to end.
func (pp *preparer) close() {
	pp.cancel()
	pp.wg.Wait()
}

func (pp *preparer) stats() PrepareStats {
	pp.mu.Lock()
	held := len(pp.byID)
	pp.mu.Unlock()
	return PrepareStats{Started: pp.started.Load(), Used: pp.used.Load(), Discarded: pp.discarded.Load(),
		Dropped: pp.dropped.Load(), Failed: pp.failed.Load(), Missed: pp.missed.Load(),
		InFlight: int(pp.inflight.Load()), Held: held, Waiting: int(pp.waiting.Load())}
}

// PrepareStats returns the background preparation's counts.
func (p *Proxy) PrepareStats() PrepareStats { return p.prep.stats() }

// lookup returns the conversation's preparation: the running one if it
// matches the request, else the held one if it does (nil if neither).
// A held result that does not match is discarded.
func (pp *preparer) lookup(id, provider, model string, pipeline []string, tools uint64, hashes []uint64) *preparation {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pr := pp.fresh[id]; pr != nil && pr.matches(provider, model, pipeline, tools, hashes) {
		if pr.ready() && pr.err == nil {
			return pr
		}
		if held := pp.byID[id]; held == nil || !held.matches(provider, model, pipeline, tools, hashes) {
			return pr // wait for the running one
		}
	}
	if pr := pp.byID[id]; pr != nil {
		if pr.matches(provider, model, pipeline, tools, hashes) {
			return pr
		}
		delete(pp.byID, id)
		pp.discarded.Add(1)
	}
	return nil
}

// toolsHash hashes the request's tools.
func (p *Proxy) toolsHash(req *request) uint64 { return maphash.Bytes(p.seed, req.get("tools")) }

// usePrepared answers a request that reached the trigger from its
// conversation's preparation. handled is false when there is none (the
// caller compacts as without preparation); otherwise out is the body to
// forward: the prepared compaction plus the request's later messages, or
// the request as it is when the preparation missed and prepare_miss is
// "forward".
func (x *exchange) usePrepared(ctx context.Context, req *request, hashes []uint64, counts []int, pipeline []string, obs *store.Observation) (out []byte, handled bool) {
	p, pc := x.p, &x.cfg.Proxy
	if x.route.PrepareThreshold <= 0 {
		return nil, false
	}
	pr := p.prep.lookup(x.id, x.prov.Name(), req.model, pipeline, p.toolsHash(req), hashes)
	if pr == nil {
		return nil, false
	}
	if !pr.ready() {
		if wait := pc.PrepareWait.D(); wait > 0 {
			p.prep.waiting.Add(1)
			t := time.NewTimer(wait)
			select {
			case <-pr.done:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			p.prep.waiting.Add(-1)
		}
		if !pr.ready() {
			p.prep.missed.Add(1)
			if pc.PrepareMiss == config.PrepareMissForward {
				x.warn("the conversation's prepared compaction is not ready (proxy.prepare_miss: forward): forwarded uncompacted, the next request uses it")
				return req.body, true
			}
			return nil, false
		}
	}
	if pr.err != nil || pr.kept {
		return nil, false // compacted synchronously, as without preparation
	}
	items, _ := req.items()
	newItems := items[len(pr.hashes):]
	list := make([]json.RawMessage, 0, len(pr.list)+len(newItems))
	list = append(append(list, pr.list...), newItems...)
	added := 0
	for _, c := range counts[len(pr.hashes):] {
		added += c
	}
	p.prep.used.Add(1)
	x.fromPrepared = true
	obs.Compacted, obs.MessagesAfter, obs.TokensAfter = true, len(list), pr.tokens+added+tokens.ReplyPrimingTokens
	x.compacted, x.forwarded = true, obs.TokensAfter
	x.compaction = &Compaction{Input: pr.input, Response: pr.resp, Model: req.model, Pipeline: pipeline}
	p.logger.Info("proxy: compacted from the prepared compaction", "provider", x.prov.Name(), "conversation", x.id,
		"messages", fmt.Sprintf("%d→%d", obs.MessagesBefore, len(list)), "tokens", fmt.Sprintf("%d→%d", obs.TokensBefore, obs.TokensAfter),
		"new_messages", len(newItems))
	return req.withList(list), true
}

// maybePrepare starts a background preparation of the request's
// conversation when its count (estimate, the request as the caller sent
// it) passes proxy.prepare_threshold, unless one is running, or the
// request was sent as a prepared compaction extended with its new
// messages and that is still below the threshold.
func (x *exchange) maybePrepare(req *request, hashes []uint64, estimate int, pipeline []string, offset int) {
	p, pc := x.p, &x.cfg.Proxy
	if x.route.PrepareThreshold <= 0 || x.window <= 0 || len(pipeline) == 0 {
		return
	}
	at := x.route.PrepareThreshold * float64(x.window)
	if float64(estimate) < at || x.fromPrepared && float64(x.forwarded+offset) < at {
		return
	}
	if len(x.prov.Uncompactable(req.get)) > 0 {
		return
	}
	wc, err := x.prov.Convert(req.system, req.messages)
	if err != nil || pendingToolCall(wc.Chat().Messages) {
		return // not at a boundary where the prefix can be extended
	}
	tools := p.toolsHash(req)
	pp := p.prep
	pp.mu.Lock()
	if pp.fresh[x.id] != nil {
		pp.mu.Unlock()
		return // one at a time per conversation
	}
	if pp.queue >= pc.PrepareQueue {
		pp.mu.Unlock()
		pp.dropped.Add(1)
		p.logger.Warn("proxy: background preparation dropped: the queue is full (proxy.prepare_queue)", "conversation", x.id)
		return
	}
	pp.seq++
	pr := &preparation{id: x.id, provider: x.prov.Name(), model: req.model, pipeline: pipeline, tools: tools,
		hashes: slices.Clone(hashes), done: make(chan struct{}), seq: pp.seq}
	pp.fresh[x.id] = pr
	pp.queue++
	pp.wg.Add(1)
	pp.mu.Unlock()
	pp.started.Add(1)
	pp.inflight.Add(1)

	cfg := x.cfg
	decision := &abi.Decision{Reason: abi.ReasonPrepare, TargetTokens: targetTokens(x.route, pc.TriggerTokens, abi.ReasonPrepare, x.window, offset)}
	prov := x.prov
	go func() {
		defer pp.wg.Done()
		defer pp.inflight.Add(-1)
		select {
		case pp.slots <- struct{}{}:
		case <-pp.ctx.Done():
		}
		pp.mu.Lock()
		pp.queue--
		pp.mu.Unlock()
		if pp.ctx.Err() == nil {
			pp.run(p, cfg, prov, req, wc, pr, decision)
			<-pp.slots
		} else {
			pr.err = pp.ctx.Err()
		}
		pp.finish(pr)
	}()
}

// run compacts the preparation's prefix with the live pipeline.
func (pp *preparer) run(p *Proxy, cfg *config.Config, prov wire.Format, req *request, wc wire.Conversation, pr *preparation, decision *abi.Decision) {
	ctx, cancel := context.WithTimeout(pp.ctx, cfg.Limits.RequestTimeout.D())
	defer cancel()
	resp, err := p.opts.Compactor.Compact(ctx, compactor.Request{
		Conversation: wc.Chat(), Pipeline: pr.pipeline, Model: pr.model, ConversationID: pr.id, ContextWindow: cfg.Proxy.ContextWindow,
		SummarizerModel: cfg.LLMModel(), Decision: decision,
	})
	if err == nil {
		for _, st := range resp.Stats.Stages {
			if st.Error != "" {
				err = fmt.Errorf("stage %s: %s", st.Policy, st.Error)
			}
		}
	}
	if err != nil {
		pr.err = err
		return
	}
	pr.input, pr.resp = wc.Chat(), resp
	if !resp.Compacted {
		pr.kept = true
		return
	}
	list, err := req.back(prov, wc, resp)
	if err != nil {
		pr.err = fmt.Errorf("writing the compacted conversation back: %w", err)
		return
	}
	pr.list, pr.tokens = list, resp.Stats.TokensAfter
}

// finish records a preparation's end: it becomes the conversation's held
// result (replacing an older one) unless it failed.
func (pp *preparer) finish(pr *preparation) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.fresh[pr.id] == pr {
		delete(pp.fresh, pr.id)
	}
	if pr.err != nil {
		if pp.ctx.Err() == nil {
			pp.failed.Add(1)
		}
		close(pr.done)
		return
	}
	close(pr.done)
	if old := pp.byID[pr.id]; old != nil {
		pp.discarded.Add(1)
	}
	pp.byID[pr.id] = pr
	for len(pp.byID) > maxHeldPrepared {
		var oldest *preparation
		for _, h := range pp.byID {
			if oldest == nil || h.seq < oldest.seq {
				oldest = h
			}
		}
		delete(pp.byID, oldest.id)
		pp.discarded.Add(1)
	}
}

// pendingToolCall reports whether a tool call of msgs has no result after
// it: a prefix ending there cannot be extended by appending.
func pendingToolCall(msgs []abi.Message) bool {
	pending := map[string]bool{}
	for i := range msgs {
		for _, c := range msgs[i].ToolCalls {
			pending[c.ID] = true
		}
		if msgs[i].ToolCallID != "" {
			delete(pending, msgs[i].ToolCallID)
		}
	}
	return len(pending) > 0
}
