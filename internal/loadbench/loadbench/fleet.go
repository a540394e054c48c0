package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/compactd/compactd/internal/loadbench"
)

// fleetOptions are the -fleet flags.
type fleetOptions struct {
	policies, set string
	replicas      int
}

// runFleet measures the fleet on a shared redis-server against one daemon
// on bbolt (loadbench.Fleet) and writes its tables.
func runFleet(ctx context.Context, w io.Writer, fo fleetOptions, data, bin, plugins, cache, work string, lo loadbench.LoadOptions) error {
	set, err := loadbench.LoadSet(fo.set, data)
	if err != nil {
		return err
	}
	var policies []string
	for _, p := range strings.Split(fo.policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			policies = append(policies, p)
		}
	}
	fmt.Fprintf(os.Stderr, "fleet: %d replicas on one redis-server against one daemon on bbolt, %s, policies %v\n", fo.replicas, set.Name, policies)
	loadStart := loadbench.LoadAverage()
	rs, err := loadbench.Fleet(ctx, loadbench.FleetOptions{Bin: bin, Plugins: plugins, CacheDir: cache, Dir: filepath.Join(work, "fleet"),
		Replicas: fo.replicas, Policies: policies, Set: set, Clients: lo.Clients, Warmup: lo.Warmup, MinTime: lo.MinTime})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	for _, r := range rs {
		fmt.Fprintf(os.Stderr, "  %s: bbolt p50 %v p99 %v, sticky p50 %v p99 %v, round robin p50 %v p99 %v, %.1f Redis commands/request\n",
			r.Policy, r.Single.P50, r.Single.P99, r.Sticky.P50, r.Sticky.P99, r.Fleet.P50, r.Fleet.P99, r.Commands)
	}
	fmt.Fprintf(w, "\nA fleet on a shared store (load average at start / end: %s / %s):\n\n", loadStart, loadbench.LoadAverage())
	loadbench.WriteFleet(w, rs)
	return nil
}
