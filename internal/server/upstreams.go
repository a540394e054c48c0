package server

import (
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/proxy"
)

// maxUpstreamChanges is how many upstream changes /v1/status keeps.
const maxUpstreamChanges = 16

// upstreamChanges remembers the proxy's upstream changes since the
// daemon started, for /v1/status and the status page. The log has them
// all.
type upstreamChanges struct {
	mu      sync.Mutex
	changes []client.UpstreamChange
}

// noteUpstreamChanges logs at warn level, and keeps for the status, each
// upstream a config change moved: whoever may change the config (the
// socket's owner, anyone with the TCP token) decides where the agents'
// provider keys go, so a move is never silent. by says how it was made.
func (s *Server) noteUpstreamChanges(ch *config.Change, by string) {
	if ch == nil || ch.Previous == nil {
		return
	}
	now := time.Now().UTC()
	for _, u := range []struct{ provider, old, new string }{
		{proxy.OpenAI, ch.Previous.Proxy.OpenAI.Upstream, ch.Config.Proxy.OpenAI.Upstream},
		{proxy.Anthropic, ch.Previous.Proxy.Anthropic.Upstream, ch.Config.Proxy.Anthropic.Upstream},
	} {
		if u.old == u.new {
			continue
		}
		s.logger.Warn("proxy upstream changed: this provider's requests, and the API keys they carry, now go to the new host",
			"provider", u.provider, "old_host", hostOf(u.old), "new_host", hostOf(u.new), "old", u.old, "new", u.new, "by", by)
		s.upstreams.mu.Lock()
		s.upstreams.changes = append(s.upstreams.changes, client.UpstreamChange{Provider: u.provider, Old: u.old, New: u.new, At: now, By: by})
		if n := len(s.upstreams.changes); n > maxUpstreamChanges {
			s.upstreams.changes = append([]client.UpstreamChange(nil), s.upstreams.changes[n-maxUpstreamChanges:]...)
		}
		s.upstreams.mu.Unlock()
	}
}

// hostOf returns a base URL's host ("" for none).
func hostOf(base string) string {
	if base == "" {
		return ""
	}
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	return u.Host
}

// proxyStatus is /v1/status's proxy part.
func (s *Server) proxyStatus(cfg *config.Config) client.ProxyStatus {
	s.upstreams.mu.Lock()
	changes := append([]client.UpstreamChange{}, s.upstreams.changes...)
	s.upstreams.mu.Unlock()
	return client.ProxyStatus{
		Upstreams:           client.ProxyUpstreams{OpenAI: cfg.Proxy.OpenAI.Upstream, Anthropic: cfg.Proxy.Anthropic.Upstream},
		AllowUpstreamChange: cfg.Proxy.UpstreamChangeAllowed(),
		UpstreamChanges:     changes,
	}
}

// requestOrigin says where a config change came from, for the log and
// the status: the listener, and on TCP the peer's address.
func requestOrigin(r *http.Request) string {
	what := r.Method + " " + r.URL.Path
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a.Network() == "unix" {
		return what + " on the Unix socket"
	}
	return what + " on the TCP listener from " + r.RemoteAddr
}
