// Package store is the daemon's embedded store: one bbolt file, state.db,
// in the state directory. It keeps
//
//   - per-conversation plugin state (the ABI's opaque `state`), as the
//     compactor's StateStore;
//   - per-conversation status counters for GET /v1/status;
//   - any other bounded key/value bucket a part of the daemon needs (e.g. a
//     summary cache for LLM results): Store.Bucket.
//
// Everything is bounded. A conversation expires TTL after its last request
// (default 7 days), and at most MaxConversations are tracked (the least
// recently seen go first); its plugin state goes with it. Plugin state is
// also capped in bytes overall (oldest writes go first). A Bucket is capped
// by entries and bytes, evicting its oldest writes, with an optional TTL.
//
// Writes of plugin state and bucket entries are durable when the call
// returns (one bbolt transaction, fsynced). Status counters change on every
// request, so they are kept in memory and written behind, once per
// FlushInterval (default 1s) and on Close: a crash loses at most that much
// of the counters, never plugin state.
//
// A Store is safe for concurrent use. The file is locked: a second daemon
// on the same state directory fails to open it (ErrLocked).
package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Errors. Test with errors.Is.
var (
	// ErrLocked: another process has the state directory open.
	ErrLocked = errors.New("state directory is in use by another process")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store is closed")
	// ErrTooLarge: a value is larger than its bucket may hold.
	ErrTooLarge = errors.New("value too large for the store")
	// ErrBadName: a bucket name that is empty, too long or reserved.
	ErrBadName = errors.New("invalid bucket name")
)

// FileName is the store's file in the state directory.
const FileName = "state.db"

// Defaults for zero Options fields.
const (
	DefaultTTL              = 7 * 24 * time.Hour
	DefaultMaxConversations = 10000
	DefaultMaxStateBytes    = 256 << 20
	DefaultMaxStateValue    = 1 << 20
	DefaultFlushInterval    = time.Second
	DefaultSweepInterval    = time.Minute
)

// Options configure a Store. Zero fields take the defaults above.
type Options struct {
	// Dir is the state directory; it is created (0700) if missing.
	Dir string
	// TTL expires a conversation this long after its last request.
	TTL time.Duration
	// MaxConversations caps the conversations tracked.
	MaxConversations int
	// MaxStateBytes caps plugin state over all conversations.
	MaxStateBytes int64
	// MaxStateValue caps one conversation's state for one policy.
	MaxStateValue int
	// MaxDetailBytes caps the last-compaction records over all
	// conversations (SetLastCompaction).
	MaxDetailBytes int64
	// FlushInterval is how often status counters are written.
	FlushInterval time.Duration
	// SweepInterval is how often expired entries are removed.
	SweepInterval time.Duration
	// Now is the clock (time.Now if nil); tests move it.
	Now    func() time.Time
	Logger hclog.Logger
}

func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxConversations <= 0 {
		o.MaxConversations = DefaultMaxConversations
	}
	if o.MaxStateBytes <= 0 {
		o.MaxStateBytes = DefaultMaxStateBytes
	}
	if o.MaxStateValue <= 0 {
		o.MaxStateValue = DefaultMaxStateValue
	}
	if o.MaxDetailBytes <= 0 {
		o.MaxDetailBytes = DefaultMaxDetailBytes
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

// Reserved bucket names (user buckets may not start with '_').
var (
	conversationsBucket = []byte("_conversations")
	stateBucketName     = "_state"
)

// Store is the daemon's store. Close it to flush and release the file.
type Store struct {
	db     *bolt.DB
	logger hclog.Logger
	now    func() time.Time
	path   string

	mu      sync.Mutex
	opts    Options
	convs   map[string]*Conversation
	dirty   map[string]bool
	removed map[string]bool // expired or evicted, state not yet deleted
	buckets map[string]*Bucket
	closed  bool

	state   *Bucket
	details *Bucket // last-compaction records, by conversation id
	// pendingDetails are records not yet written (see SetLastCompaction);
	// flushingDetails those a Flush is writing, readable until it commits.
	pendingDetails  map[string][]byte
	flushingDetails map[string][]byte
	// pendingBuilders are records SetLastCompactionFunc left unbuilt.
	pendingBuilders map[string]*lazyDetail
	// buildingDetails are the builders a Flush is building (buildPending),
	// readable until they are pending records.
	buildingDetails map[string]*lazyDetail
	flushMu         sync.Mutex   // one Flush at a time
	lastTime        atomic.Int64 // last timestamp handed out, for a strict order

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Open opens (or creates) the store in opts.Dir and starts its background
// flusher and sweeper; Close stops them.
func Open(opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if opts.Dir == "" {
		return nil, errors.New("store: no state directory")
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	path := filepath.Join(opts.Dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 500 * time.Millisecond})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("store: %s: %w (is another compactd running with this state directory?)", path, ErrLocked)
		}
		return nil, fmt.Errorf("store: opening %s: %w", path, err)
	}
	s := &Store{
		db: db, logger: opts.Logger, now: opts.Now, path: path, opts: opts,
		convs: map[string]*Conversation{}, dirty: map[string]bool{}, removed: map[string]bool{},
		buckets: map[string]*Bucket{}, stop: make(chan struct{}), done: make(chan struct{}),
		pendingDetails:  map[string][]byte{},
		pendingBuilders: map[string]*lazyDetail{},
	}
	if err := s.loadConversations(); err != nil {
		db.Close()
		return nil, err
	}
	s.state, err = s.bucket(stateBucketName, BucketOptions{MaxBytes: opts.MaxStateBytes})
	if err != nil {
		db.Close()
		return nil, err
	}
	s.details, err = s.bucket(detailsBucketName, BucketOptions{MaxBytes: opts.MaxDetailBytes, MaxEntries: opts.MaxConversations})
	if err != nil {
		db.Close()
		return nil, err
	}
	s.expireConversations() // what expired while the daemon was down
	go s.loop()
	return s, nil
}

// Path returns the store's file.
func (s *Store) Path() string { return s.path }

// SetLimits changes the conversation TTL and caps (a config reload). Zero
// values take the defaults. The new bounds apply at the next sweep.
func (s *Store) SetLimits(ttl time.Duration, maxConversations int, maxStateBytes int64) {
	o := Options{TTL: ttl, MaxConversations: maxConversations, MaxStateBytes: maxStateBytes}.withDefaults()
	s.mu.Lock()
	s.opts.TTL, s.opts.MaxConversations, s.opts.MaxStateBytes = o.TTL, o.MaxConversations, o.MaxStateBytes
	s.mu.Unlock()
	s.state.setOptions(BucketOptions{MaxBytes: o.MaxStateBytes})
	s.details.setOptions(BucketOptions{MaxBytes: s.opts.MaxDetailBytes, MaxEntries: o.MaxConversations})
}

func (s *Store) loop() {
	defer close(s.done)
	s.mu.Lock()
	flush := time.NewTicker(s.opts.FlushInterval)
	sweep := time.NewTicker(s.opts.SweepInterval)
	s.mu.Unlock()
	defer flush.Stop()
	defer sweep.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-flush.C:
			if err := s.Flush(); err != nil {
				s.logger.Warn("writing status counters", "error", err)
			}
		case <-sweep.C:
			if _, err := s.Sweep(); err != nil {
				s.logger.Warn("expiring old entries", "error", err)
			}
		}
	}
}

// Close stops the background work, writes the status counters and closes
// the file. A second Close does nothing.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		err = s.Flush()
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		if cerr := s.db.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// Sweep removes what has expired now: conversations past their TTL (and
// their plugin state), conversations over the cap, and bucket entries past
// their TTL. It returns how many conversations it expired. The background
// sweeper calls it every SweepInterval.
func (s *Store) Sweep() (int, error) {
	n := s.expireConversations()
	if err := s.Flush(); err != nil {
		return n, err
	}
	s.mu.Lock()
	buckets := make([]*Bucket, 0, len(s.buckets))
	for _, b := range s.buckets {
		buckets = append(buckets, b)
	}
	s.mu.Unlock()
	for _, b := range buckets {
		if _, err := b.expire(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// timestamp returns a strictly increasing UnixNano time, so entries written
// in the same nanosecond keep their order.
func (s *Store) timestamp() int64 {
	t := s.now().UnixNano()
	for {
		last := s.lastTime.Load()
		if t <= last {
			t = last + 1
		}
		if s.lastTime.CompareAndSwap(last, t) {
			return t
		}
	}
}

// LoadState implements compactor.StateStore: the state policy last
// returned for the conversation, or nil.
func (s *Store) LoadState(ctx context.Context, conversationID, policy string) (json.RawMessage, error) {
	v, err := s.state.Get(ctx, stateKey(conversationID, policy))
	if err != nil || v == nil {
		return nil, err
	}
	return json.RawMessage(v), nil
}

// SaveState implements compactor.StateStore. The state is durable when it
// returns. A state larger than MaxStateValue is refused (ErrTooLarge).
func (s *Store) SaveState(ctx context.Context, conversationID, policy string, state json.RawMessage) error {
	s.mu.Lock()
	limit := s.opts.MaxStateValue
	delete(s.removed, conversationID) // alive again: keep its state
	s.mu.Unlock()
	if len(state) > limit {
		return fmt.Errorf("%w: state of %d bytes (the limit is %d)", ErrTooLarge, len(state), limit)
	}
	return s.state.Put(ctx, stateKey(conversationID, policy), state)
}

func stateKey(conversationID, policy string) []byte {
	k := make([]byte, 0, len(conversationID)+1+len(policy))
	k = append(k, conversationID...)
	k = append(k, 0)
	return append(k, policy...)
}

func statePrefix(conversationID string) []byte {
	return append([]byte(conversationID), 0)
}

// Flush writes the status counters that changed and deletes the plugin
// state of expired conversations.
func (s *Store) Flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.buildPending()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if len(s.dirty) == 0 && len(s.removed) == 0 && len(s.pendingDetails) == 0 {
		s.mu.Unlock()
		return nil
	}
	puts := map[string][]byte{}
	for id := range s.dirty {
		if c, ok := s.convs[id]; ok {
			b, err := json.Marshal(c)
			if err != nil {
				s.mu.Unlock()
				return err
			}
			puts[id] = b
		}
	}
	var gone []string
	for id := range s.removed {
		gone = append(gone, id)
	}
	s.dirty = map[string]bool{}
	details := s.pendingDetails
	s.pendingDetails = map[string][]byte{}
	s.flushingDetails = details
	s.mu.Unlock()

	var deleted []string
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(conversationsBucket)
		for id, v := range puts {
			if err := b.Put([]byte(id), v); err != nil {
				return err
			}
		}
		deleted = deleted[:0]
		for _, id := range gone {
			// Checked inside the write transaction: SaveState marks a
			// conversation alive before its own transaction, which cannot
			// run until this one commits.
			s.mu.Lock()
			still := s.removed[id]
			s.mu.Unlock()
			if !still {
				continue
			}
			if err := b.Delete([]byte(id)); err != nil {
				return err
			}
			if _, err := s.state.deletePrefixTx(tx, statePrefix(id)); err != nil {
				return err
			}
			deleted = append(deleted, id)
		}
		return s.flushDetailsTx(tx, details, deleted)
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushingDetails = nil
	if err != nil {
		for id := range puts {
			s.dirty[id] = true // try again next time
		}
		for id, v := range details {
			if _, newer := s.pendingDetails[id]; !newer && s.convs[id] != nil {
				s.pendingDetails[id] = v
			}
		}
		return fmt.Errorf("store: %w", err)
	}
	for _, id := range deleted {
		delete(s.removed, id)
	}
	return nil
}

// beU64 encodes a big-endian uint64.
func beU64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// sortByLastSeen sorts conversations, most recently seen first.
func sortByLastSeen(cs []Conversation) {
	sort.Slice(cs, func(i, j int) bool {
		if !cs[i].LastSeen.Equal(cs[j].LastSeen) {
			return cs[i].LastSeen.After(cs[j].LastSeen)
		}
		return cs[i].ID < cs[j].ID
	})
}
