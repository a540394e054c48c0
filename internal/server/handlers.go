package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/store/redisstore"
	"github.com/compactd/compactd/registry"
)

func (s *Server) handlePolicies(w http.ResponseWriter, r *http.Request) error {
	infos := s.opts.Registry.Policies()
	out := client.PolicyList{Policies: make([]client.Policy, 0, len(infos))}
	for _, in := range infos {
		out.Policies = append(out.Policies, policyOf(in))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handlePolicy(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	in, ok := s.opts.Registry.Policy(name)
	if !ok {
		return apiErrorf(http.StatusNotFound, CodeUnknownPolicy, "no policy or plugin file named %q (GET /v1/policies lists them)", name)
	}
	writeJSON(w, http.StatusOK, policyOf(in))
	return nil
}

// handleRetry loads a plugin file again now, lifting its quarantine or
// the failure of its bytes the daemon remembers, and answers with the
// file's state once the load is over.
func (s *Server) handleRetry(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	in, err := s.opts.Registry.Retry(r.Context(), name)
	if errors.Is(err, registry.ErrUnknownPolicy) {
		return apiErrorf(http.StatusNotFound, CodeUnknownPolicy, "no policy or plugin file named %q to retry (GET /v1/policies lists them)", name)
	}
	if err != nil {
		return err // the caller went away; the load goes on
	}
	writeJSON(w, http.StatusOK, policyOf(in))
	return nil
}

func policyOf(in registry.Info) client.Policy {
	p := client.Policy{Name: in.Name, File: in.File, SHA256: in.SHA256, LoadedAt: in.LoadedAt}
	if p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(in.File), ".wasm")
	}
	if pl := in.Plugin; pl != nil {
		d := pl.Description()
		p.Serving, p.Version, p.ABI, p.Description = true, d.Version, d.ABI.String(), d.Description
		p.ConfigSchema, p.Defaults, p.Exports, p.Path, p.View = d.ConfigSchema, d.Defaults, d.Exports, pl.Path(), pl.View()
		l := pl.Limits()
		p.Limits = &client.Limits{MaxMemoryBytes: int64(l.MaxMemoryPages) << 16, CallTimeout: l.CallTimeout.String(),
			MaxOutputBytes: l.MaxOutputBytes, MaxInstances: l.MaxInstances, WorkBudget: l.WorkBudget, StartWorkBudget: l.StartWorkBudget}
		st := pl.Stats()
		p.Calls, p.Failures = st.Calls, st.Failures
		p.Tier = pl.Tier()
		p.Instances = &client.Instances{Idle: st.Idle, IdleMemoryBytes: st.IdleMemoryBytes}
	}
	if in.Error != nil {
		p.Error = &client.LoadError{Message: in.Error.Error(), SHA256: in.ErrorSHA256, At: in.ErrorAt}
	}
	p.Quarantined, p.Loading, p.LogLinesDropped, p.LogLinesTruncated = in.Quarantined, in.Loading, in.LogDropped, in.LogTruncated
	return p
}

// defaultStatusLimit is how many conversations GET /v1/status lists
// without ?limit.
const defaultStatusLimit = 100

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if id := q.Get("conversation_id"); id != "" {
		c, err := s.conversation(r.Context(), id)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, c)
		return nil
	}
	limit := defaultStatusLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return apiErrorf(http.StatusBadRequest, CodeBadRequest, "limit=%q: want a positive integer", v)
		}
		limit = n
	}
	f, err := filterOf(q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.status(limit, f))
	return nil
}

// conversation returns one tracked conversation with its last compaction.
func (s *Server) conversation(ctx context.Context, id string) (*client.Conversation, error) {
	c, ok := s.opts.Store.Conversation(id)
	if !ok {
		return nil, apiErrorf(http.StatusNotFound, CodeNotFound, "no tracked conversation %q", id)
	}
	out := conversationOf(c)
	out.Shadow = s.shadowOf(id)
	b, err := s.opts.Store.LastCompaction(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("conversation %q: %w", id, err)
	}
	if b != nil {
		var d client.CompactionDetail
		if err := json.Unmarshal(b, &d); err != nil {
			s.logger.Warn("unreadable compaction record", "conversation", id, "error", err)
		} else {
			out.LastCompaction = &d
		}
	}
	return &out, nil
}

// status is GET /v1/status's answer, with at most limit conversations
// (of those f matches).
func (s *Server) status(limit int, f conversationFilter) client.Status {
	cfg := s.opts.Config.Current()
	st := client.Status{
		Version: s.opts.Version, ABI: abi.Version.String(), StartedAt: s.started.UTC(),
		UptimeSeconds: time.Since(s.started).Seconds(),
		Store:         client.StoreDescriptor{Path: s.opts.Store.Describe(), TTL: cfg.State.TTL.String(), MaxConversations: cfg.State.MaxConversations},
	}
	for _, in := range s.opts.Registry.Policies() {
		if in.Plugin != nil {
			st.Policies.Serving++
		}
		if in.Error != nil {
			st.Policies.Failed++
		}
	}
	t := s.opts.Store.Totals()
	st.Totals = client.Totals{Conversations: t.Conversations, Requests: t.Requests, Compactions: t.Compactions, Failures: t.Failures, TokensSaved: t.TokensSaved,
		PaidUSD: t.PaidUSD, FullUSD: t.FullUSD, UnpricedRequests: t.UnpricedRequests}
	st.Proxy = s.proxyStatus(cfg)
	if s.opts.Proxy != nil {
		if sc, ok := s.opts.Proxy.ShadowTotals(); ok {
			st.Totals.Shadow = shadowStatus(s.opts.Proxy.ShadowCostModels(), sc)
		}
	}
	var convs []store.Conversation
	if f.empty() {
		convs = s.opts.Store.Conversations(limit)
	} else {
		convs = f.apply(s.opts.Store.Conversations(0), limit)
	}
	st.Conversations = make([]client.Conversation, 0, len(convs))
	for _, c := range convs {
		out := conversationOf(c)
		out.Shadow = s.shadowOf(c.ID)
		st.Conversations = append(st.Conversations, out)
	}
	return st
}

func conversationOf(c store.Conversation) client.Conversation {
	out := client.Conversation{
		ID: c.ID, Title: c.Title, Tags: c.Tags, User: c.User, PeakTokens: c.PeakTokens,
		Model: c.Model, Pipeline: c.Pipeline, Route: c.Route, Messages: c.Messages, Tokens: c.Tokens,
		MessagesAfter: c.MessagesAfter, TokensAfter: c.TokensAfter, ContextWindow: c.ContextWindow, UsageRatio: c.UsageRatio,
		Requests: c.Requests, Compactions: c.Compactions, Failures: c.Failures, TokensSaved: c.TokensSaved,
		Recoveries: c.Recoveries, PaidUSD: c.PaidUSD, FullUSD: c.FullUSD, UnpricedRequests: c.UnpricedRequests, FirstSeen: c.FirstSeen, LastSeen: c.LastSeen, LastCompacted: c.LastCompacted,
		Provider: c.Provider, NeedsCompaction: c.NeedsCompaction, Replica: c.Replica,
	}
	if u := c.LastUsage; u != nil {
		out.LastUsage = &client.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens, At: u.At}
	}
	return out
}

func (s *Server) configDocument(cfgJSON []byte) client.ConfigDocument {
	return client.ConfigDocument{File: s.opts.Config.Path(), Config: cfgJSON}
}

func (s *Server) handleGetConfig(w http.ResponseWriter, r *http.Request) error {
	doc, err := s.runningConfig()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, doc)
	return nil
}

// runningConfig is GET /v1/config's answer: the running config, with the
// problems it has now (see configProblems).
func (s *Server) runningConfig() (client.ConfigDocument, error) {
	cfg := *s.opts.Config.Current()
	cfg.State.URL = redisstore.Redact(cfg.State.URL) // no password in the answer
	b, err := json.Marshal(&cfg)
	if err != nil {
		return client.ConfigDocument{}, err
	}
	doc := s.configDocument(b)
	doc.Warnings, doc.Errors = s.configProblems()
	return doc, nil
}

// configProblems runs the checks PUT /v1/config and SIGHUP make (the
// daemon's checkConfig: the plan a start would build, the memory limits
// against the plugins loaded, the plugins' schemas) on the running config
// again, against the plugins loaded now (a plugin reloaded with a new
// schema or more initial memory may reject it), and reports the last
// failed reload of the config file (SIGHUP), which left the running
// config in place. There is one notion of a config problem: what one of
// these answers is what the others would.
func (s *Server) configProblems() (warnings, errs []string) {
	warnings, err := s.opts.Config.Check()
	if err != nil {
		errs = append(errs, "the running config would be refused now (by an update, a reload or a start): "+err.Error())
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.reloadErr != nil {
		errs = append(errs, fmt.Sprintf("the config file's last reload failed at %s, so the config above is the one before it: %v",
			s.reloadAt.UTC().Format(time.RFC3339), s.reloadErr))
	}
	return warnings, errs
}

func (s *Server) handlePutConfig(w http.ResponseWriter, r *http.Request) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxConfigBody))
	if err != nil {
		return toAPIError(err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return apiErrorf(http.StatusBadRequest, CodeBadRequest, "empty body: want a JSON object of settings to change")
	}
	if data, err = keepStateSecret(data, s.opts.Config.Current().State.URL); err != nil {
		return err
	}
	ch, err := s.opts.Config.Update(data)
	if errors.Is(err, config.ErrUpstreamLocked) {
		s.logger.Warn("config update refused: it would change the proxy's upstreams, which proxy.allow_upstream_change forbids", "by", requestOrigin(r), "error", err)
	}
	if err != nil {
		s.metrics.configReloads.add(1, "error")
		var ae *APIError
		if !errors.As(err, &ae) {
			ae = toAPIError(err)
			if ae.Status == http.StatusInternalServerError {
				return err
			}
		}
		return ae
	}
	s.metrics.configReloads.add(1, "ok")
	s.noteUpstreamChanges(ch, requestOrigin(r))
	answer := *ch.Config
	answer.State.URL = redisstore.Redact(answer.State.URL) // as GET shows it
	b, err := json.Marshal(&answer)
	if err != nil {
		return err
	}
	doc := s.configDocument(b)
	doc.RestartRequired, doc.Warnings = ch.RestartRequired, ch.Warnings
	writeJSON(w, http.StatusOK, doc)
	return nil
}

// handleHealth answers "ok"; "starting" while the plugin files are
// tried for the first time (policies serve as they load); or "degraded"
// when no policy serves, or a policy of the default pipeline does not
// because its file failed to load or is quarantined, with the problems
// and how to clear them. All are 200: the daemon itself is alive. It
// waits for nothing.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.health())
	return nil
}

// handleBareHealth answers /healthz on the TCP listener without the
// token: the status alone (ok, starting or degraded), no detail, so
// ordinary uptime checks work and nothing about the daemon leaks.
func (s *Server) handleBareHealth(w http.ResponseWriter, r *http.Request) {
	s.metrics.requests.add(1, "healthz", "200")
	writeJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
	}{s.health().Status})
}

// health is /healthz's answer.
func (s *Server) health() client.Health {
	rc := s.opts.Registry.Counters()
	h := client.Health{Status: "ok", Policies: rc.Serving, Loading: rc.Loading}
	if rc.Serving == 0 && !s.opts.Registry.Starting() {
		h.Problems = append(h.Problems, "no policy is loaded: every compaction fails until a plugin loads (GET /v1/policies says why files failed)")
	}
	h.Problems = append(h.Problems, s.defaultPolicyProblems()...)
	sh := s.opts.Store.Health()
	if sh.Backend != "bbolt" { // a local file has nothing to report beyond its calls' errors
		h.Store = &client.StoreHealth{Backend: sh.Backend, Degraded: sh.Degraded, Error: sh.Error, DroppedWrites: sh.DroppedWrites, FailedReads: sh.FailedReads, Since: sh.Since}
	}
	if sh.Degraded {
		h.Problems = append(h.Problems, "the shared state store cannot be reached ("+sh.Error+"): requests are served from themselves alone; it recovers by itself when the store answers")
	}
	switch {
	case s.opts.Registry.Starting():
		h.Status = "starting"
	case len(h.Problems) > 0:
		h.Status = "degraded"
	}
	return h
}

// defaultPolicyProblems says which policies of the default pipeline (the
// config's policy or pipeline, else ledger) a plugin file that failed to
// load, or is quarantined, keeps from serving, and how to clear it.
func (s *Server) defaultPolicyProblems() []string {
	var out []string
	for _, name := range s.opts.Config.Current().DefaultPipeline() {
		in, ok := s.opts.Registry.Policy(name)
		if !ok || in.Plugin != nil || in.Error == nil || in.Loading {
			continue
		}
		what := "failed to load"
		if in.Quarantined {
			what = "is quarantined"
		}
		msg := fmt.Sprintf("the default policy %q does not serve, so requests that name no policy fail: %s %s: %v",
			name, filepath.Base(in.File), what, in.Error)
		if !strings.Contains(msg, "plugins retry") {
			msg += fmt.Sprintf("; once the cause is fixed, `compactd plugins retry %s` (POST /v1/policies/%s/retry) loads it again", name, name)
		}
		out = append(out, msg)
	}
	return out
}

// writePluginFileMetrics writes what is counted per plugin file: log
// lines dropped over the rate limit and cut to the line limit, and the
// files in quarantine.
func writePluginFileMetrics(w io.Writer, infos []registry.Info) {
	quarantined := 0
	dropped := newCounterVec("compactd_plugin_log_lines_dropped_total", "Plugin log lines dropped over the rate limit, by plugin file.", "file")
	truncated := newCounterVec("compactd_plugin_log_lines_truncated_total", "Plugin log lines cut to the line-length limit, by plugin file.", "file")
	for _, in := range infos {
		if in.Quarantined {
			quarantined++
		}
		dropped.add(in.LogDropped, filepath.Base(in.File))
		truncated.add(in.LogTruncated, filepath.Base(in.File))
	}
	dropped.write(w)
	truncated.write(w)
	writeGauge(w, "compactd_plugins_quarantined", "Plugin files not loaded because the daemon died while loading them.", float64(quarantined))
}

// ConfigReloaded counts a config reload (SIGHUP) in the metrics, keeps a
// failure for GET /v1/config and the status page until the next
// successful reload, and notes the upstreams a successful one moved.
func (s *Server) ConfigReloaded(ch *config.Change, err error) {
	s.reloadMu.Lock()
	s.reloadErr, s.reloadAt = err, time.Now()
	s.reloadMu.Unlock()
	if err != nil {
		s.metrics.configReloads.add(1, "error")
		return
	}
	s.metrics.configReloads.add(1, "ok")
	s.noteUpstreamChanges(ch, "SIGHUP (the config file reloaded)")
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	var b bytes.Buffer
	m := s.metrics
	m.requests.write(&b)
	m.latency.write(&b)
	m.compactions.write(&b)
	m.stageLatency.write(&b)
	m.tokensSaved.write(&b)
	writeCounter(&b, "compactd_tokens_in_total", "Tokens in the conversations compactd received.", m.tokensIn.Load())
	writeCounter(&b, "compactd_tokens_out_total", "Tokens in the conversations compactd returned.", m.tokensOut.Load())
	writeGauge(&b, "compactd_http_requests_in_flight", "API requests being served.", float64(m.inflight.Load()))
	rc := s.opts.Registry.Counters()
	writeCounter(&b, "compactd_plugin_loads_total", "Plugin load attempts (compile, describe, smoke test).", rc.Loads)
	writeCounter(&b, "compactd_plugin_load_failures_total", "Plugin load attempts that failed; the previous version kept serving.", rc.LoadFailures)
	writeCounter(&b, "compactd_plugin_reloads_total", "New plugin versions swapped in for a serving policy.", rc.Reloads)
	writeCounter(&b, "compactd_plugin_unloads_total", "Policies unloaded because their file was removed.", rc.Unloads)
	writeCounter(&b, "compactd_plugin_conflicts_total", "Plugin loads refused because another file serves the name.", rc.Conflicts)
	writeGauge(&b, "compactd_plugins_serving", "Policies serving.", float64(rc.Serving))
	writeGauge(&b, "compactd_plugins_draining", "Replaced plugin versions still finishing calls.", float64(rc.Draining))
	writeGauge(&b, "compactd_plugins_loading", "Plugin files being loaded.", float64(rc.Loading))
	writePluginFileMetrics(&b, s.opts.Registry.Policies())
	m.configReloads.write(&b)
	s.upstream.write(&b)
	s.overhead.write(&b)
	sh := s.opts.Store.Health()
	writeGauge(&b, "compactd_store_degraded", "1 while the state store cannot be reached (requests are served from themselves alone).", boolGauge(sh.Degraded))
	writeCounter(&b, "compactd_store_writes_dropped_total", "State store writes given up because the store was unreachable.", sh.DroppedWrites)
	writeCounter(&b, "compactd_store_reads_failed_total", "State store reads given up because the store was unreachable.", sh.FailedReads)
	writeGauge(&b, "compactd_conversations_tracked", "Conversations in the store.", float64(s.opts.Store.Totals().Conversations))
	ms := s.memory.Stats()
	writeCounter(&b, "compactd_conversation_cache_hits_total", "Compaction requests that repeated a remembered request of their conversation.", ms.Hits)
	writeCounter(&b, "compactd_conversation_cache_misses_total", "Compaction requests that found no remembered request to reuse.", ms.Misses)
	writeCounter(&b, "compactd_conversation_cache_reused_messages_total", "Messages taken from a remembered request (neither parsed nor counted again).", ms.Reused)
	writeCounter(&b, "compactd_conversation_cache_parsed_messages_total", "Messages parsed from request bodies.", ms.Parsed)
	writeGauge(&b, "compactd_conversation_cache_entries", "Conversations remembered (limits.conversation_cache_bytes bounds them).", float64(ms.Entries))
	writeGauge(&b, "compactd_conversation_cache_bytes", "Bytes the remembered conversations hold.", float64(ms.Bytes))
	if s.opts.MemoryBudget != nil {
		mb := s.opts.MemoryBudget()
		writeGauge(&b, "compactd_plugin_memory_budget_bytes", "The plugins' memory budget (limits.max_total_memory_mb).", float64(mb.Total))
		writeGauge(&b, "compactd_plugin_memory_reserved_bytes", "Bytes of the memory budget held by plugin instances (memory limit plus stack reserve each) and running compiles.", float64(mb.Used))
		writeCounter(&b, "compactd_plugin_memory_refused_total", "New plugin instances and compiles that found no room in the memory budget in time (the request got its input back with a warning).", mb.Refused)
		writeGauge(&b, "compactd_plugin_compile_budget_bytes", "The compile budget of one plugin module (limits.max_compile_memory_mb).", float64(mb.Compile))
	}
	if s.opts.LLMStats != nil {
		writeLLMMetrics(&b, s.opts.LLMStats())
	}
	if s.opts.Proxy != nil {
		faults := newCounterVec("compactd_proxy_upstream_faults_total", "Proxied exchanges an upstream failed, by provider and fault (timeout, stalled, event_too_large, answer_too_large, unreachable, usage_refused).", "provider", "fault")
		for _, f := range s.opts.Proxy.Faults() {
			faults.add(f.Count, f.Provider, f.Fault)
		}
		faults.write(&b)
		passed := newCounterVec("compactd_proxy_uncompacted_total", "Proxied requests forwarded without compaction because compactd did not understand them, by path and reason (path, unreadable, unsupported, previous_response_id, too_large); each got an X-Compactd-Warning.", "path", "reason")
		for _, p := range s.opts.Proxy.Passthroughs() {
			passed.add(p.Count, p.Path, p.Reason)
		}
		passed.write(&b)
		recovered := newCounterVec("compactd_proxy_overflow_recoveries_total", "Proxied requests an upstream refused as too long (context-length error or 413), compacted and retried once, by provider and outcome (recovered, retry_failed, not_compacted).", "provider", "outcome")
		for _, r := range s.opts.Proxy.Recoveries() {
			recovered.add(r.Count, r.Provider, r.Outcome)
		}
		recovered.write(&b)
		writePrepareMetrics(&b, s.opts.Proxy.PrepareStats())
		totals, _ := s.opts.Proxy.ShadowTotals()
		writeShadowMetrics(&b, s.opts.Proxy.ShadowStats(), totals)
	}
	writeGauge(&b, "compactd_start_time_seconds", "When the daemon started (Unix time).", float64(s.started.UnixNano())/1e9)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
	return nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// StoreWarning is the X-Compactd-Warning a response carries while the
// state store is unreachable.
const StoreWarning = "state store unavailable: compacted from the request alone; plugin state and status not saved"

// warnIfStoreDown adds StoreWarning to the response while the store is
// degraded, once. A handler calls it when the request starts and again
// before it writes its answer, so the request whose store calls found the
// outage carries the warning too.
func (s *Server) warnIfStoreDown(w http.ResponseWriter) {
	if s.opts.Store.Health().Degraded && !slices.Contains(w.Header().Values("X-Compactd-Warning"), StoreWarning) {
		w.Header().Add("X-Compactd-Warning", StoreWarning)
	}
}
