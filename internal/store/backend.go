package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Backend is the daemon's store, whatever keeps it: the embedded bbolt
// file (*Store, the default) or a Redis or Valkey server the replicas of a
// fleet share (package redisstore). It keeps per-conversation plugin state,
// per-conversation status and last-compaction records, and bounded
// buckets (the summary cache), under the same bounds on every backend:
// a conversation's TTL, the number of conversations, and bytes.
//
// A Backend is safe for concurrent use. Its methods that return no error
// (Observe, RecordUsage, ...) never block a request on a store that is
// down: a backend that cannot write drops the write, counts it (Health)
// and serves what it can.
type Backend interface {
	// LoadState and SaveState are the compactor's StateStore.
	LoadState(ctx context.Context, conversationID, policy string) (json.RawMessage, error)
	SaveState(ctx context.Context, conversationID, policy string, state json.RawMessage) error

	// Observe records a compaction request in the conversation's status.
	Observe(o Observation)
	// RecordUsage records a provider's usage for a proxied response and
	// sets NeedsCompaction when it reaches the threshold (see *Store).
	RecordUsage(id string, u Usage, window int, threshold float64, triggerTokens int) (ratio float64, needs bool)
	// SetNeedsCompaction sets or clears the deferred trigger; it reports
	// whether the conversation is tracked.
	SetNeedsCompaction(id string, needs bool) bool
	// Conversation, Conversations and Totals read the status.
	Conversation(id string) (Conversation, bool)
	Conversations(limit int) []Conversation
	Totals() Totals
	// SetLastCompactionFunc and LastCompaction keep the conversation's
	// last-compaction record (built lazily, see *Store).
	SetLastCompactionFunc(conversationID string, build func() ([]byte, error)) error
	LastCompaction(ctx context.Context, conversationID string) ([]byte, error)

	// OpenBucket opens a named, bounded key/value bucket (names as for
	// Store.Bucket).
	OpenBucket(name string, opts BucketOptions) (KV, error)
	// SetLimits changes the TTL and caps (a config reload).
	SetLimits(ttl time.Duration, maxConversations int, maxStateBytes int64)
	// Describe names where the store lives: a file path, or a URL with
	// its password left out.
	Describe() string
	// Health reports whether the store is reachable.
	Health() Health
	// Close flushes what is pending and releases the store.
	Close() error
}

// KV is a bounded, byte-keyed bucket: Get returns nil and no error for an
// absent or expired key; Put evicts the oldest entries past the bucket's
// bounds.
type KV interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
	Put(ctx context.Context, key, value []byte) error
	Delete(ctx context.Context, key []byte) error
	// Update replaces key's value with fn's answer to the current one
	// (nil when absent or expired), atomically: of two Updates of one key
	// at once, from this process or another replica, each sees the
	// other's write. fn may be called more than once (a lost race is
	// retried, a bounded number of times: then ErrConflict); its error
	// ends Update with that error.
	Update(ctx context.Context, key []byte, fn func(old []byte) ([]byte, error)) error
}

// MultiUpdater is implemented by a KV that can update several keys in
// one write (the bbolt bucket: one transaction, one sync to disk, instead
// of one per key). UpdateMany calls fn for each key, in order, with its
// current value (nil when absent or expired) and stores fn's answer; the
// writes are atomic together, and an error from fn ends UpdateMany with
// that error and nothing written.
type MultiUpdater interface {
	UpdateMany(ctx context.Context, keys [][]byte, fn func(i int, old []byte) ([]byte, error)) error
}

// MaxUpdateAttempts bounds the tries of a KV.Update that keeps losing to
// concurrent writers of its key.
const MaxUpdateAttempts = 16

// Health is a backend's reachability.
type Health struct {
	// Backend is "bbolt" or "redis".
	Backend string `json:"backend"`
	// Degraded is set while the store cannot be reached: the daemon
	// serves every request from the request alone.
	Degraded bool `json:"degraded"`
	// Error is the last failure while Degraded.
	Error string `json:"error,omitempty"`
	// DroppedWrites counts writes given up since the start because the
	// store was unreachable; FailedReads the reads that fell back to
	// nothing for the same reason.
	DroppedWrites uint64 `json:"dropped_writes"`
	FailedReads   uint64 `json:"failed_reads"`
	// Since is when the store became unreachable (zero when healthy).
	Since time.Time `json:"since,omitzero"`
}

// ErrConflict: a versioned write lost to a concurrent one (another
// replica wrote the same conversation's state since it was read).
var ErrConflict = errors.New("state changed concurrently")

// VersionedState is implemented by backends that can compare-and-set a
// conversation's plugin state: LoadStateVersion returns the state and an
// opaque version; SaveStateIf writes only if the version is unchanged and
// fails with ErrConflict otherwise.
type VersionedState interface {
	LoadStateVersion(ctx context.Context, conversationID, policy string) (json.RawMessage, string, error)
	SaveStateIf(ctx context.Context, conversationID, policy string, state json.RawMessage, version string) error
}

var (
	_ Backend      = (*Store)(nil)
	_ MultiUpdater = (*Bucket)(nil)
)

// OpenBucket implements Backend: Bucket, as a KV.
func (s *Store) OpenBucket(name string, opts BucketOptions) (KV, error) {
	b, err := s.Bucket(name, opts)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Describe implements Backend: the file's path.
func (s *Store) Describe() string { return s.path }

// Health implements Backend: a local file is always reachable (a failing
// disk shows as errors from the calls themselves).
func (s *Store) Health() Health { return Health{Backend: "bbolt"} }

// WithDefaults returns o with its zero fields set to the defaults (the
// shared backend applies the same bounds).
func (o Options) WithDefaults() Options { return o.withDefaults() }
