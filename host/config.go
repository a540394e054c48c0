package host

import (
	"fmt"
	"runtime"
	"time"
)

// Limits bound what one plugin may use. A zero field takes its default;
// a non-zero field must be within its range (see Validate).
type Limits struct {
	// MaxMemoryPages caps each linear memory of an instance, in 64 KiB
	// pages (default 4096 = 256 MiB). A module that declares more initial
	// memory is refused at load.
	MaxMemoryPages uint32 `yaml:"max_memory_pages" json:"max_memory_pages,omitempty"`
	// CallTimeout caps the wall time of one call into the plugin (default
	// 10s): instantiation with its start section and _initialize,
	// describe, compact, and the host functions it calls. A plugin that
	// calls llm_complete needs a limit that covers the LLM's latency.
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

// The ranges Validate accepts for a non-zero limit.
const (
	// MinMemoryPages is 16 MiB: less leaves no room for the Extism kernel
	// and a Go guest's runtime.
	MinMemoryPages = 256
	// MaxMemoryPages is 4 GiB, the most a 32-bit Wasm memory can have.
	MaxMemoryPages = 65536
	MinCallTimeout = 10 * time.Millisecond
	MaxCallTimeout = time.Hour
	MinOutputBytes = 4 << 10
	MaxOutputBytes = 1 << 30
	MaxInstances   = 256
)

// Validate reports a field outside its range. Zero fields are valid: they
// take the defaults.
func (l Limits) Validate() error {
	switch {
	case l.MaxMemoryPages != 0 && (l.MaxMemoryPages < MinMemoryPages || l.MaxMemoryPages > MaxMemoryPages):
		return fmt.Errorf("memory limit of %d pages is out of range (allowed %d-%d pages, %d MiB-%d MiB)",
			l.MaxMemoryPages, MinMemoryPages, MaxMemoryPages, MinMemoryPages>>4, MaxMemoryPages>>4)
	case l.CallTimeout != 0 && (l.CallTimeout < MinCallTimeout || l.CallTimeout > MaxCallTimeout):
		return fmt.Errorf("call timeout of %v is out of range (allowed %v-%v)", l.CallTimeout, MinCallTimeout, MaxCallTimeout)
	case l.MaxOutputBytes != 0 && (l.MaxOutputBytes < MinOutputBytes || l.MaxOutputBytes > MaxOutputBytes):
		return fmt.Errorf("output limit of %d bytes is out of range (allowed %d-%d)", l.MaxOutputBytes, MinOutputBytes, MaxOutputBytes)
	case l.MaxInstances != 0 && (l.MaxInstances < 1 || l.MaxInstances > MaxInstances):
		return fmt.Errorf("instance limit of %d is out of range (allowed 1-%d)", l.MaxInstances, MaxInstances)
	}
	return nil
}

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
		l.MaxInstances = min(runtime.GOMAXPROCS(0), MaxInstances)
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
