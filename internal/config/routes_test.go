package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestProxyRoutesResolve(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
policy: ledger
proxy:
  threshold: 0.9
  target: 0.6
  prepare_threshold: 0.5
  routes:
    - {model: "claude-*", policy: lastn, threshold: 0.7}
    - {model: "gpt-4o*", pipeline: [toolresult, sliding], target: 0.3}
    - {model: "gpt-4o-mini", policy: never}
    - {model: "openai/gpt-?", policy: recap, prepare_threshold: 0.4}
    - {model: "[ab]*-v[0-9]", policy: ranged}
`), "routes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	eff := cfg.WithDefaults(Config{})
	for _, tc := range []struct {
		model, name                         string
		pipeline                            []string
		single                              bool
		threshold, target, prepareThreshold float64
	}{
		{"claude-sonnet-4-5", "claude-*", []string{"lastn"}, true, 0.7, 0.6, 0.5},
		{"claude-", "claude-*", []string{"lastn"}, true, 0.7, 0.6, 0.5},
		{"claude-x/y", RouteDefault, []string{"ledger"}, true, 0.9, 0.6, 0.5}, // * does not cross /
		{"gpt-4o", "gpt-4o*", []string{"toolresult", "sliding"}, false, 0.9, 0.3, 0.5},
		{"gpt-4o-mini", "gpt-4o*", []string{"toolresult", "sliding"}, false, 0.9, 0.3, 0.5}, // the first match wins
		{"openai/gpt-5", "openai/gpt-?", []string{"recap"}, true, 0.9, 0.6, 0.4},
		{"openai/gpt-55", RouteDefault, []string{"ledger"}, true, 0.9, 0.6, 0.5},
		{"a-big-v7", "[ab]*-v[0-9]", []string{"ranged"}, true, 0.9, 0.6, 0.5},
		{"Claude-3", RouteDefault, []string{"ledger"}, true, 0.9, 0.6, 0.5}, // case-sensitive
		{"", RouteDefault, []string{"ledger"}, true, 0.9, 0.6, 0.5},
	} {
		rt := eff.ProxyRoute(tc.model)
		if rt.Name != tc.name || !slices.Equal(rt.Pipeline, tc.pipeline) || rt.Single != tc.single ||
			rt.Threshold != tc.threshold || rt.Target != tc.target || rt.PrepareThreshold != tc.prepareThreshold {
			t.Errorf("ProxyRoute(%q) = %+v, want %q %v single=%v %g %g %g", tc.model, *rt, tc.name, tc.pipeline, tc.single, tc.threshold, tc.target, tc.prepareThreshold)
		}
		// A config that skipped WithDefaults resolves the same way.
		if raw := cfg.ProxyRoute(tc.model); raw.Name != tc.name || !slices.Equal(raw.Pipeline, tc.pipeline) {
			t.Errorf("without defaults, ProxyRoute(%q) = %+v", tc.model, *raw)
		}
	}
	h := eff.ProxyRoute("claude-3").WithPipeline([]string{"sliding"})
	if h.Name != RouteHeader || !slices.Equal(h.Pipeline, []string{"sliding"}) || h.Threshold != 0.7 || !h.Single {
		t.Errorf("WithPipeline = %+v", *h)
	}
	if rt := eff.ProxyRoute("claude-3"); rt.Name != "claude-*" || rt.Pipeline[0] != "lastn" {
		t.Errorf("WithPipeline changed the shared route: %+v", *rt)
	}
	if got := eff.ConfiguredPolicies(); !slices.Contains(got, "never") || !slices.Contains(got, "toolresult") || !slices.Contains(got, "ranged") {
		t.Errorf("ConfiguredPolicies misses the routes' policies: %v", got)
	}
	// A route's target is at most its threshold.
	low, err := Parse([]byte("proxy: {target: 0.6, routes: [{model: x, policy: a, threshold: 0.4}]}"), "t")
	if err != nil {
		t.Fatal(err)
	}
	if rt := low.WithDefaults(Config{}).ProxyRoute("x"); rt.Target != 0.4 {
		t.Errorf("target %g above the route's threshold 0.4", rt.Target)
	}
}

func TestProxyRoutesInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty pattern", `proxy: {routes: [{model: "", policy: a}]}`, "proxy.routes[0].model: empty"},
		{"no pattern", `proxy: {routes: [{policy: a}]}`, "proxy.routes[0].model: empty"},
		{"bad pattern", `proxy: {routes: [{model: "gpt-[4", policy: a}]}`, `proxy.routes[0].model: "gpt-[4" is not a valid pattern`},
		{"trailing backslash", `proxy: {routes: [{model: "x", policy: a}, {model: 'gpt\', policy: a}]}`, "proxy.routes[1].model"},
		{"no policy", `proxy: {routes: [{model: "claude-*"}]}`, "proxy.routes[0] (claude-*): no policy or pipeline"},
		{"both", `proxy: {routes: [{model: "claude-*", policy: a, pipeline: [b]}]}`, "exclusive"},
		{"bad name", `proxy: {routes: [{model: "claude-*", policy: Ledger}]}`, `policy name "Ledger"`},
		{"bad name in pipeline", `proxy: {routes: [{model: "c*", pipeline: [a, "b c"]}]}`, `policy name "b c"`},
		{"long pipeline", `proxy: {routes: [{model: "c*", pipeline: [a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a]}]}`, "proxy.routes[0].pipeline"},
		{"threshold", `proxy: {routes: [{model: "c*", policy: a, threshold: 1.5}]}`, "proxy.routes[0].threshold"},
		{"target", `proxy: {routes: [{model: "c*", policy: a, target: -1}]}`, "proxy.routes[0].target"},
		{"prepare 1", `proxy: {routes: [{model: "c*", policy: a, prepare_threshold: 1}]}`, "proxy.routes[0].prepare_threshold"},
		{"prepare over threshold", `proxy: {routes: [{model: "c*", policy: a, threshold: 0.6, prepare_threshold: 0.7}]}`, "prepare_threshold 0.7 must be below the route's threshold 0.6"},
		{"inherited prepare over threshold", `proxy: {prepare_threshold: 0.6, routes: [{model: "c*", policy: a, threshold: 0.5}]}`, "prepare_threshold 0.6 must be below the route's threshold 0.5"},
		{"unknown key", `proxy: {routes: [{model: "c*", policy: a, window: 5}]}`, `unknown key "proxy.routes[0].window"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "p.yaml")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}

// BenchmarkProxyRoute: a lookup costs no allocation; the patterns were
// resolved when the config was loaded. "none" is a config without routes
// (every request takes the default), "four" one with four patterns of
// each kind (prefix, literal, class), looked up for five models.
func BenchmarkProxyRoute(b *testing.B) {
	for _, bc := range []struct{ name, yaml string }{
		{"none", "proxy: {policy: sliding}"},
		{"four", `
proxy:
  routes:
    - {model: "claude-*", policy: lastn}
    - {model: "gpt-4o", policy: sliding}
    - {model: "o[0-9]*", policy: sliding}
    - {model: "gemini-*", policy: sliding}
`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg, err := Parse([]byte(bc.yaml), "b.yaml")
			if err != nil {
				b.Fatal(err)
			}
			eff := cfg.WithDefaults(Config{})
			models := []string{"claude-sonnet-4-5", "gpt-4o", "o3-mini", "gemini-2.5-pro", "llama-3.1-70b"}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				eff.ProxyRoute(models[i%len(models)])
			}
		})
	}
}
