package host

import (
	"fmt"
	"runtime"
	"time"

	"github.com/compactd/compactd/host/internal/wasminstr"
)

// Limits bound what one plugin may use. A zero field takes its default;
// a non-zero field must be within its range (see Validate).
type Limits struct {
	// MaxMemoryPages caps each linear memory of an instance, in 64 KiB
	// pages (default 4096 = 256 MiB). A module that declares more initial
	// memory is refused at load.
	MaxMemoryPages uint32 `yaml:"max_memory_pages" json:"max_memory_pages,omitempty"`
	// CallTimeout caps the wall time of one call into the plugin (default
	// 10s): describe, compact, should_compact, and the host functions it
	// calls. A plugin that calls llm_complete needs a limit that covers
	// the LLM's latency. Instantiation (the start section and
	// _initialize) has a wall-clock limit of CallTimeout or
	// MinStartTimeout, whichever is longer: StartWorkBudget bounds it,
	// and a busy machine must not keep a healthy plugin from loading.
	CallTimeout time.Duration `yaml:"call_timeout" json:"call_timeout,omitempty"`
	// WorkBudget caps the work of one call into the plugin (describe,
	// compact, should_compact), in steps: loop iterations and entries of
	// functions that call, counted by the guest itself (package
	// wasminstr), so it does not depend on the machine's speed or load. A
	// call that uses it up fails with ErrWorkLimit, at the same step on
	// any machine, compiled or interpreted, however busy. Default
	// DefaultWorkBudget.
	WorkBudget uint64 `yaml:"work_budget" json:"work_budget,omitempty"`
	// StartWorkBudget is the same for an instantiation: the start
	// section, and then _initialize, may each take this many steps.
	// Default DefaultStartWorkBudget.
	StartWorkBudget uint64 `yaml:"start_work_budget" json:"start_work_budget,omitempty"`
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
	// DefaultWorkBudget is two hundred times what the heaviest built-in
	// policy takes on a 3,000-message conversation (RATIONALE.md,
	// "Limits that count work").
	DefaultWorkBudget = 1_000_000_000
	// DefaultStartWorkBudget is a thousand times what a Go plugin's
	// _initialize takes.
	DefaultStartWorkBudget = 50_000_000
	// MinStartTimeout is the least wall-clock limit of an instantiation
	// (the start section and _initialize): a backstop behind WorkBudget.
	MinStartTimeout = time.Minute
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
	// MinWorkBudget is a million steps (for either budget): a Go
	// plugin's _initialize takes some 40,000, a call of the built-in
	// policies up to a few million on thousands of messages.
	MinWorkBudget = 1_000_000
	// MaxWorkBudget is 10^15 steps: days of work.
	MaxWorkBudget = 1_000_000_000_000_000
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
	case l.WorkBudget != 0 && (l.WorkBudget < MinWorkBudget || l.WorkBudget > MaxWorkBudget):
		return fmt.Errorf("work budget of %d steps is out of range (allowed %d-%d)", l.WorkBudget, uint64(MinWorkBudget), uint64(MaxWorkBudget))
	case l.StartWorkBudget != 0 && (l.StartWorkBudget < MinWorkBudget || l.StartWorkBudget > MaxWorkBudget):
		return fmt.Errorf("start work budget of %d steps is out of range (allowed %d-%d)", l.StartWorkBudget, uint64(MinWorkBudget), uint64(MaxWorkBudget))
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
	if l.WorkBudget == 0 {
		l.WorkBudget = DefaultWorkBudget
	}
	if l.StartWorkBudget == 0 {
		l.StartWorkBudget = DefaultStartWorkBudget
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
	if o.WorkBudget != 0 {
		l.WorkBudget = o.WorkBudget
	}
	if o.StartWorkBudget != 0 {
		l.StartWorkBudget = o.StartWorkBudget
	}
	return l
}

// instrumentOptions are the wasminstr options that enforce the work
// budget (keepStart: the start section stays where the Extism SDK runs
// it, inside instantiation).
func (l Limits) instrumentOptions(keepStart bool) wasminstr.Options {
	return wasminstr.Options{CallBudget: refills(l.WorkBudget), StartBudget: refills(l.StartWorkBudget), KeepStart: keepStart}
}

// refills converts a budget in steps to wasminstr's refills of
// wasminstr.Fuel steps, rounding up.
func refills(steps uint64) uint64 { return (steps + wasminstr.Fuel - 1) / wasminstr.Fuel }
