package proxy

import (
	"cmp"
	"slices"
	"sync"

	"github.com/compactd/compactd/internal/wire"
)

// The faults of an upstream the proxy counts (Proxy.Faults; the daemon's
// /metrics reports them as compactd_proxy_upstream_faults_total).
const (
	// FaultTimeout: no response headers within proxy.timeout (a 504).
	FaultTimeout = "timeout"
	// FaultStalled: silent for proxy.read_timeout after its headers (a
	// 504, or a stream's error event).
	FaultStalled = "stalled"
	// FaultEventTooLarge: a stream line or event over
	// proxy.max_event_bytes (the stream's error event).
	FaultEventTooLarge = "event_too_large"
	// FaultAnswerTooLarge: a non-streamed answer over
	// proxy.max_event_bytes (passed through, its usage not read).
	FaultAnswerTooLarge = "answer_too_large"
	// FaultUnreachable: the connection failed (a 502).
	FaultUnreachable = "unreachable"
	// FaultUsageRefused: usage counts that are not whole numbers from 0
	// to 2^53 (ignored).
	FaultUsageRefused = "usage_refused"
)

// Fault counts one fault of one provider's upstream.
type Fault struct {
	Provider string
	Fault    string
	Count    uint64
}

// faults counts Faults by provider and fault.
type faults struct {
	mu sync.Mutex
	n  map[[2]string]uint64
}

func (p *Proxy) fault(prov wire.Format, fault string) {
	p.faults.mu.Lock()
	defer p.faults.mu.Unlock()
	if p.faults.n == nil {
		p.faults.n = map[[2]string]uint64{}
	}
	p.faults.n[[2]string{prov.Provider(), fault}]++
}

// Faults returns the upstream faults counted since the proxy was made,
// by provider, then fault.
func (p *Proxy) Faults() []Fault {
	p.faults.mu.Lock()
	out := make([]Fault, 0, len(p.faults.n))
	for k, n := range p.faults.n {
		out = append(out, Fault{Provider: k[0], Fault: k[1], Count: n})
	}
	p.faults.mu.Unlock()
	slices.SortFunc(out, func(a, b Fault) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Fault, b.Fault))
	})
	return out
}
