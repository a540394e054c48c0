package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/registry"
)

// HeaderPolicy (request) names what a compaction of this request runs,
// over the route its model matches (proxy.routes, proxy.policy): one
// policy, or a pipeline as policy names separated by commas. The route's
// ratios (threshold, target) still apply. A name no plugin serves is
// refused with a 400 in the provider's format, before anything goes
// upstream.
const HeaderPolicy = "X-Compactd-Policy"

// Error codes of a refused HeaderPolicy.
const (
	CodeBadRequest    = "bad_request"
	CodeUnknownPolicy = "unknown_policy"
)

// policyError is a refused HeaderPolicy: its status is 400 and code one
// of the Code* constants above.
type policyError struct {
	code string
	msg  string
}

func (e *policyError) Error() string { return e.msg }

// parsePolicyHeader reads HeaderPolicy's value: nil when absent, else the
// pipeline it names, each name checked for its form and served by a
// plugin (p.policyKnown). The error is a *policyError.
func (p *Proxy) parsePolicyHeader(ctx context.Context, value string) ([]string, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, nil
	}
	names := strings.Split(value, ",")
	if len(names) > config.MaxPipeline {
		return nil, &policyError{CodeBadRequest, fmt.Sprintf("%s names %d policies; a pipeline has at most %d", HeaderPolicy, len(names), config.MaxPipeline)}
	}
	for i, n := range names {
		n = strings.TrimSpace(n)
		if !abi.ValidName(n) {
			return nil, &policyError{CodeBadRequest, fmt.Sprintf("%s: %q is not a policy name (1-64 characters of a-z, 0-9, _ and -, starting with a letter; a pipeline separates them with commas)", HeaderPolicy, headerValue(n))}
		}
		names[i] = n
	}
	for _, n := range names {
		if err := p.opts.Compactor.CheckPolicy(ctx, n); err != nil {
			if errors.Is(err, registry.ErrUnknownPolicy) {
				return nil, &policyError{CodeUnknownPolicy, fmt.Sprintf("%s: %v (GET /v1/policies lists the policies)", HeaderPolicy, err)}
			}
			return nil, &policyError{CodeBadRequest, fmt.Sprintf("%s: policy %q: %v", HeaderPolicy, n, err)}
		}
	}
	return names, nil
}

// routeFor returns the route a request for model runs under: the config's
// (ProxyRoute) with the pipeline HeaderPolicy chose, if any.
func routeFor(cfg *config.Config, model string, chosen []string) *config.Route {
	rt := cfg.ProxyRoute(model)
	if chosen != nil {
		rt = rt.WithPipeline(chosen)
	}
	return rt
}

// StoredRoute returns the route a manual compaction of the conversation's
// stored last request runs under (CompactStored): the running config's
// route for its model, or the pipeline its X-Compactd-Policy header
// chose. ok is false when the proxy holds no request for id.
func (p *Proxy) StoredRoute(cfg *config.Config, id string) (rt *config.Route, ok bool) {
	last, ok := p.mem.LastRequest(id)
	if !ok {
		return nil, false
	}
	return routeFor(cfg, last.Model, last.Pipeline), true
}
