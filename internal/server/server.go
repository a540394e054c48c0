// Package server is compactd's HTTP/JSON API, served on a Unix socket
// (and optionally on a loopback TCP port with a bearer token), and the
// daemon that wires the API to the registry, the compactor, the store and
// the config (Daemon, started by `compactd serve`).
//
// Endpoints (docs/api.md has examples):
//
//	POST /v1/compact            compact a conversation
//	GET  /v1/policies           plugin files and the policies they serve
//	GET  /v1/policies/{name}    one policy
//	POST /v1/policies/{name}/retry  load a plugin file again (lifts a quarantine)
//	GET  /v1/status             tracked conversations and totals
//	GET  /v1/config             the running config
//	PUT  /v1/config             a partial config update, written back
//	GET  /healthz               liveness: ok, starting or degraded
//	GET  /metrics               Prometheus text format
//	GET  /v1/openapi.yaml       the API's OpenAPI 3.1 document (also .json)
//	GET  /                      the status page (HTML; /conversation?id=ID)
//	POST /v1/chat/completions   the OpenAI-compatible proxy (internal/proxy)
//	POST /v1/messages           the Anthropic-compatible proxy
//	*    /v1/…                  other provider paths, forwarded by the proxy
//
// api/openapi.yaml describes them. Every error answer is
// {"error":{"code":…,"message":…}} with a stable code (see the Code
// constants, the document's ErrorCode) and the HTTP status it belongs to. A
// plugin failure is not an error: POST /v1/compact answers 200 with the
// input unchanged and a warning.
package server

import (
	"crypto/subtle"
	"fmt"
	"html/template"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/llm"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/tracing"
	"github.com/compactd/compactd/registry"
	"github.com/hashicorp/go-hclog"
)

// Options are what a Server serves.
type Options struct {
	// Tracer, if set, traces each /v1/compact request (nil: no tracing).
	Tracer    *tracing.Tracer
	Compactor *compactor.Compactor
	Registry  *registry.Registry
	Store     store.Backend
	Config    *config.Manager
	// Version is compactd's version, for GET /v1/status.
	Version string
	// LLMStats, if set, reports the LLM provider's counters on /metrics.
	LLMStats func() llm.Stats
	// MemoryBudget, if set, reports the plugins' memory budget
	// (limits.max_total_memory_mb) on /metrics.
	MemoryBudget func() host.MemoryBudget
	// Proxy, if set, serves the provider-compatible routes
	// (/v1/chat/completions, /v1/messages, and other /v1/ paths it
	// forwards) and manual compaction of proxied conversations.
	Proxy *proxy.Proxy
	// Logger receives request errors (discarded if nil).
	Logger hclog.Logger
	// Memory remembers the conversations of recent requests, so a request
	// that extends one is parsed and counted only for its new messages
	// (chat.Memory). Nil: one of chat.DefaultMemoryBytes.
	Memory *chat.Memory
	// Requests, if set, is the request log: GET /v1/requests and the
	// conversation page's timeline.
	Requests *requestlog.Log
}

// Server is the API's handler. It is safe for concurrent use.
type Server struct {
	opts    Options
	memory  *chat.Memory
	logger  hclog.Logger
	metrics *metrics
	// upstream and overhead are the request log's instruments.
	upstream *upstreamMetrics
	overhead *histogramVec
	started  time.Time
	mux      *http.ServeMux
	pages    *template.Template
	// answers pools the buffers /v1/compact's answers are assembled in.
	answers answerBuffers

	reloadMu  sync.Mutex
	reloadErr error     // the config file's last reload, if it failed
	reloadAt  time.Time // when

	upstreams upstreamChanges

	titles titleCache
}

// maxConfigBody caps a PUT /v1/config body.
const maxConfigBody = 1 << 20

// New returns a Server.
func New(opts Options) *Server {
	s := &Server{opts: opts, memory: opts.Memory, logger: opts.Logger, metrics: newMetrics(), started: time.Now(), mux: http.NewServeMux()}
	if s.memory == nil {
		s.memory = chat.NewMemory(chat.MemoryOptions{})
	}
	s.upstream = newUpstreamMetrics()
	s.overhead = newHistogramVec("compactd_request_overhead_seconds", "compactd's own time on a proxied or /v1/compact request (reading, counting, compacting; the upstream's time excluded), by kind.", latencyBuckets, "kind")
	if s.logger == nil {
		s.logger = hclog.NewNullLogger()
	}
	s.route("/v1/compact", "compact", map[string]handlerFunc{http.MethodPost: s.handleCompact})
	s.route("/v1/policies", "policies", map[string]handlerFunc{http.MethodGet: s.handlePolicies})
	s.route("/v1/policies/{name}", "policy", map[string]handlerFunc{http.MethodGet: s.handlePolicy})
	s.route("/v1/policies/{name}/retry", "policy_retry", map[string]handlerFunc{http.MethodPost: s.handleRetry})
	s.route("/v1/requests", "requests", map[string]handlerFunc{http.MethodGet: s.handleRequests})
	s.route("/v1/status", "status", map[string]handlerFunc{http.MethodGet: s.handleStatus})
	s.route("/v1/config", "config", map[string]handlerFunc{http.MethodGet: s.handleGetConfig, http.MethodPut: s.handlePutConfig})
	s.route("/healthz", "healthz", map[string]handlerFunc{http.MethodGet: s.handleHealth})
	s.route("/metrics", "metrics", map[string]handlerFunc{http.MethodGet: s.handleMetrics})
	s.routeOpenAPI()
	s.routePages()
	s.routeProxy()
	s.route("/", "not_found", map[string]handlerFunc{"*": s.notFound})
	return s
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) error {
	if hint := s.versionHint(r); hint != "" {
		return apiErrorf(http.StatusNotFound, CodeNotFound, "no endpoint %s %s: %s", r.Method, r.URL.Path, hint)
	}
	return apiErrorf(http.StatusNotFound, CodeNotFound, "no endpoint %s %s (GET /v1/openapi.yaml describes the API)", r.Method, r.URL.Path)
}

// versionHint says what a request for a path that is not found meant when
// the path exists under /v1 (the SDK's base URL lacks it) or has /v1
// twice (the base URL has it and the SDK adds it): "" otherwise.
func (s *Server) versionHint(r *http.Request) string {
	var alt string
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/v1/"):
		alt = r.URL.Path[len("/v1"):]
	case !strings.HasPrefix(r.URL.Path, "/v1/"):
		alt = "/v1" + r.URL.Path
	default:
		return ""
	}
	u := *r.URL
	u.Path, u.RawPath = alt, ""
	alias := r.Clone(r.Context())
	alias.URL = &u
	if _, pattern := s.mux.Handler(alias); pattern == "/" || pattern == "" || pattern == proxyForwardPattern {
		return "" // not one of compactd's endpoints (nor a route of its proxy)
	}
	host := "http://" + r.Host
	if r.Host == "" || r.TLS != nil {
		host = "https://" + r.Host
	}
	if alt == proxy.RouteAnthropic || strings.HasPrefix(alt, "/v1/messages/") {
		// Anthropic's SDKs add /v1 to their base URL themselves.
		return fmt.Sprintf("did you mean %s? Anthropic SDKs take the base URL %s (without /v1), OpenAI SDKs %s/v1", alt, host, host)
	}
	return fmt.Sprintf("did you mean %s? set the base URL to %s/v1 (OpenAI SDKs; Anthropic SDKs take %s, without /v1)", alt, host, host)
}

// handlerFunc serves one method of one endpoint; an error becomes the
// answer (see toAPIError).
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route registers an endpoint. Methods not listed get a 405 with Allow.
func (s *Server) route(pattern, name string, methods map[string]handlerFunc) {
	var allow []string
	for m := range methods {
		allow = append(allow, m)
	}
	if methods[http.MethodGet] != nil {
		allow = append(allow, http.MethodHead)
		methods[http.MethodHead] = methods[http.MethodGet]
	}
	allowed := strings.Join(sortStrings(allow), ", ")
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		s.metrics.inflight.Add(1)
		defer func() {
			s.metrics.inflight.Add(-1)
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler { // a proxied stream cut by its upstream: abort the connection too
					s.metrics.requests.add(1, name, "aborted")
					panic(p)
				}
				s.logger.Error("panic serving a request", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				if !sw.wrote {
					writeErrorFor(sw, r, apiErrorf(http.StatusInternalServerError, CodeInternal, "internal error"))
				}
			}
			s.metrics.requests.add(1, name, fmt.Sprint(sw.code))
			s.metrics.latency.observe(time.Since(start).Seconds(), name)
		}()
		h := methods[r.Method]
		if h == nil {
			h = methods["*"]
		}
		if h == nil {
			sw.Header().Set("Allow", allowed)
			writeErrorFor(sw, r, apiErrorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "%s takes %s, not %s", r.URL.Path, allowed, r.Method))
			return
		}
		if err := h(sw, r); err != nil {
			ae := toAPIError(err)
			if ae.Status >= 500 {
				s.logger.Error("request failed", "path", r.URL.Path, "error", err)
			}
			writeErrorFor(sw, r, ae)
		}
	})
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes and
// deadlines for proxied streams).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Handler returns the API for the Unix socket (no authentication: the
// socket is owner-only).
func (s *Server) Handler() http.Handler { return s.mux }

// proxied reports whether r goes to the proxy rather than to compactd's
// own API: one of the proxy's routes, or a path under /v1/ that no
// endpoint of compactd's serves and the proxy forwards (as the mux routes
// it, so /v1/status stays compactd's whatever upstreams are configured).
func (s *Server) proxied(r *http.Request) bool {
	if s.opts.Proxy == nil {
		return false
	}
	_, pattern := s.mux.Handler(r)
	if pattern == proxyForwardPattern {
		return s.opts.Proxy.Forwards(r)
	}
	for _, f := range proxy.Formats() {
		if pattern == f.Route() {
			return true
		}
	}
	return false
}

// TokenHandler returns the API behind a token, for the TCP listener.
// compactd's own endpoints take `Authorization: Bearer TOKEN` or
// `X-Compactd-Token: TOKEN`; proxied requests take only the latter, as
// their Authorization header is the provider's key (passed upstream
// untouched, never compared or logged here). The status page's requests
// may instead come from a browser that opened it with ?token=TOKEN once
// (see pageAuth).
func (s *Server) TokenHandler(token string) http.Handler {
	bearer := []byte("Bearer " + token)
	sessions := newPageSessions(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied := s.proxied(r)
		var got, want []byte
		if t := r.Header.Get(proxy.HeaderToken); t != "" || proxied {
			got, want = []byte(t), []byte(token)
		} else {
			got, want = []byte(r.Header.Get("Authorization")), bearer
		}
		if subtle.ConstantTimeCompare(got, want) == 1 {
			s.mux.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			s.handleBareHealth(w, r)
			return
		}
		if !proxied {
			if handled, ok := s.pageAuth(w, r, token, sessions); handled || ok {
				if ok {
					s.mux.ServeHTTP(w, r)
				}
				return
			}
		}
		s.metrics.requests.add(1, "unauthorized", "401")
		if proxied {
			s.opts.Proxy.Unauthorized(w, r, "proxied requests on compactd's TCP listener need the header "+proxy.HeaderToken+": <compactd token> (Authorization stays the provider's key)")
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="compactd"`)
		writeError(w, apiErrorf(http.StatusUnauthorized, CodeUnauthorized, "this listener needs Authorization: Bearer <token> or "+proxy.HeaderToken+": <token> (in a browser, open /?token=<token>)"))
	})
}
