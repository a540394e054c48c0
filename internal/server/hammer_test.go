package server

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// lastnVersion returns the C lastn plugin describing itself as version v
// (5 characters, the length of its own "0.4.0"): the describe document is
// a string literal in the module's data, so replacing the version there
// gives a real, different module (another hash, another version) without
// another build.
func lastnVersion(t testing.TB, v string) []byte {
	t.Helper()
	wasm, err := os.ReadFile(wasmbuild.ForTest(t, pluginLastn))
	if err != nil {
		t.Fatal(err)
	}
	marker := []byte(`"version":"`)
	i := bytes.Index(wasm, marker)
	if i < 0 || bytes.Contains(wasm[i+1:], marker) {
		t.Fatalf("want exactly one %s in lastn.wasm", marker)
	}
	start := i + len(marker)
	end := start + bytes.IndexByte(wasm[start:], '"')
	if end-start != len(v) {
		t.Fatalf("version %q must have the length of %q", v, wasm[start:end])
	}
	out := bytes.Clone(wasm)
	copy(out[start:end], v)
	return out
}

func writeRename(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestHotReloadHammer replaces a plugin many times while clients call
// POST /v1/compact without pause. No request may fail (an error, a
// warning, a failed stage); each new version must serve within a bounded
// time; a broken file keeps the last version serving with its error shown
// by GET /v1/policies; removing the file unloads the policy.
func TestHotReloadHammer(t *testing.T) {
	swaps, workers := 40, 8
	if testing.Short() {
		swaps, workers = 5, 4
	}
	td := setup(t, "")
	// Every version is new to the compilation cache: the daemon's own
	// way serves each from the interpreter at once, the compiler catching
	// up in the background.
	td.opts.CompileFirst = false
	path := filepath.Join(td.plugins, "lastn.wasm")
	os.WriteFile(path, lastnVersion(t, "00000"), 0o644)
	td.start(t)
	msgs := chatMessages(8)

	var requests, failures atomic.Int64
	var mu sync.Mutex
	seen := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := apiClient(t, td.Socket())
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Compact(bg, &client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 4, "step": 1}, Messages: msgs})
				requests.Add(1)
				switch {
				case err != nil:
					failures.Add(1)
					t.Errorf("request failed: %v", err)
				case len(resp.Warnings) > 0 || len(resp.Stats.Stages) != 1 || resp.Stats.Stages[0].Error != "" || len(resp.Messages) != 6:
					failures.Add(1)
					t.Errorf("request degraded: %d messages, warnings %v", len(resp.Messages), resp.Warnings)
				default:
					mu.Lock()
					seen[resp.Stats.Stages[0].Version]++
					mu.Unlock()
				}
			}
		}()
	}

	serving := func() string {
		p, err := td.c.Policy(bg, "lastn")
		if err != nil || !p.Serving {
			return ""
		}
		return p.Version
	}
	var latencies []time.Duration
	for i := 1; i <= swaps; i++ {
		v := fmt.Sprintf("%05d", i)
		data := lastnVersion(t, v)
		start := time.Now()
		if i%2 == 0 {
			writeRename(t, path, data) // as build tools do
		} else {
			os.WriteFile(path, data, 0o644) // as cp does: truncate, then write
		}
		waitFor(t, v+" serving", 2*time.Minute, func() bool { return serving() == v })
		latencies = append(latencies, time.Since(start))
	}

	// A broken file: the last version keeps serving, the error is shown.
	last := fmt.Sprintf("%05d", swaps)
	writeRename(t, path, []byte("\x00asm\x01\x00\x00\x00garbage"))
	waitFor(t, "the broken file's error", 2*time.Minute, func() bool {
		p, err := td.c.Policy(bg, "lastn")
		return err == nil && p.Error != nil
	})
	p, _ := td.c.Policy(bg, "lastn")
	if !p.Serving || p.Version != last || !strings.Contains(p.Error.Message, "not a valid compactd plugin module") {
		t.Errorf("after a broken file: %+v, error %+v", p, p.Error)
	}
	// Requests keep succeeding on the old version.
	more := requests.Load() + int64(2*workers)
	waitFor(t, "requests served by the last version", 2*time.Minute, func() bool { return requests.Load() >= more })
	close(stop)
	wg.Wait()

	// Removing the file unloads the policy.
	os.Remove(path)
	waitFor(t, "lastn unloaded", 2*time.Minute, func() bool {
		_, err := td.c.Policy(bg, "lastn")
		return client.IsCode(err, CodeUnknownPolicy)
	})
	if _, err := td.c.Compact(bg, &client.CompactRequest{Policy: "lastn", Messages: msgs}); !client.IsCode(err, CodeUnknownPolicy) {
		t.Errorf("compact after removal = %v", err)
	}
	if list, _ := td.c.Policies(bg); len(list) != 0 {
		t.Errorf("policies after removal: %+v", list)
	}

	if failures.Load() > 0 {
		t.Fatalf("%d of %d requests failed", failures.Load(), requests.Load())
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	t.Logf("%d requests, %d versions seen, 0 failed; write → new version serving: p50 %v, max %v over %d swaps",
		requests.Load(), len(seen), latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond), swaps)
	for v := range seen {
		if len(v) != 5 {
			t.Errorf("unexpected version %q served", v)
		}
	}
}

// TestRestart: plugin state, status counters and config changes made
// through the API survive a restart.
func TestRestart(t *testing.T) {
	t.Parallel()
	td := setup(t, "", pluginCounter).start(t)
	msgs := chatMessages(2)
	call := func(td *testDaemon) string {
		t.Helper()
		resp, err := td.c.Compact(bg, &client.CompactRequest{Policy: "counter", ConversationID: "c-restart", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Warnings) > 0 {
			t.Fatalf("warnings: %v", resp.Warnings)
		}
		return resp.Stats.Stages[0].Summary
	}
	if s := call(td); s != "call 1" {
		t.Fatalf("first call: %s", s)
	}
	call(td)
	if _, err := td.c.UpdateConfig(bg, map[string]any{"policies": map[string]any{"counter": map[string]any{"step": 10}}}); err != nil {
		t.Fatal(err)
	}
	if err := td.Shutdown(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(td.Socket()); !os.IsNotExist(err) {
		t.Errorf("socket left after shutdown: %v", err)
	}

	td2 := &testDaemon{dir: td.dir, plugins: td.plugins, config: td.config, opts: td.opts}
	td2.start(t)
	if s := call(td2); s != "call 12" {
		t.Errorf("after restart: %s, want call 12 (state 2 kept, step 10 from the saved config)", s)
	}
	c, err := td2.c.Conversation(bg, "c-restart")
	if err != nil || c.Requests != 3 {
		t.Errorf("status after restart = %+v, %v", c, err)
	}
}
