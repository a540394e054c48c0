package host

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/compactd/compactd/policyconfig"
)

func policyLayer(v map[string]any) policyconfig.Layer {
	return policyconfig.Layer{Source: "test", Values: v}
}

// sharedPlugins are plugins loaded once for the package's tests, by path
// ("fast" or "extism") and module (as for wasmbuild.ForTest), with the
// default limits, on an engine of their own that lives as long as the
// test binary. Loading a Go plugin costs seconds under -race (wazero
// decodes and validates it again on every compilation-cache hit, and the
// Extism path compiles it twice), so the tests that only call a plugin
// (its failures included: the host discards a poisoned instance and
// keeps serving, as a daemon's concurrent callers need) share one
// instead of loading their own. Tests that count a plugin's calls or
// instances, close it or set limits load their own (loadTestPlugin).
var sharedPlugins struct {
	mu      sync.Mutex
	engines map[bool]*Engine
	loads   map[sharedKey]*sharedLoad
}

type sharedKey struct {
	disableFast bool
	rel         string
}

type sharedLoad struct {
	once sync.Once
	p    *Plugin
	err  error
}

// sharedPlugin returns the shared plugin rel on the path disableFast
// picks (see sharedPlugins), loading it on first use.
func sharedPlugin(t testing.TB, disableFast bool, rel string) *Plugin {
	t.Helper()
	path := wasmbuild.ForTest(t, rel)
	sharedPlugins.mu.Lock()
	if sharedPlugins.engines == nil {
		sharedPlugins.engines = map[bool]*Engine{}
		sharedPlugins.loads = map[sharedKey]*sharedLoad{}
	}
	e := sharedPlugins.engines[disableFast]
	if e == nil {
		var err error
		if e, err = NewEngine(Config{DisableFastPath: disableFast, CacheDir: wasmbuild.TestCacheDir(t)}); err != nil {
			sharedPlugins.mu.Unlock()
			t.Fatal(err)
		}
		sharedPlugins.engines[disableFast] = e
	}
	key := sharedKey{disableFast, rel}
	l := sharedPlugins.loads[key]
	if l == nil {
		l = &sharedLoad{}
		sharedPlugins.loads[key] = l
	}
	sharedPlugins.mu.Unlock()
	l.once.Do(func() {
		wasm, err := os.ReadFile(path)
		if err != nil {
			l.err = err
			return
		}
		l.p, l.err = e.Load(context.Background(), wasm, LoadOptions{Source: path})
	})
	if l.err != nil {
		t.Fatalf("load %s: %v", rel, l.err)
	}
	return l.p
}
