package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/hostilewasm"
	"github.com/compactd/compactd/internal/plugtest"
)

// TestCompileBudgetDaemon drops modules whose compile would take
// gigabytes (the 50M- and 2M-locals modules, a 62 MB file of empty
// functions, a megabyte of calls in one function) into a real daemon held
// in a memory cgroup of 1 GiB while a
// client calls a healthy policy: each is refused with a message naming
// its limit, the healthy policy serves every request, the kernel never
// kills the daemon, and the daemon stays up. Before the compile budget,
// the first of them grew the daemon to 8 GiB until the kernel killed it.
//
// The daemon is the compactd binary as users run it (`compactd serve`,
// without the race detector), as in TestHostileZoo: this test checks
// containment, not data races, and under -race reading the 62 MB
// module's sections alone took most of its 23 s. The host's and the
// registry's own tests run the compile budget under -race.
func TestCompileBudgetDaemon(t *testing.T) {
	t.Parallel()
	td := setup(t, "limits:\n  max_total_memory_mb: 512\n  max_compile_memory_mb: 256\n  plugins:\n    lastn: {call_timeout: 1m}\n", pluginLastn)
	td.served = true
	d := startChild(t, td)
	d.waitHealthy(2 * time.Minute)
	lim := limitMemory(t, d.cmd.Process.Pid, 1<<30)
	t.Logf("the daemon's memory: %s; %d MiB resident at the start", lim, procStatusKB(d.cmd.Process.Pid, "VmRSS:")>>10)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var served, failed int
	var firstFailure string
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := client.New(d.socket)
		defer c.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := c.Compact(context.Background(), &client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 3, "step": 1}, Messages: chatMessages(6)})
			if err != nil || len(r.Warnings) > 0 || len(r.Messages) != 5 {
				if failed++; firstFailure == "" {
					firstFailure = fmt.Sprintf("%v %+v", err, r)
				}
				continue
			}
			served++
		}
	}()

	for _, tc := range []struct {
		file string
		wasm []byte
		want string
	}{
		{"locals_50m.wasm", hostilewasm.Locals(50_000_000), "declares 50000000 locals in one function; the limit is 50000"},
		{"locals_2m.wasm", hostilewasm.Locals(2_000_000), "declares 2000000 locals in one function; the limit is 50000"},
		{"functions_62mb.wasm", hostilewasm.EmptyFunctions(15_500_000), "declares 15500000 functions; the limit is 1000000"},
		{"functions_600k.wasm", hostilewasm.EmptyFunctions(600_000), "the compile budget is 256 MiB (limits.max_compile_memory_mb)"},
		{"calls_1mb.wasm", hostilewasm.Calls(1 << 20), "the compile budget is 256 MiB (limits.max_compile_memory_mb)"},
	} {
		start := time.Now()
		writeRename(t, filepath.Join(td.plugins, tc.file), tc.wasm)
		var got client.Policy
		waitFor(t, tc.file+"'s error in /v1/policies", 3*time.Minute, func() bool {
			if d.exited() {
				t.Fatalf("the daemon exited with %d after %s (killed at its memory limit %d times); log:\n%s", d.code, tc.file, lim.oomKills(), d.Log())
			}
			got = d.policies()[tc.file]
			return got.Error != nil
		})
		if got.Serving || !strings.Contains(got.Error.Message, tc.want) {
			t.Errorf("%s: serving=%v, error %q; want it to contain %q", tc.file, got.Serving, got.Error.Message, tc.want)
		}
		t.Logf("%-20s %9d bytes, refused after %5.2fs (daemon peak RSS so far %4d MiB): %s", tc.file, len(tc.wasm), time.Since(start).Seconds(), d.peakRSS()>>20, got.Error.Message)
	}
	close(stop)
	wg.Wait()
	if served == 0 || failed > 0 {
		t.Errorf("the healthy policy served %d requests, %d failed (the first: %s)", served, failed, firstFailure)
	}
	if k := lim.oomKills(); k > 0 {
		t.Errorf("the kernel killed the daemon %d times at its memory limit (%s)", k, lim)
	}
	t.Logf("lastn served %d requests meanwhile; the daemon's peak RSS (VmHWM) %d MiB", served, d.peakRSS()>>20)
	d.stop()
}

// TestMemoryBudgetDaemon runs plugins under a memory budget that holds one
// instance (limits.max_total_memory_mb 256, each instance 128 MiB plus the
// 100 MiB stack reserve) in a real daemon under a memory cgroup, with
// concurrent requests: a gohostile call in its "loop" mode holds the only
// room for its whole call_timeout, so a second, and the lastn requests
// behind it, wait 2 s and get their input back unchanged with a warning
// naming the budget. Every answer is a 200, the daemon never crashes, and
// /metrics counts the refusals.
func TestMemoryBudgetDaemon(t *testing.T) {
	t.Parallel()
	td := setup(t, `limits:
  max_total_memory_mb: 256
  max_compile_memory_mb: 200
  plugin: {max_memory_mb: 128, max_instances: 2}
  plugins:
    gohostile: {call_timeout: 6s, work_budget: 1000000000000000}
    lastn: {call_timeout: 1m}
`, pluginLastn, "host/testdata/gohostile")
	d := startChild(t, td)
	d.waitHealthy(2 * time.Minute)
	limit := int64(1 << 30)
	if plugtest.Race {
		limit = 2 << 30
	}
	lim := limitMemory(t, d.cmd.Process.Pid, limit)
	if p := d.policies()["gohostile.wasm"]; !p.Serving {
		t.Fatalf("gohostile does not serve: %+v", p)
	}

	type answer struct {
		policy string
		r      *client.CompactResponse
		err    error
	}
	msgs := chatMessages(6)
	answers := make(chan answer, 8)
	send := func(policy string) {
		c := client.New(d.socket)
		defer c.Close()
		req := &client.CompactRequest{Policy: policy, Messages: msgs, Config: map[string]any{"mode": "loop"}}
		if policy == "lastn" {
			req.Config = map[string]any{"n": 3, "step": 1}
		}
		r, err := c.Compact(context.Background(), req)
		answers <- answer{policy, r, err}
	}
	go send("gohostile")
	go send("gohostile")
	for range 6 {
		go send("lastn")
	}
	refused := 0
	for range 8 {
		a := <-answers
		if a.err != nil {
			t.Errorf("%s: %v", a.policy, a.err)
			continue
		}
		budget := false
		for _, w := range a.r.Warnings {
			budget = budget || strings.Contains(w, "limits.max_total_memory_mb")
		}
		switch {
		case budget:
			refused++
			if len(a.r.Messages) != len(msgs) {
				t.Errorf("%s: refused by the budget with %d messages; want the input's %d, unchanged", a.policy, len(a.r.Messages), len(msgs))
			}
		case a.policy == "lastn" && (len(a.r.Warnings) > 0 || len(a.r.Messages) != 5):
			t.Errorf("lastn: %d messages, warnings %q", len(a.r.Messages), a.r.Warnings)
		case a.policy == "gohostile" && len(a.r.Warnings) == 0:
			t.Errorf("gohostile answered without a warning: %+v", a.r)
		}
		t.Logf("%-12s %d messages, warnings %q", a.policy, len(a.r.Messages), a.r.Warnings)
	}
	// The two gohostile calls cannot both run: one waited 2s for a
	// room the other held for 6s.
	if refused == 0 {
		t.Errorf("no request was refused by the memory budget")
	}
	metrics, err := d.c.Metrics(context.Background())
	if err != nil || !strings.Contains(metrics, "compactd_plugin_memory_budget_bytes 2.68435456e+08") && !strings.Contains(metrics, "compactd_plugin_memory_budget_bytes 268435456") ||
		strings.Contains(metrics, "compactd_plugin_memory_refused_total 0\n") {
		t.Errorf("/metrics does not show the budget and its refusals (%v):\n%s", err, grepLines(metrics, "compactd_plugin_memory"))
	}
	if d.exited() || lim.oomKills() > 0 {
		t.Fatalf("the daemon died (exit %d, killed at its memory limit %d times); log:\n%s", d.code, lim.oomKills(), d.Log())
	}
	r, err := d.c.Compact(context.Background(), &client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 3, "step": 1}, Messages: msgs})
	if err != nil || len(r.Warnings) > 0 || len(r.Messages) != 5 {
		t.Errorf("after the contention, lastn: %v %+v", err, r)
	}
	t.Logf("%d of 8 requests got their input back for want of room; the daemon's peak RSS %d MiB", refused, d.peakRSS()>>20)
	d.stop()
}
