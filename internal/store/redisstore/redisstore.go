// Package redisstore is the shared store.Backend: a Redis or Valkey server
// (or a Redis Cluster) that every replica of a fleet reads and writes, so
// any replica can serve any turn of a conversation.
//
// # Keys
//
// Every key starts with the prefix (default "compactd"). A conversation's
// keys carry its id as a hash tag, so a cluster keeps them in one slot and
// a script may touch them together:
//
//	P:{ID}:st   hash: the conversation's status (counters incremented in
//	            place, so replicas add up rather than overwrite)
//	P:{ID}:ps   hash: plugin state, "s:POLICY" the state, "v:POLICY" its
//	            version, "_bytes" the state's size
//	P:{ID}:lc   string: the last-compaction record
//	P:convs     sorted set: conversation ids by last request (ms), for
//	            listing, the TTL and the conversation cap
//	P:statebytes counter: plugin state bytes over all conversations
//	P:b:NAME:…  a bucket: "k:KEY" entries (8-byte write time ‖ value),
//	            "order" (keys by write time), "bytes", "lease:KEY"
//
// # Bounds
//
// The bounds are the bbolt store's: a conversation expires TTL after its
// last request, at most MaxConversations are kept (the least recently seen
// go first), plugin state is capped in bytes (the least recently seen
// conversations' state goes first), and buckets are capped by entries and
// bytes (oldest writes first) with an optional TTL. One replica at a time
// sweeps (a lock key); every conversation key also carries a Redis expiry
// (TTL plus an hour), so nothing outlives its TTL by much even when no
// replica runs.
//
// # Failures
//
// A store that cannot be reached is not an outage: calls fail fast (no
// call waits more than OpTimeout), writes are dropped and counted, reads
// answer "nothing", Health reports degraded, and a background probe
// notices when the server is back.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/internal/store"
	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// Defaults for zero Options fields.
const (
	DefaultPrefix        = "compactd"
	DefaultOpTimeout     = 250 * time.Millisecond
	DefaultProbeInterval = 500 * time.Millisecond
	// keyGrace is how long past its TTL a conversation's keys live in
	// Redis (their own expiry), for the sweeper to account for them.
	keyGrace = time.Hour
)

// ErrUnavailable: the store cannot be reached; the call was given up.
var ErrUnavailable = errors.New("shared store unavailable")

// Options configure a Store.
type Options struct {
	// URL and PasswordFile are state.url and state.password_file.
	URL          string
	PasswordFile string
	// Prefix starts every key (DefaultPrefix if empty), so fleets can
	// share a server.
	Prefix string
	// Replica names this daemon in the status ("served last by"); the
	// host name and process id if empty.
	Replica string
	// TTL, MaxConversations, MaxStateBytes, MaxStateValue, MaxDetailBytes,
	// FlushInterval and SweepInterval are as in store.Options.
	TTL              time.Duration
	MaxConversations int
	MaxStateBytes    int64
	MaxStateValue    int
	FlushInterval    time.Duration
	SweepInterval    time.Duration
	// OpTimeout bounds one call to the server (DefaultOpTimeout).
	OpTimeout time.Duration
	// ProbeInterval is how often an unreachable server is tried again.
	ProbeInterval time.Duration
	Now           func() time.Time
	Logger        hclog.Logger
}

// Store is the Redis backend. Close it to flush and release the client.
type Store struct {
	rdb     redis.UniversalClient
	cluster bool
	prefix  string
	replica string
	desc    string
	logger  hclog.Logger
	now     func() time.Time
	opTO    time.Duration

	mu   sync.Mutex
	opts Options
	// pending are last-compaction records not yet built and written.
	pending map[string]func() ([]byte, error)
	buckets map[string]*Bucket

	down    atomic.Bool
	since   atomic.Int64
	lastErr atomic.Pointer[string]
	dropped atomic.Uint64
	failed  atomic.Uint64
	probe   chan struct{}

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var _ store.Backend = (*Store)(nil)
var _ store.VersionedState = (*Store)(nil)

// Open connects to the server and starts the background sweeper, flusher
// and probe. An unreachable server is not an error (the store starts
// degraded and recovers when the server comes); a malformed URL is.
func Open(opts Options) (*Store, error) {
	t, err := ParseURL(opts.URL, opts.PasswordFile)
	if err != nil {
		return nil, err
	}
	d := store.Options{TTL: opts.TTL, MaxConversations: opts.MaxConversations, MaxStateBytes: opts.MaxStateBytes,
		MaxStateValue: opts.MaxStateValue, FlushInterval: opts.FlushInterval, SweepInterval: opts.SweepInterval}
	d = d.WithDefaults()
	opts.TTL, opts.MaxConversations, opts.MaxStateBytes, opts.MaxStateValue = d.TTL, d.MaxConversations, d.MaxStateBytes, d.MaxStateValue
	opts.FlushInterval, opts.SweepInterval = d.FlushInterval, d.SweepInterval
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Replica == "" {
		h, _ := os.Hostname()
		opts.Replica = h + ":" + strconv.Itoa(os.Getpid())
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	routeDriverLog(opts.Logger)
	s := &Store{prefix: opts.Prefix, replica: opts.Replica, desc: Redact(opts.URL), logger: opts.Logger,
		now: opts.Now, opTO: opts.OpTimeout, opts: opts, pending: map[string]func() ([]byte, error){}, buckets: map[string]*Bucket{},
		probe: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	// Fail fast: a request never waits on retries of a dead server; the
	// probe finds it again.
	switch {
	case t.Cluster != nil:
		c := t.Cluster
		c.DialTimeout, c.ReadTimeout, c.WriteTimeout = opts.OpTimeout, opts.OpTimeout, opts.OpTimeout
		c.MaxRetries = 1
		c.ContextTimeoutEnabled = true
		s.rdb, s.cluster = redis.NewClusterClient(c), true
	default:
		c := t.Standalone
		c.DialTimeout, c.ReadTimeout, c.WriteTimeout = opts.OpTimeout, opts.OpTimeout, opts.OpTimeout
		c.MaxRetries = 1
		c.ContextTimeoutEnabled = true
		s.rdb = redis.NewClient(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*opts.OpTimeout)
	err = s.rdb.Ping(ctx).Err()
	cancel()
	if err != nil {
		s.fail(err)
		s.logger.Warn("shared store unreachable at start; serving from requests alone until it answers", "url", s.desc, "error", err)
	}
	go s.loop()
	return s, nil
}

// Client returns the Redis client (tests and tools read the keys).
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

func (s *Store) convKey(id, kind string) string { return s.prefix + ":{" + id + "}:" + kind }
func (s *Store) convsKey() string               { return s.prefix + ":convs" }
func (s *Store) stateBytesKey() string          { return s.prefix + ":statebytes" }
func (s *Store) sweepLockKey() string           { return s.prefix + ":sweeplock" }

// call runs f against the server with the op timeout, unless the server
// is known down (then it fails at once with ErrUnavailable, and the probe
// brings it back). A connection failure marks the store degraded.
func (s *Store) call(ctx context.Context, f func(ctx context.Context) error) error {
	if s.down.Load() {
		return fmt.Errorf("%w: %s", ErrUnavailable, s.lastError())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opTO)
	defer cancel()
	err := f(ctx)
	if err != nil && isConnErr(err) {
		s.fail(err)
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

// isConnErr tells a server that cannot be reached (or answered nothing in
// time) from an answer (redis.Nil, a script's error, a conflict).
func isConnErr(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, redis.TxFailedErr) || errors.Is(err, store.ErrConflict) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		// A server answer; LOADING, CLUSTERDOWN, TRYAGAIN and the like
		// mean it cannot serve now.
		msg := re.Error()
		for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY"} {
			if len(msg) >= len(p) && msg[:len(p)] == p {
				return true
			}
		}
		return false
	}
	return true
}

func (s *Store) fail(err error) {
	msg := err.Error()
	s.lastErr.Store(&msg)
	if s.down.CompareAndSwap(false, true) {
		s.since.Store(s.now().UnixNano())
		s.logger.Warn("shared store unreachable: serving from requests alone, writes dropped", "url", s.desc, "error", err)
		select {
		case s.probe <- struct{}{}:
		default:
		}
	}
}

func (s *Store) lastError() string {
	if p := s.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

// Health implements store.Backend.
func (s *Store) Health() store.Health {
	h := store.Health{Backend: "redis", Degraded: s.down.Load(), DroppedWrites: s.dropped.Load(), FailedReads: s.failed.Load()}
	if h.Degraded {
		h.Error = s.lastError()
		h.Since = time.Unix(0, s.since.Load()).UTC()
	}
	return h
}

// Describe implements store.Backend: the URL, password left out.
func (s *Store) Describe() string { return s.desc }

// Replica returns this daemon's name in the status.
func (s *Store) Replica() string { return s.replica }

// write runs a write; a failure is logged once per outage and counted.
func (s *Store) write(ctx context.Context, what string, f func(ctx context.Context) error) error {
	err := s.call(ctx, f)
	if err != nil && (errors.Is(err, ErrUnavailable)) {
		s.dropped.Add(1)
	} else if err != nil && !errors.Is(err, store.ErrConflict) {
		s.logger.Warn("shared store write failed", "what", what, "error", err)
	}
	return err
}

// read runs a read, counting those given up.
func (s *Store) read(ctx context.Context, f func(ctx context.Context) error) error {
	err := s.call(ctx, f)
	if err != nil && errors.Is(err, ErrUnavailable) {
		s.failed.Add(1)
	}
	return err
}

func (s *Store) loop() {
	defer close(s.done)
	s.mu.Lock()
	flush := time.NewTicker(s.opts.FlushInterval)
	sweep := time.NewTicker(s.opts.SweepInterval)
	probe := time.NewTicker(s.opts.ProbeInterval)
	s.mu.Unlock()
	defer flush.Stop()
	defer sweep.Stop()
	defer probe.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-flush.C:
			s.Flush()
		case <-sweep.C:
			if _, err := s.Sweep(context.Background()); err != nil && !errors.Is(err, ErrUnavailable) {
				s.logger.Warn("expiring old entries", "error", err)
			}
		case <-probe.C:
			s.tryRecover()
		case <-s.probe:
		}
	}
}

// tryRecover pings a server marked down; an answer clears the mark.
func (s *Store) tryRecover() {
	if !s.down.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opTO)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		msg := err.Error()
		s.lastErr.Store(&msg)
		return
	}
	if s.down.CompareAndSwap(true, false) {
		s.logger.Info("shared store reachable again", "url", s.desc, "down_for", s.now().Sub(time.Unix(0, s.since.Load())).Round(time.Millisecond).String())
		s.since.Store(0)
	}
}

// Close stops the background work, writes pending records and closes the
// client. A second Close does nothing.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.Flush()
		err = s.rdb.Close()
	})
	return err
}

// SetLimits implements store.Backend.
func (s *Store) SetLimits(ttl time.Duration, maxConversations int, maxStateBytes int64) {
	o := store.Options{TTL: ttl, MaxConversations: maxConversations, MaxStateBytes: maxStateBytes}.WithDefaults()
	s.mu.Lock()
	s.opts.TTL, s.opts.MaxConversations, s.opts.MaxStateBytes = o.TTL, o.MaxConversations, o.MaxStateBytes
	s.mu.Unlock()
}

func (s *Store) limits() (ttl time.Duration, maxConvs int, maxBytes int64, maxValue int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.TTL, s.opts.MaxConversations, s.opts.MaxStateBytes, s.opts.MaxStateValue
}

// randomToken returns a unique value for a lock.
func randomToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func isUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
