package host

import (
	"errors"
	"strings"
)

// Kinds of plugin failure. A *PluginError wraps exactly one of them; test
// with errors.Is(err, host.ErrTimeout).
var (
	// ErrInvalidModule: the bytes are not a loadable Wasm module, or the
	// module lacks a required export or imports something the host does not
	// provide.
	ErrInvalidModule = errors.New("not a valid compactd plugin module")
	// ErrABIMismatch: the plugin declares an ABI major version the host
	// does not speak.
	ErrABIMismatch = errors.New("unsupported plugin ABI version")
	// ErrInvalidDescription: describe returned something unusable.
	ErrInvalidDescription = errors.New("invalid plugin description")
	// ErrTimeout: a call (or an instantiation) ran past its wall-clock
	// time limit (Limits.CallTimeout).
	ErrTimeout = errors.New("plugin call timed out")
	// ErrWorkLimit: a call (or an instantiation) used up its work budget
	// (Limits.WorkBudget). Unlike ErrTimeout, it does not depend on the
	// machine: the same call on the same input fails the same way
	// anywhere.
	ErrWorkLimit = errors.New("plugin used up its work budget")
	// ErrCanceled: the caller canceled the call.
	ErrCanceled = errors.New("plugin call canceled")
	// ErrMemoryLimit: the plugin hit its memory limit.
	ErrMemoryLimit = errors.New("plugin exceeded its memory limit")
	// ErrCompileBudget: the module is over a structural limit, or its
	// compile is estimated to cost more than the compile budget
	// (Config.MaxCompileMemory); nothing compiled it.
	ErrCompileBudget = errors.New("module over the compile budget")
	// ErrMemoryBudget: the daemon's memory budget (Config.MaxTotalMemory)
	// had no room for a new instance (or a compile) in time; the call
	// did not run.
	ErrMemoryBudget = errors.New("the daemon's memory budget is full")
	// ErrOutputTooLarge: the output is larger than the output limit.
	ErrOutputTooLarge = errors.New("plugin output exceeds the size limit")
	// ErrTrap: the plugin trapped (a crash: unreachable, out-of-bounds
	// access, a Go panic that was not recovered, a call to proc_exit).
	ErrTrap = errors.New("plugin trapped")
	// ErrReported: the plugin returned a non-zero status, usually with an
	// error body (PluginError.Code holds its code).
	ErrReported = errors.New("plugin reported an error")
	// ErrInvalidOutput: the output is not the JSON the ABI requires.
	ErrInvalidOutput = errors.New("plugin returned invalid output")
	// ErrInvalidResult: the output is JSON but breaks a rule: a ref out of
	// range or out of order, a split tool pair, a changed system message or
	// final message.
	ErrInvalidResult = errors.New("plugin returned an invalid conversation")
	// ErrClosed: the plugin was closed (unloaded) before the call started.
	ErrClosed = errors.New("plugin is closed")
	// ErrPanic: loading or calling the plugin made the host panic (a bug
	// in compactd or a library that the plugin triggered). The panic was
	// recovered and logged with its stack; the instance is discarded.
	ErrPanic = errors.New("plugin made the host panic")
)

// PluginError is a failure of one plugin call or load. Its message names the
// plugin and the export.
type PluginError struct {
	Plugin  string // policy name (or file name before describe succeeded)
	Version string
	Export  string // "describe", "compact", ... or "load"
	Kind    error  // one of the Err* values above
	Code    string // the plugin's error code, for ErrReported
	Detail  string // what happened, for humans
	Stderr  string // the tail of what the plugin wrote to stderr, if anything
	Err     error  // an underlying error, if any
}

func (e *PluginError) Error() string {
	var b strings.Builder
	b.WriteString("plugin ")
	b.WriteString(e.Plugin)
	if e.Version != "" {
		b.WriteString("@" + e.Version)
	}
	if e.Export != "" {
		b.WriteString(": " + e.Export)
	}
	b.WriteString(": " + e.Kind.Error())
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.Stderr != "" {
		b.WriteString(" (stderr: " + e.Stderr + ")")
	}
	return b.String()
}

// Unwrap returns the kind and the underlying error.
func (e *PluginError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// poisons reports whether an instance that failed this way must be
// discarded rather than returned to the pool.
func poisons(kind error) bool {
	switch kind {
	case ErrReported, ErrInvalidResult, ErrOutputTooLarge:
		return false
	}
	return true
}
