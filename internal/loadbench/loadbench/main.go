// Command loadbench measures compactd over its Unix socket against an echo
// server and an encoding/json service on the same requests (package
// loadbench), and writes the tables as markdown. `make bench` runs it
// (scripts/benchmarks.sh) and puts the tables in docs/benchmarks.md.
//
//	go run ./internal/loadbench/loadbench -data ../shared/data
//	go run ./internal/loadbench/loadbench -sets tau-bench -targets json,sliding -clients 4
//	go run ./internal/loadbench/loadbench -targets json,ledger -orders conversation,shuffled
//	go run ./internal/loadbench/loadbench -targets json,ledger@before,ledger -rounds 3 -before-bin OLD/compactd -before-plugins OLD/plugins
//	go run ./internal/loadbench/loadbench -fleet -load=false -turns=false -lifecycle=false
//
// It builds compactd and the built-in plugins unless -bin and -plugins
// name them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/loadbench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "baseline" {
		fs := flag.NewFlagSet("baseline", flag.ExitOnError)
		mode := fs.String("mode", "echo", "`echo` or json")
		socket := fs.String("socket", "", "Unix socket `path`")
		fs.Parse(os.Args[2:])
		if err := loadbench.ServeBaseline(ctx, *mode, *socket); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench baseline:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	data := flag.String("data", "", "data `directory` (default: $COMPACTD_DATA or ../shared/data)")
	sets := flag.String("sets", "tau-bench,mini-swe", "data sets, comma-separated")
	targets := flag.String("targets", "echo,json,ledger,sliding,deterministic", "targets: echo, json, or a compactd policy, comma-separated")
	orders := flag.String("orders", loadbench.OrderConversation, "the orders each set's requests are sent in, comma-separated: conversation (each conversation's turns in order by one client), interleaved (every conversation's first turn, then every second, ...) or shuffled (every request in a random order); each is a column of its own")
	clients := flag.Int("clients", 2, "concurrent clients")
	warmup := flag.Int("warmup", 1, "passes over a set before measuring")
	minTime := flag.Duration("min-time", 3*time.Second, "measured passes repeat until this long")
	rounds := flag.Int("rounds", 1, "rounds per set: the -targets list runs this many times over, the targets taking turns, and the summary gives each target's median over the rounds, its ratios to the json and echo of the same round (a machine's load drifts between runs and moves a target and its baseline alike)")
	bin := flag.String("bin", "", "compactd `binary` (default: build it)")
	plugins := flag.String("plugins", "", "plugins `directory` (default: build them)")
	out := flag.String("out", "", "write the markdown to this `file` (default stdout)")
	doLoad := flag.Bool("load", true, "measure the load table")
	doTurns := flag.Bool("turns", true, "measure the cost of one turn against the history's length")
	turnPolicies := flag.String("turn-policies", "", "policies for -turns, comma-separated (default: every plugin)")
	turnLengths := flag.String("turn-lengths", "10,100,500", "history lengths for -turns")
	turnConvs := flag.Int("turn-conversations", 64, "conversations each -turns figure is the mean of")
	doLifecycle := flag.Bool("lifecycle", true, "measure starts, reloads and memory")
	reloadCount := flag.Int("reloads", 20, "new plugin versions written for -lifecycle")
	beforeBin := flag.String("before-bin", "", "another compactd `binary` (e.g. an earlier commit's): targets named POLICY@before run on it, and -turns and -lifecycle measure it too, in the same run")
	beforePlugins := flag.String("before-plugins", "", "the plugins `directory` for -before-bin")
	var fo fleetOptions
	doFleet := flag.Bool("fleet", false, "measure a fleet of daemons on one redis-server against one daemon on bbolt (needs redis-server)")
	flag.StringVar(&fo.policies, "fleet-policies", "ledger,hierarchical", "policies for -fleet, comma-separated")
	flag.StringVar(&fo.set, "fleet-set", "tau-bench", "data set for -fleet")
	flag.IntVar(&fo.replicas, "fleet-replicas", 3, "the fleet's daemons for -fleet")
	flag.Parse()
	if (*beforeBin == "") != (*beforePlugins == "") {
		return fmt.Errorf("-before-bin and -before-plugins go together")
	}

	if *data == "" {
		d, err := dataset.Dir()
		if err != nil {
			return err
		}
		*data = d
	}
	work, err := os.MkdirTemp("", "loadbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if *bin == "" || *plugins == "" {
		root, err := loadbench.ModuleRoot()
		if err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "building compactd and the plugins")
		b, p, err := loadbench.Build(ctx, root, work)
		if err != nil {
			return err
		}
		if *bin == "" {
			*bin = b
		}
		if *plugins == "" {
			*plugins = p
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cache := filepath.Join(work, "cache")
	var loaded []*loadbench.Set
	var results []*loadbench.Result
	loadStart := loadbench.LoadAverage()
	names := strings.Split(*sets, ",")
	if !*doLoad {
		names = nil
	}
	var ordered []*loadbench.Set
	for _, name := range names {
		set, err := loadbench.LoadSet(strings.TrimSpace(name), *data)
		if err != nil {
			return err
		}
		for _, o := range strings.Split(*orders, ",") {
			s, err := set.InOrder(strings.TrimSpace(o))
			if err != nil {
				return fmt.Errorf("-orders: %w", err)
			}
			ordered = append(ordered, s)
		}
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: want at least 1", *rounds)
	}
	lr := &loadRounds{exe: exe, targets: *targets, work: work, cache: cache, bin: *bin, plugins: *plugins,
		beforeBin: *beforeBin, beforePlugins: *beforePlugins,
		opts: loadbench.LoadOptions{Clients: *clients, Warmup: *warmup, MinTime: *minTime}}
	for _, set := range ordered {
		loaded = append(loaded, set)
		for round := 1; round <= *rounds; round++ {
			if err := lr.run(ctx, set, round, *rounds, &results); err != nil {
				return err
			}
		}
	}
	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if *doLoad {
		fmt.Fprintf(w, "Load average (1, 5, 15 min) at start / end: %s / %s.\n\n", loadStart, loadbench.LoadAverage())
		loadbench.WriteLoadTables(w, loaded, results)
	}
	builds := []struct{ label, bin, plugins, cache string }{{"", *bin, *plugins, cache}}
	if *beforeBin != "" {
		builds = append(builds, struct{ label, bin, plugins, cache string }{" (before: -before-bin)", *beforeBin, *beforePlugins, filepath.Join(work, "cache-before")})
	}
	if *doLifecycle {
		for i, b := range builds {
			fmt.Fprintf(os.Stderr, "lifecycle%s: starts, reloads, memory\n", b.label)
			loadStart := loadbench.LoadAverage()
			// The earlier build may predate limits.plugin_idle_unload.
			r, err := loadbench.Lifecycle(ctx, loadbench.LifecycleOptions{Bin: b.bin, Plugins: b.plugins, Dir: filepath.Join(work, fmt.Sprintf("lifecycle-%d", i)), Reloads: *reloadCount, NoIdleUnload: i > 0})
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "\nThe daemon's start, hot reload and memory, with every built-in plugin%s (load average at start / end: %s / %s):\n\n", b.label, loadStart, loadbench.LoadAverage())
			loadbench.WriteLifecycle(w, r)
		}
	}
	if *doFleet {
		if err := runFleet(ctx, w, fo, *data, *bin, *plugins, cache, work, loadbench.LoadOptions{Clients: *clients, Warmup: *warmup, MinTime: *minTime}); err != nil {
			return err
		}
	}
	if *doTurns {
		for _, b := range builds {
			if err := turns(ctx, w, *data, b.bin, b.plugins, b.cache, work, *turnPolicies, *turnLengths, *turnConvs, b.label); err != nil {
				return err
			}
		}
	}
	return nil
}

// turns measures the cost of one turn for each policy, in one daemon.
func turns(ctx context.Context, w io.Writer, data, bin, plugins, cache, work, policyList, lengthList string, convs int, label string) error {
	var policies []string
	if policyList != "" {
		policies = strings.Split(policyList, ",")
	} else {
		files, err := filepath.Glob(filepath.Join(plugins, "*.wasm"))
		if err != nil {
			return err
		}
		for _, f := range files {
			policies = append(policies, strings.TrimSuffix(filepath.Base(f), ".wasm"))
		}
	}
	var lengths []int
	for _, s := range strings.Split(lengthList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 10 {
			return fmt.Errorf("-turn-lengths: %q is not a length of at least 10", s)
		}
		lengths = append(lengths, n)
	}
	set, err := loadbench.LoadSet("mini-swe", data)
	if err != nil {
		return err
	}
	base, err := loadbench.LongConversation(set, slices.Max(lengths)+4)
	if err != nil {
		return err
	}
	srv, err := loadbench.StartCompiled(ctx, loadbench.Daemon{Bin: bin, Plugins: plugins, CacheDir: cache,
		Dir: filepath.Join(work, "d-turns"+strings.ReplaceAll(label, " ", "")), Policies: policies})
	if err != nil {
		return err
	}
	defer srv.Stop()
	loadStart := loadbench.LoadAverage()
	byPolicy := map[string][]loadbench.TurnResult{}
	for i, p := range policies {
		fmt.Fprintf(os.Stderr, "turns%s: %s\n", label, p)
		rs, err := loadbench.Turns(ctx, loadbench.TurnOptions{Socket: srv.Socket, PID: srv.PID(), Policy: p, Model: "gpt-4o",
			Base: base, Lengths: lengths, Conversations: convs, Run: i})
		if err != nil {
			return fmt.Errorf("turns: %s: %w\n%s", p, err, srv.Log())
		}
		for _, r := range rs {
			fmt.Fprintf(os.Stderr, "  %s N=%d: CPU %v, wall %v, %d warned\n", r.Kind, r.N, r.CPU, r.Wall, r.Warnings)
		}
		byPolicy[p] = rs
	}
	fmt.Fprintf(w, "\nCost of one turn against the history's length N, per policy%s: the daemon's CPU per request (from the kernel), mean over %d conversations (mini-swe turns stitched into one %d-message conversation; one client). \"next turn after N\" is the request after one of N messages, with one more turn (new to the daemon). Load average at start / end: %s / %s.\n\n",
		label, convs, len(base), loadStart, loadbench.LoadAverage())
	loadbench.WriteTurnTable(w, lengths, byPolicy, policies)
	return nil
}

// loadOne starts a target, runs the load and stops it.
// loadRounds is what every round of the load table needs: the targets
// (comma-separated), the work and cache directories, the builds.
type loadRounds struct {
	exe, targets, work, cache              string
	bin, plugins, beforeBin, beforePlugins string
	opts                                   loadbench.LoadOptions
}

// run measures every target on set once, in order, as round round of
// rounds, and appends the results.
func (lr *loadRounds) run(ctx context.Context, set *loadbench.Set, round, rounds int, results *[]*loadbench.Result) error {
	for _, t := range strings.Split(lr.targets, ",") {
		t = strings.TrimSpace(t)
		dir := fmt.Sprintf("d-%s-%s", set.Name, t)
		if rounds > 1 {
			fmt.Fprintf(os.Stderr, "%s: %s, round %d of %d (%d requests per pass)\n", set.Name, t, round, rounds, set.Requests)
			dir += fmt.Sprintf("-r%d", round)
		} else {
			fmt.Fprintf(os.Stderr, "%s: %s (%d requests per pass)\n", set.Name, t, set.Requests)
		}
		d := loadbench.Daemon{Bin: lr.bin, Plugins: lr.plugins, CacheDir: lr.cache, Dir: filepath.Join(lr.work, dir)}
		if strings.HasSuffix(t, "@before") {
			if lr.beforeBin == "" {
				return fmt.Errorf("target %s needs -before-bin and -before-plugins", t)
			}
			d.Bin, d.Plugins, d.CacheDir = lr.beforeBin, lr.beforePlugins, filepath.Join(lr.work, "cache-before")
		}
		res, err := loadOne(ctx, lr.exe, t, set, d, lr.opts)
		if err != nil {
			return fmt.Errorf("%s, %s: %w", set.Name, t, err)
		}
		res.Round = round
		fmt.Fprintf(os.Stderr, "  %.0f req/s, p50 %v, p99 %v, server CPU %v/request\n", res.ReqPerSec, res.P50, res.P99, res.CPUPerRequest())
		*results = append(*results, res)
	}
	return nil
}

func loadOne(ctx context.Context, exe, target string, set *loadbench.Set, d loadbench.Daemon, opts loadbench.LoadOptions) (*loadbench.Result, error) {
	var srv *loadbench.Server
	var err error
	opts.Set = set
	policy := strings.TrimSuffix(target, "@before")
	opts.Body = loadbench.Body{Policy: policy, Model: "gpt-4o"}
	switch target {
	case "echo", "json":
		srv, err = loadbench.StartBaseline(ctx, exe, target, filepath.Dir(d.Dir))
	default:
		d.Policies = []string{policy}
		srv, err = loadbench.StartCompiled(ctx, d)
		opts.Check = loadbench.CheckCompact
	}
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	opts.Socket, opts.PID = srv.Socket, srv.PID()
	res, err := loadbench.Load(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, srv.Log())
	}
	res.Target = target
	return res, nil
}
