package host

import (
	"runtime"
	"time"
)

// Limits bound what one plugin may use. A zero field takes its default.
type Limits struct {
	// MaxMemoryPages caps each linear memory of an instance, in 64 KiB
	// pages (default 4096 = 256 MiB).
	MaxMemoryPages uint32 `yaml:"max_memory_pages" json:"max_memory_pages,omitempty"`
	// CallTimeout caps the wall time of one call (default 10s). A plugin
	// that calls llm_complete needs a limit that covers the LLM's latency.
	CallTimeout time.Duration `yaml:"call_timeout" json:"call_timeout,omitempty"`
	// MaxOutputBytes caps the size of one call's output (default 32 MiB).
	MaxOutputBytes int `yaml:"max_output_bytes" json:"max_output_bytes,omitempty"`
	// MaxInstances caps the instances serving calls at once (default
	// GOMAXPROCS). Callers beyond it wait for a free instance.
	MaxInstances int `yaml:"max_instances" json:"max_instances,omitempty"`
}

// Default limits.
const (
	DefaultMaxMemoryPages = 4096
	DefaultCallTimeout    = 10 * time.Second
	DefaultMaxOutputBytes = 32 << 20
)

// withDefaults returns l with zero fields set to their defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxMemoryPages == 0 {
		l.MaxMemoryPages = DefaultMaxMemoryPages
	}
	if l.CallTimeout <= 0 {
		l.CallTimeout = DefaultCallTimeout
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if l.MaxInstances <= 0 {
		l.MaxInstances = runtime.GOMAXPROCS(0)
	}
	return l
}

// Over returns l with the non-zero fields of o replacing its own.
func (l Limits) Over(o Limits) Limits {
	if o.MaxMemoryPages != 0 {
		l.MaxMemoryPages = o.MaxMemoryPages
	}
	if o.CallTimeout != 0 {
		l.CallTimeout = o.CallTimeout
	}
	if o.MaxOutputBytes != 0 {
		l.MaxOutputBytes = o.MaxOutputBytes
	}
	if o.MaxInstances != 0 {
		l.MaxInstances = o.MaxInstances
	}
	return l
}
