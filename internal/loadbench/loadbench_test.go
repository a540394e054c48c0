package loadbench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/server"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
)

var bg = context.Background()

// fixtureSet loads a set from the repository's fixtures.
func fixtureSet(t testing.TB, name string) *Set {
	t.Helper()
	dir, err := dataset.FixtureDir()
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadSet(name, dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dataSet loads a set from the full data when $COMPACTD_DATA names it,
// else from the fixtures.
func dataSet(t testing.TB, name string) *Set {
	t.Helper()
	dir := os.Getenv("COMPACTD_DATA")
	if dir == "" {
		return fixtureSet(t, name)
	}
	s, err := LoadSet(name, dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serveInProcess serves h on a Unix socket in a temporary directory.
func serveInProcess(t testing.TB, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return socket
}

func TestSets(t *testing.T) {
	for _, name := range []string{"tau-bench", "mini-swe"} {
		s := fixtureSet(t, name)
		if s.Requests == 0 || len(s.Convs) == 0 || s.MeanBytes <= 0 {
			t.Errorf("%s: %d requests, %d conversations, mean %v", name, s.Requests, len(s.Convs), s.MeanBytes)
		}
		for ci, turns := range s.Turns {
			for _, n := range turns {
				var m struct{ Role string }
				if err := json.Unmarshal(s.Convs[ci][n], &m); err != nil || m.Role != "assistant" {
					t.Fatalf("%s: conversation %d: prefix %d is not followed by an assistant message", name, ci, n)
				}
			}
		}
	}
	if _, err := SetFile("nope"); err == nil {
		t.Error("unknown set accepted")
	}
}

// TestOrders: an interleaved or shuffled pass sends every request of the
// set exactly once; interleaved takes every conversation's first turn
// before any second; shuffled sends some conversation's turns out of
// order; an unknown order is refused.
func TestOrders(t *testing.T) {
	set := fixtureSet(t, "tau-bench")
	if len(set.Convs) < 2 {
		t.Fatalf("the fixture has %d conversations; the test needs two", len(set.Convs))
	}
	all := map[request]bool{}
	for ci, turns := range set.Turns {
		for _, n := range turns {
			all[request{ci, n}] = true
		}
	}
	for _, order := range []string{OrderInterleaved, OrderShuffled} {
		s, err := set.InOrder(order)
		if err != nil {
			t.Fatal(err)
		}
		if s.Name != set.Name+" "+order || s.Requests != set.Requests || set.Order != "" {
			t.Errorf("%s: name %q, %d requests (want %d); the original's order %q", order, s.Name, s.Requests, set.Requests, set.Order)
		}
		q := s.queue()
		got := map[request]bool{}
		for _, r := range q {
			got[r] = true
		}
		if len(q) != set.Requests || len(got) != len(all) {
			t.Fatalf("%s: %d requests, %d distinct; want %d, each once", order, len(q), len(got), len(all))
		}
		for r := range all {
			if !got[r] {
				t.Fatalf("%s: request %+v not sent", order, r)
			}
		}
		last := map[int]int{} // conversation -> the longest prefix sent so far
		backwards := false
		for i, r := range q {
			if r.N < last[r.Conv] {
				backwards = true
			}
			last[r.Conv] = max(last[r.Conv], r.N)
			if order == OrderInterleaved && i < len(set.Convs) && r != (request{i, set.Turns[i][0]}) {
				t.Errorf("interleaved: request %d is %+v; want conversation %d's first turn", i, r, i)
			}
		}
		if backwards != (order == OrderShuffled) {
			t.Errorf("%s: some conversation's turns arrive out of order: %v", order, backwards)
		}
	}
	if c, err := set.InOrder(""); err != nil || c.Order != OrderConversation || c.Name != set.Name {
		t.Errorf("the default order: %+v, %v", c, err)
	}
	if _, err := set.InOrder("backwards"); err == nil || !strings.Contains(err.Error(), "shuffled") {
		t.Errorf("an unknown order: %v; want an error naming the known ones", err)
	}
}

// TestBaselines runs both baselines in-process and checks what they answer.
func TestBaselines(t *testing.T) {
	set := fixtureSet(t, "tau-bench")
	msgs := set.Convs[0][:set.Turns[0][len(set.Turns[0])-1]]
	for _, name := range []string{"echo", "json"} {
		h, err := Baseline(name)
		if err != nil {
			t.Fatal(err)
		}
		socket := serveInProcess(t, h)
		c := newLoadClient(socket)
		_, body, err := c.post(bg, Body{Policy: "sliding", Model: "gpt-4o"}, msgs)
		c.close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var resp struct{ Messages []map[string]any }
		if err := json.Unmarshal(body, &resp); err != nil || len(resp.Messages) != len(msgs) {
			t.Errorf("%s: answer %.200s: %v (%d messages, want %d)", name, body, err, len(resp.Messages), len(msgs))
		}
		for _, order := range []string{OrderConversation, OrderShuffled} {
			s, err := set.InOrder(order)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Load(bg, LoadOptions{Socket: socket, Set: s, Body: Body{Policy: name}, Clients: 2, Warmup: 0, MinTime: time.Millisecond})
			if err != nil {
				t.Fatalf("%s, %s: %v", name, order, err)
			}
			if res.Requests != set.Requests || res.ReqPerSec <= 0 || res.P99 < res.P50 {
				t.Errorf("%s, %s: %+v, want %d requests", name, order, res, set.Requests)
			}
		}
	}
	if _, err := Baseline("nope"); err == nil {
		t.Error("unknown baseline accepted")
	}
}

// TestLoadFails checks that a failing answer fails the run.
func TestLoadFails(t *testing.T) {
	socket := serveInProcess(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusTeapot)
	}))
	_, err := Load(bg, LoadOptions{Socket: socket, Set: fixtureSet(t, "tau-bench"), Body: Body{Policy: "x"}, MinTime: time.Millisecond})
	if err == nil {
		t.Fatal("a run of failed requests succeeded")
	}
}

func TestProc(t *testing.T) {
	pid := os.Getpid()
	cpu, err := ProcCPU(pid)
	if err != nil || cpu <= 0 {
		t.Fatalf("ProcCPU: %v %v", cpu, err)
	}
	m, err := ProcMemory(pid)
	if err != nil || m.RSS <= 0 || m.Peak < m.RSS {
		t.Fatalf("ProcMemory: %+v %v", m, err)
	}
}

// startInProcess starts a compactd daemon in this process, with the given
// plugins.
func startInProcess(t testing.TB, cfg string, plugins ...string) *server.Daemon {
	t.Helper()
	testenv.Integration(t, "a daemon")
	dir, err := os.MkdirTemp("", "lbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pdir := filepath.Join(dir, "plugins")
	os.MkdirAll(pdir, 0o755)
	for _, rel := range plugins {
		src := wasmbuild.ForTest(t, rel)
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(pdir, filepath.Base(src)), b, 0o644)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if cfg != "" {
		os.WriteFile(cfgPath, []byte(cfg), 0o600)
	}
	d, err := server.Start(bg, server.DaemonOptions{
		ConfigPath: cfgPath,
		Getenv:     func(string) string { return "" },
		Defaults: config.Config{Socket: filepath.Join(dir, "s.sock"), PluginsDir: pdir,
			StateDir: filepath.Join(dir, "state"), CacheDir: wasmbuild.TestCacheDir(t)},
		Version: "bench", CompileFirst: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(bg) })
	if err := waitCompiledAt(bg, d.Socket(), ""); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCompactdLoad runs the load against a real daemon on the fixtures,
// checking every answer.
func TestCompactdLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and loads a Go plugin")
	}
	d := startInProcess(t, "", "plugins/sliding")
	set := fixtureSet(t, "tau-bench")
	res, err := Load(bg, LoadOptions{Socket: d.Socket(), Set: set, Body: Body{Policy: "sliding", Model: "gpt-4o"},
		Clients: 2, Warmup: 1, MinTime: time.Millisecond, Check: CheckCompact})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != set.Requests {
		t.Errorf("%d requests measured, want %d", res.Requests, set.Requests)
	}
}

// BenchmarkDaemon runs every turn prefix of a set through a daemon in
// this process, so a CPU profile shows where compactd's time goes (the
// command in ./loadbench measures the daemon as its own process):
//
//	COMPACTD_DATA=../shared/data go test -run '^$' -bench Daemon -benchtime 1x \
//	  -cpuprofile cpu.out ./internal/loadbench/
func BenchmarkDaemon(b *testing.B) {
	policies := []string{"sliding", "deterministic"}
	d := startInProcess(b, "", "plugins/sliding", "plugins/deterministic")
	for _, name := range []string{"tau-bench", "mini-swe"} {
		set := dataSet(b, name)
		for _, p := range policies {
			b.Run(fmt.Sprintf("%s/%s", name, p), func(b *testing.B) {
				opts := LoadOptions{Socket: d.Socket(), Set: set, Body: Body{Policy: p, Model: "gpt-4o"}, Clients: 2, Warmup: 1,
					MinTime: time.Nanosecond, Check: CheckCompact}
				if _, err := Load(bg, opts); err != nil { // warm-up
					b.Fatal(err)
				}
				opts.Warmup, opts.Check = 0, nil
				b.ResetTimer()
				requests := 0
				var elapsed time.Duration
				for i := 0; i < b.N; i++ {
					res, err := Load(bg, opts)
					if err != nil {
						b.Fatal(err)
					}
					requests += res.Requests
					elapsed += res.Elapsed
				}
				b.ReportMetric(float64(requests)/elapsed.Seconds(), "req/s")
			})
		}
	}
}

// BenchmarkTurn alternates the requests of N and N+1 turns of one long
// conversation through a daemon in this process, for profiles of the
// per-turn path:
//
//	COMPACTD_DATA=../shared/data go test -run '^$' -bench Turn -cpuprofile cpu.out ./internal/loadbench/
func BenchmarkTurn(b *testing.B) {
	d := startInProcess(b, "", "plugins/sliding", "plugins/deterministic")
	base, err := LongConversation(dataSet(b, "mini-swe"), 504)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{"sliding", "deterministic"} {
		for _, n := range []int{10, 100, 500} {
			b.Run(fmt.Sprintf("%s/N=%d", p, n), func(b *testing.B) {
				c := newLoadClient(d.Socket())
				defer c.close()
				end := unitEnd(base, n)
				body := Body{Policy: p, Model: "gpt-4o"}
				for i := 0; i < 2; i++ { // warm up
					for _, msgs := range [][]json.RawMessage{base[:n], base[:end]} {
						if _, _, err := c.post(bg, body, msgs); err != nil {
							b.Fatal(err)
						}
					}
				}
				for b.Loop() {
					if _, _, err := c.post(bg, body, base[:n]); err != nil {
						b.Fatal(err)
					}
					if _, _, err := c.post(bg, body, base[:end]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
