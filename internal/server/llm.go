package server

import (
	"fmt"
	"io"

	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/llm"
	"github.com/compactd/compactd/internal/store"
	"github.com/hashicorp/go-hclog"
)

// llmCacheBucket is the store bucket that holds the summary cache, so
// identical summarization requests are paid once, across restarts too.
const llmCacheBucket = "llm_cache"

// openLLM builds the LLM provider from the config's `llm:` block, with its
// summary cache in the store. It returns nil when the block is absent
// (plugins then get no_provider answers).
func openLLM(cfg *config.Config, st store.Backend, getenv func(string) string, logger hclog.Logger) (*llm.Client, error) {
	if cfg.LLM == nil || cfg.LLM.IsZero() {
		return nil, nil
	}
	var lc llm.Config
	if err := cfg.LLM.Decode(&lc); err != nil {
		return nil, fmt.Errorf("config llm: %w", err)
	}
	// New applies the defaults itself (an api_key_env left empty is not
	// the same as one naming the default variable).
	full := lc.WithDefaults()
	if err := full.Validate(); err != nil {
		return nil, fmt.Errorf("config llm: %w", err)
	}
	opts := []llm.Option{llm.WithLogger(logger), llm.WithGetenv(getenv)}
	if full.CacheMaxBytes > 0 {
		b, err := st.OpenBucket(llmCacheBucket, store.BucketOptions{MaxBytes: full.CacheMaxBytes})
		if err != nil {
			return nil, fmt.Errorf("summary cache: %w", err)
		}
		opts = append(opts, llm.WithCache(llm.NewKVCache(b)))
	}
	c, err := llm.New(lc, opts...)
	if err != nil {
		return nil, err
	}
	logger.Info("LLM provider ready", "provider", full.Provider, "base_url", full.BaseURL, "model", full.Model)
	return c, nil
}

// writeLLMMetrics writes the provider's counters in Prometheus text format.
func writeLLMMetrics(w io.Writer, s llm.Stats) {
	writeCounter(w, "compactd_llm_requests_total", "llm_complete calls plugins made.", uint64(s.Requests))
	writeCounter(w, "compactd_llm_cache_hits_total", "llm_complete calls answered from the summary cache.", uint64(s.CacheHits))
	writeCounter(w, "compactd_llm_cache_misses_total", "llm_complete calls the summary cache could not answer.", uint64(s.CacheMisses))
	writeCounter(w, "compactd_llm_calls_total", "Completions sent to the provider.", uint64(s.Calls))
	writeCounter(w, "compactd_llm_retries_total", "Retried provider attempts.", uint64(s.Retries))
	writeCounter(w, "compactd_llm_failures_total", "llm_complete calls that ended in an error.", uint64(s.Failures))
	writeCounter(w, "compactd_llm_budget_exceeded_total", "llm_complete calls refused by the per-request budget.", uint64(s.BudgetExceeded))
	writeCounter(w, "compactd_llm_input_tokens_total", "Input tokens spent on the provider.", uint64(s.InputTokens))
	writeCounter(w, "compactd_llm_output_tokens_total", "Output tokens spent on the provider.", uint64(s.OutputTokens))
}
