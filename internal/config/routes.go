package config

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/compactd/compactd/abi"
)

// ProxyRoute is one entry of proxy.routes: the requests whose model
// matches Model run Policy or Pipeline, triggered at Threshold
// (docs/proxy.md, "Routes").
type ProxyRoute struct {
	// Model is a pattern the request's model is matched against, whole
	// and case-sensitively, as path.Match matches a name: * is any run of
	// characters but /, ? one character but /, [a-z] and [^a-z] one
	// character of (or not of) a class, and \ quotes the next character.
	// "claude-*", "gpt-4o*", "gpt-4o-mini".
	Model string `yaml:"model" json:"model"`
	// Policy or Pipeline (exactly one) is what a compaction of a matching
	// request runs.
	Policy   string   `yaml:"policy,omitempty" json:"policy,omitempty"`
	Pipeline []string `yaml:"pipeline,omitempty" json:"pipeline,omitempty"`
	// Threshold, Target and PrepareThreshold replace proxy.threshold,
	// proxy.target and proxy.prepare_threshold for matching requests (0
	// or absent: the proxy's).
	Threshold        float64 `yaml:"threshold,omitempty" json:"threshold,omitempty"`
	Target           float64 `yaml:"target,omitempty" json:"target,omitempty"`
	PrepareThreshold float64 `yaml:"prepare_threshold,omitempty" json:"prepare_threshold,omitempty"`
}

// MaxProxyRoutes bounds proxy.routes.
const MaxProxyRoutes = 1000

// Names Route.Name takes besides a route's pattern.
const (
	// RouteDefault: no route matched the model; proxy.policy or
	// proxy.pipeline (else the config's default) runs.
	RouteDefault = "default"
	// RouteHeader: the request's X-Compactd-Policy header named what runs.
	RouteHeader = "header"
)

// Route is what the proxy runs for one request: what a compaction runs
// and the ratios that trigger it, from the first proxy.routes entry that
// matches the request's model, else from the proxy block. Routes are
// resolved once per config load (Config.ProxyRoute only looks them up).
type Route struct {
	// Name says where the route came from: the matching entry's model
	// pattern, RouteDefault, or RouteHeader (WithPipeline).
	Name string
	// Pipeline is what a compaction runs (nil: no policy configured).
	Pipeline []string
	// Single is true when the pipeline was named as one policy (policy:
	// rather than pipeline:), which decides how a manual compaction's
	// config overrides are keyed.
	Single bool
	// Threshold, Target and PrepareThreshold are the usage ratios of the
	// trigger, of the compaction's target and of background preparation
	// (0: off), Target at most Threshold.
	Threshold, Target, PrepareThreshold float64
}

// WithPipeline returns r running pipeline instead, named RouteHeader:
// the X-Compactd-Policy header chose it; the ratios stay the route's.
func (r *Route) WithPipeline(pipeline []string) *Route {
	out := *r
	out.Name, out.Pipeline, out.Single = RouteHeader, pipeline, len(pipeline) == 1
	return &out
}

// routeTable is proxy.routes resolved for lookups: every entry's
// effective settings, and its pattern's kind, so that the common patterns
// (a literal name, a prefix followed by *) are matched without
// path.Match.
type routeTable struct {
	routes []routeEntry
	def    Route
}

type routeEntry struct {
	route Route
	// literal is the whole pattern when it has no special characters;
	// prefix is what comes before a single trailing * without other
	// special characters; otherwise path.Match runs.
	literal, prefix string
	kind            patternKind
}

type patternKind uint8

const (
	patternGlob patternKind = iota
	patternLiteral
	patternPrefix
)

func (e *routeEntry) matches(model string) bool {
	switch e.kind {
	case patternLiteral:
		return model == e.literal
	case patternPrefix:
		return strings.HasPrefix(model, e.prefix) && !strings.Contains(model[len(e.prefix):], "/")
	}
	ok, _ := path.Match(e.route.Name, model) // the pattern was checked at load
	return ok
}

// compileRoutes builds the proxy's route table from its effective
// settings (withDefaults calls it once per config load); def is the
// fallback's pipeline (proxy.policy or proxy.pipeline, else the config's
// default).
func (p *Proxy) compileRoutes(def []string, defSingle bool) {
	t := &routeTable{def: Route{Name: RouteDefault, Pipeline: def, Single: defSingle,
		Threshold: p.Threshold, Target: p.Target, PrepareThreshold: p.PrepareThreshold}}
	for _, r := range p.Routes {
		rt := p.effectiveRoute(r)
		e := routeEntry{route: rt}
		switch i := strings.IndexAny(r.Model, `*?[\`); {
		case i < 0:
			e.kind, e.literal = patternLiteral, r.Model
		case i == len(r.Model)-1 && r.Model[i] == '*':
			e.kind, e.prefix = patternPrefix, r.Model[:i]
		}
		t.routes = append(t.routes, e)
	}
	p.table = t
}

// effectiveRoute is r with the proxy's settings filled in.
func (p *Proxy) effectiveRoute(r ProxyRoute) Route {
	rt := Route{Name: r.Model, Pipeline: r.Pipeline, Threshold: r.Threshold, Target: r.Target, PrepareThreshold: r.PrepareThreshold}
	if r.Policy != "" {
		rt.Pipeline, rt.Single = []string{r.Policy}, true
	}
	if rt.Threshold == 0 {
		rt.Threshold = p.Threshold
	}
	if rt.Target == 0 {
		rt.Target = p.Target
	}
	rt.Target = min(rt.Target, rt.Threshold)
	if rt.PrepareThreshold == 0 {
		rt.PrepareThreshold = p.PrepareThreshold
	}
	return rt
}

// ProxyRoute returns the route a proxied request for model runs under:
// the first proxy.routes entry whose pattern matches it, else the
// default (proxy.policy or proxy.pipeline, else the config's default
// policy, with the proxy's ratios). The result is shared and must not be
// modified.
func (c *Config) ProxyRoute(model string) *Route {
	t := c.Proxy.table
	if t == nil {
		// A config that did not go through WithDefaults (tests): build
		// the table now, on a copy.
		p := c.Proxy
		def, single := c.proxyDefault()
		p.compileRoutes(def, single)
		t = p.table
	}
	for i := range t.routes {
		if t.routes[i].matches(model) {
			return &t.routes[i].route
		}
	}
	return &t.def
}

// proxyDefault returns the fallback route's pipeline, and whether it was
// named as a single policy.
func (c *Config) proxyDefault() ([]string, bool) {
	switch {
	case c.Proxy.Policy != "":
		return []string{c.Proxy.Policy}, true
	case len(c.Proxy.Pipeline) > 0:
		return c.Proxy.Pipeline, false
	}
	return c.DefaultPipeline(), c.Policy != ""
}

// validateRoutes checks proxy.routes: every pattern and policy name, the
// exclusive keys, and the ratios (each against the proxy's where the
// route leaves one to it).
func (p *Proxy) validateRoutes() error {
	if n := len(p.Routes); n > MaxProxyRoutes {
		return &RangeError{Key: "proxy.routes", Value: fmt.Sprintf("a list of %d routes", n), Allowed: fmt.Sprintf("0 to %d routes", MaxProxyRoutes)}
	}
	for i, r := range p.Routes {
		key := fmt.Sprintf("proxy.routes[%d]", i)
		if r.Model == "" {
			return fmt.Errorf("%s.model: empty; want a model name or a pattern such as claude-* (docs/proxy.md, \"Routes\")", key)
		}
		if _, err := path.Match(r.Model, ""); err != nil {
			return fmt.Errorf("%s.model: %q is not a valid pattern (%v): * matches any run of characters but /, ? one character, [...] a class, and \\ quotes the next character", key, r.Model, err)
		}
		named := fmt.Sprintf("%s (%s)", key, r.Model)
		switch {
		case r.Policy != "" && len(r.Pipeline) > 0:
			return fmt.Errorf("%s: policy and pipeline are exclusive: set one", named)
		case r.Policy == "" && len(r.Pipeline) == 0:
			return fmt.Errorf("%s: no policy or pipeline: a route names what its requests run", named)
		case len(r.Pipeline) > MaxPipeline:
			return &RangeError{Key: key + ".pipeline", Value: fmt.Sprintf("a list of %d policies", len(r.Pipeline)), Allowed: fmt.Sprintf("1 to %d policies", MaxPipeline)}
		}
		names := r.Pipeline
		if r.Policy != "" {
			names = []string{r.Policy}
		}
		for _, n := range names {
			if !abi.ValidName(n) {
				return fmt.Errorf("%s: policy name %q: want 1-64 characters of a-z, 0-9, _ and -, starting with a letter", named, n)
			}
		}
		for _, v := range []struct {
			name  string
			value float64
			below bool // strictly below 1
		}{{"threshold", r.Threshold, false}, {"target", r.Target, false}, {"prepare_threshold", r.PrepareThreshold, true}} {
			if t := v.value; t != 0 && !(t > 0 && (t < 1 || !v.below && t == 1)) {
				allowed := "a ratio above 0 and at most 1"
				if v.below {
					allowed = "a ratio above 0 and below the route's threshold"
				}
				return &RangeError{Key: key + "." + v.name, Value: strconv.FormatFloat(t, 'g', -1, 64), Allowed: allowed}
			}
		}
		threshold, prepare := r.Threshold, r.PrepareThreshold
		if threshold == 0 {
			threshold = p.Threshold
		}
		if threshold == 0 {
			threshold = DefaultProxyThreshold
		}
		if prepare == 0 {
			prepare = p.PrepareThreshold
		}
		if threshold > 0 && prepare > 0 && prepare >= threshold {
			return fmt.Errorf("%s: prepare_threshold %g must be below the route's threshold %g (a route's unset ratios are the proxy's): preparation runs ahead of the trigger", named, prepare, threshold)
		}
	}
	return nil
}

// routePolicies lists the policies proxy.routes names.
func (p *Proxy) routePolicies() []string {
	var out []string
	for _, r := range p.Routes {
		if r.Policy != "" {
			out = append(out, r.Policy)
		}
		out = append(out, r.Pipeline...)
	}
	return out
}
