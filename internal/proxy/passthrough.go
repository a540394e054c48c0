package proxy

import (
	"cmp"
	"slices"
	"strings"
	"sync"
)

// Why a request went upstream without compaction because compactd did not
// understand it (Proxy.Passthroughs; /metrics reports them as
// compactd_proxy_uncompacted_total). Each such request carries an
// X-Compactd-Warning saying why, and each reason is logged once per
// conversation.
const (
	// PassPath: a path compactd does not compact (forwarded as it is).
	PassPath = "path"
	// PassUnreadable: the body is not the format's JSON shape.
	PassUnreadable = "unreadable"
	// PassUnsupported: valid input compactd does not convert (an item
	// type it does not know).
	PassUnsupported = "unsupported"
	// PassProviderHistory: the Responses API's previous_response_id (the
	// history is on the provider's side).
	PassProviderHistory = "previous_response_id"
	// PassTooLarge: a body over limits.max_body_bytes.
	PassTooLarge = "too_large"
)

// Passthrough counts requests of one path forwarded uncompacted for one
// reason.
type Passthrough struct {
	Path   string
	Reason string
	Count  uint64
}

// maxPaths bounds the distinct paths counted (forwarded paths are the
// client's to choose); later ones are counted as "other".
const maxPaths = 64

// maxLogged bounds the (conversation, reason) pairs remembered as logged;
// past it the set starts again, so a reason is logged again at worst.
const maxLogged = 4096

// passthroughs counts Passthroughs and remembers what was logged.
type passthroughs struct {
	mu     sync.Mutex
	n      map[[2]string]uint64
	logged map[[2]string]bool
	paths  map[string]struct{}
}

// note counts one request and reports whether its (conversation,
// reason) is new to the log.
func (t *passthroughs) note(path, reason, conversation string) (log bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n, t.logged, t.paths = map[[2]string]uint64{}, map[[2]string]bool{}, map[string]struct{}{}
	}
	label := path
	if _, ok := t.paths[path]; !ok {
		if len(t.paths) >= maxPaths {
			label = "other"
		} else {
			t.paths[path] = struct{}{}
		}
	}
	t.n[[2]string{label, reason}]++
	key := [2]string{conversation, reason}
	if conversation == "" {
		key[0] = "path " + path
	}
	if t.logged[key] {
		return false
	}
	if len(t.logged) >= maxLogged {
		clear(t.logged)
	}
	t.logged[key] = true
	return true
}

// Passthroughs returns the requests forwarded uncompacted because compactd
// did not understand their path or shape, by path, then reason.
func (p *Proxy) Passthroughs() []Passthrough {
	p.passed.mu.Lock()
	out := make([]Passthrough, 0, len(p.passed.n))
	for k, n := range p.passed.n {
		out = append(out, Passthrough{Path: k[0], Reason: k[1], Count: n})
	}
	p.passed.mu.Unlock()
	slices.SortFunc(out, func(a, b Passthrough) int {
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

// doubledVersion returns the path with its doubled /v1 made single
// ("/v1/v1/messages" → "/v1/messages"), or "" when it is not doubled.
func doubledVersion(path string) string {
	if strings.HasPrefix(path, "/v1/v1/") {
		return path[len("/v1"):]
	}
	return ""
}
