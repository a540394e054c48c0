package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

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

// classify turns a failed Wasm call into a failure kind.
func classify(ctx context.Context, err error, mem *memoryTracker, stderr *stderrBuffer) *PluginError {
	pe := &PluginError{Err: err, Stderr: stderr.String()}
	var exit *sys.ExitError
	switch {
	case mem.takeRefused():
		pe.Kind, pe.Detail = ErrMemoryLimit, fmt.Sprintf("linear memory may not grow past %d MiB", mem.limit>>20)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		pe.Kind, pe.Detail = ErrTimeout, "ran past its time limit"
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
// _initialize ran past the time limit, hit the memory limit or trapped, or
// the module could not be instantiated at all.
func instantiateError(ctx context.Context, err error, mem *memoryTracker, stderr *stderrBuffer) *PluginError {
	pe := classify(ctx, err, mem, stderr)
	if pe.Kind == ErrTrap && !strings.Contains(err.Error(), "wasm error") {
		pe.Kind, pe.Detail = ErrInvalidModule, "instantiating: "+firstLine(err.Error())
	}
	pe.Export = "instantiate"
	if pe.Kind == ErrTimeout {
		pe.Detail = "the start section or _initialize ran past the time limit"
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
