package loadbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// LoadOptions configure one load run against one target.
type LoadOptions struct {
	// Socket is the target's Unix socket.
	Socket string
	// PID is the target's process, for its CPU and memory figures (0:
	// none).
	PID int
	// Set is the requests; Body what each sends besides its messages.
	Set  *Set
	Body Body
	// Clients is the number of concurrent clients (default 2), each with
	// its own connection. A client takes a whole conversation and sends
	// its turn prefixes in order, or takes the next request of an
	// interleaved or shuffled set (Set.Order).
	Clients int
	// Warmup is the number of passes over the set before measuring
	// (default 1): connections open, caches fill, as in a daemon that has
	// served for a while.
	Warmup int
	// MinTime: measured passes repeat until they took at least this long
	// (default 3s); at least one pass is measured.
	MinTime time.Duration
	// Check, if set, checks every answer of the warm-up passes.
	Check func(body []byte) error
}

// Result is one load run.
type Result struct {
	Set, Target string
	// Round is the round the target ran in (see WriteLoadTables), 1 for
	// a run of one round.
	Round   int
	Clients int
	// Requests were measured in Elapsed.
	Requests  int
	Elapsed   time.Duration
	ReqPerSec float64
	P50, P99  time.Duration
	// ServerCPU is the target process's CPU time over the measured
	// passes; 0 without a PID.
	ServerCPU time.Duration
	// Memory is the target's resident memory after the run.
	Memory Memory
}

// CPUPerRequest is the server's CPU time per measured request.
func (r *Result) CPUPerRequest() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.ServerCPU / time.Duration(r.Requests)
}

// Load runs the set against the target: warm-up passes, then measured
// passes. Any failed request (transport error, status other than 200, a
// failed Check) fails the run.
func Load(ctx context.Context, opts LoadOptions) (*Result, error) {
	if opts.Clients <= 0 {
		opts.Clients = 2
	}
	if opts.Warmup < 0 {
		opts.Warmup = 0
	}
	if opts.MinTime <= 0 {
		opts.MinTime = 3 * time.Second
	}
	clients := make([]*loadClient, opts.Clients)
	for i := range clients {
		clients[i] = newLoadClient(opts.Socket)
		defer clients[i].close()
	}
	for p := 0; p < opts.Warmup; p++ {
		if _, err := pass(ctx, clients, opts, opts.Check); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	res := &Result{Set: opts.Set.Name, Target: opts.Body.Policy, Clients: opts.Clients}
	var cpu0 time.Duration
	if opts.PID > 0 {
		var err error
		if cpu0, err = ProcCPU(opts.PID); err != nil {
			return nil, err
		}
	}
	var lat []time.Duration
	start := time.Now()
	for len(lat) == 0 || time.Since(start) < opts.MinTime {
		l, err := pass(ctx, clients, opts, nil)
		if err != nil {
			return nil, err
		}
		lat = append(lat, l...)
	}
	res.Elapsed = time.Since(start)
	if opts.PID > 0 {
		cpu1, err := ProcCPU(opts.PID)
		if err != nil {
			return nil, err
		}
		res.ServerCPU = cpu1 - cpu0
		if res.Memory, err = ProcMemory(opts.PID); err != nil {
			return nil, err
		}
	}
	res.Requests = len(lat)
	res.ReqPerSec = float64(len(lat)) / res.Elapsed.Seconds()
	slices.Sort(lat)
	res.P50, res.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return res, nil
}

// pass sends every request of the set once, clients taking conversations
// (or, for an interleaved or shuffled set, requests) from a shared queue,
// and returns the latencies.
func pass(ctx context.Context, clients []*loadClient, opts LoadOptions, check func([]byte) error) ([]time.Duration, error) {
	if opts.Set.Order == OrderInterleaved || opts.Set.Order == OrderShuffled {
		return passQueue(ctx, clients, opts, check)
	}
	var (
		next     atomic.Int64
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, opts.Set.Requests)
		firstErr error
		wg       sync.WaitGroup
	)
	for _, c := range clients {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for {
				ci := int(next.Add(1) - 1)
				if ci >= len(opts.Set.Convs) || ctx.Err() != nil {
					return
				}
				for _, n := range opts.Set.Turns[ci] {
					d, body, err := c.post(ctx, opts.Body, opts.Set.Convs[ci][:n])
					if err == nil && check != nil {
						err = check(body)
					}
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("%s: conversation %d, %d messages: %w", opts.Set.Name, ci, n, err)
						}
						mu.Unlock()
						next.Store(int64(len(opts.Set.Convs)))
						return
					}
					mine = append(mine, d)
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return lat, firstErr
}

// passQueue is pass for an interleaved or shuffled set: clients take the
// next request from the set's queue.
func passQueue(ctx context.Context, clients []*loadClient, opts LoadOptions, check func([]byte) error) ([]time.Duration, error) {
	q := opts.Set.queue()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, len(q))
		firstErr error
		wg       sync.WaitGroup
	)
	for _, c := range clients {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(q) || ctx.Err() != nil {
					return
				}
				r := q[i]
				d, body, err := c.post(ctx, opts.Body, opts.Set.Convs[r.Conv][:r.N])
				if err == nil && check != nil {
					err = check(body)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: conversation %d, %d messages: %w", opts.Set.Name, r.Conv, r.N, err)
					}
					mu.Unlock()
					next.Store(int64(len(q)))
					return
				}
				mine = append(mine, d)
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return lat, firstErr
}

// loadClient is one client with its own connection and buffers.
type loadClient struct {
	http *http.Client
	body []byte
	resp bytes.Buffer
}

func newLoadClient(socket string) *loadClient {
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
	}
	return &loadClient{http: &http.Client{Transport: tr}}
}

func (c *loadClient) close() { c.http.CloseIdleConnections() }

// post sends one compaction request and returns its latency and the
// answer (valid until the next post).
func (c *loadClient) post(ctx context.Context, b Body, msgs []json.RawMessage) (time.Duration, []byte, error) {
	c.body = AppendBody(c.body[:0], b, msgs)
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://compactd/v1/compact", bytes.NewReader(c.body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	c.resp.Reset()
	_, err = io.Copy(&c.resp, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, c.resp.Bytes())
	}
	return d, c.resp.Bytes(), nil
}
