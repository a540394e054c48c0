package host

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/host/internal/wasminstr"
	"github.com/tetratelabs/wazero/sys"
)

// module is a compiled plugin module on one of the two paths.
type module interface {
	// newInstance creates an instance ready to call.
	newInstance(ctx context.Context) (instance, error)
	// path names the path: "fast" or "extism".
	path() string
	// interpreted reports whether wazero's interpreter runs it.
	interpreted() bool
	close(ctx context.Context) error
}

// instance is one instantiated plugin. It serves one call at a time.
type instance interface {
	// call runs export on input. The output is valid until the next call.
	// A failure is a *PluginError without plugin name (the Plugin fills it).
	call(ctx context.Context, st *callState, export string, input []byte) ([]byte, *PluginError)
	// memoryBytes returns the size of the instance's linear memories.
	memoryBytes() uint64
	close(ctx context.Context)
}

// workBudget recognizes the traps of an instrumented module's work
// budget (package wasminstr): the guest traps in a function of its own,
// OutOfWork, which is the innermost frame of wazero's stack trace.
type workBudget struct {
	call, start uint64 // Limits.WorkBudget and StartWorkBudget, for messages
	frame       string // the end of OutOfWork's line in a stack trace
}

// newWorkBudget returns the budgets of a module instrumented as res; nil
// (no budget) if it was not.
func newWorkBudget(res *wasminstr.Result, limits Limits) *workBudget {
	if res == nil {
		return nil
	}
	// wazero names a function without a name (which the added ones
	// have not) by its index: "module.$index(params) results".
	return &workBudget{call: limits.WorkBudget, start: limits.StartWorkBudget, frame: ".$" + strconv.FormatUint(uint64(res.OutOfWork), 10) + "()"}
}

// exhausted reports whether err is the trap of a used-up budget.
func (w *workBudget) exhausted(err error) bool {
	if w == nil || err == nil {
		return false
	}
	const trace = "wasm stack trace:\n\t"
	msg := err.Error()
	i := strings.Index(msg, trace)
	if i < 0 {
		return false
	}
	frame := msg[i+len(trace):]
	if j := strings.IndexByte(frame, '\n'); j >= 0 {
		frame = frame[:j]
	}
	return strings.HasSuffix(frame, w.frame)
}

// detail says what the budget was.
func (w *workBudget) detail(start bool) string {
	if start {
		return fmt.Sprintf("work budget of %d steps (start_work_budget)", w.start)
	}
	return fmt.Sprintf("work budget of %d steps (work_budget)", w.call)
}

// classify turns a failed Wasm call into a failure kind. work is the
// module's work budget (nil if it has none).
func classify(ctx context.Context, err error, mem *memoryTracker, stderr *stderrBuffer, work *workBudget) *PluginError {
	pe := &PluginError{Err: err, Stderr: stderr.String()}
	var exit *sys.ExitError
	switch {
	case mem.takeRefused():
		pe.Kind, pe.Detail = ErrMemoryLimit, fmt.Sprintf("linear memory may not grow past %d MiB", mem.limit>>20)
	case work.exhausted(err):
		pe.Kind, pe.Detail = ErrWorkLimit, "used up its "+work.detail(false)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		pe.Kind, pe.Detail = ErrTimeout, "ran past its wall-clock time limit"
	case errors.Is(ctx.Err(), context.Canceled):
		pe.Kind, pe.Detail = ErrCanceled, "the caller went away"
	case errors.As(err, &exit):
		pe.Kind, pe.Detail = ErrTrap, fmt.Sprintf("exited with code %d", exit.ExitCode())
	default:
		pe.Kind, pe.Detail = ErrTrap, firstLine(err.Error())
	}
	return pe
}

// instantiateError reports a failed instantiation: the start section or
// _initialize used up its work budget, ran past its wall-clock limit
// (limit), hit the memory limit or trapped, or the module could not be
// instantiated at all.
func instantiateError(ctx context.Context, err error, mem *memoryTracker, stderr *stderrBuffer, work *workBudget, limit time.Duration) *PluginError {
	pe := classify(ctx, err, mem, stderr, work)
	if pe.Kind == ErrTrap && !strings.Contains(err.Error(), "wasm error") {
		pe.Kind, pe.Detail = ErrInvalidModule, "instantiating: "+firstLine(err.Error())
	}
	pe.Export = "instantiate"
	switch pe.Kind {
	case ErrTimeout:
		pe.Detail = "the start section or _initialize ran past its wall-clock time limit of " + limit.String() + " (call_timeout, or a minute if that is longer)"
	case ErrWorkLimit:
		pe.Detail = "the start section or _initialize used up its " + work.detail(true)
	}
	return pe
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// stderrBuffer keeps the beginning and the end of what a plugin wrote to
// stderr, for error messages: a Go guest's fatal error says what went wrong
// in its first line and dumps goroutines after it. It is safe for
// concurrent use.
type stderrBuffer struct {
	mu         sync.Mutex
	head, tail []byte
	half       int
	dropped    bool
}

func newStderrBuffer(size int) *stderrBuffer { return &stderrBuffer{half: size / 2} }

func (t *stderrBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if room := t.half - len(t.head); room > 0 {
		take := min(room, len(p))
		t.head = append(t.head, p[:take]...)
		p = p[take:]
	}
	t.tail = append(t.tail, p...)
	if len(t.tail) > t.half {
		t.dropped = true
		t.tail = append(t.tail[:0], t.tail[len(t.tail)-t.half:]...)
	}
	return n, nil
}

func (t *stderrBuffer) Reset() {
	t.mu.Lock()
	t.head, t.tail, t.dropped = t.head[:0], t.tail[:0], false
	t.mu.Unlock()
}

func (t *stderrBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	sep := ""
	if t.dropped {
		sep = " … "
	}
	return strings.Join(strings.Fields(string(t.head)+sep+string(t.tail)), " ")
}
