package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// BucketOptions bound a Bucket. Zero fields mean "no bound".
type BucketOptions struct {
	// MaxEntries caps the number of entries.
	MaxEntries int
	// MaxBytes caps the sum of len(key)+len(value) over the entries.
	MaxBytes int64
	// TTL expires an entry this long after it was last written.
	TTL time.Duration
}

// Bucket is a named, bounded key/value map in the store. When a Put takes
// it over a bound, the entries written longest ago are evicted (a Put of an
// existing key counts as a new write; a Get does not, so reads never cost
// a disk write). Entries past their TTL are invisible to Get and removed by
// the store's sweeper.
//
// Put and Delete are durable when they return. A Bucket is safe for
// concurrent use; it is valid until its Store is closed.
type Bucket struct {
	s    *Store
	name []byte

	mu   sync.Mutex
	opts BucketOptions
}

// Layout of a bucket in bbolt: a top-level bucket named after it holding
//
//	"d": key → 8-byte big-endian write time (UnixNano) ‖ value
//	"o": 8-byte write time ‖ key → empty (the eviction order)
//	"m": 16 bytes: entry count, total bytes (big-endian)
var (
	dataKey  = []byte("d")
	orderKey = []byte("o")
	metaKey  = []byte("m")
)

// Bucket opens (creating if needed) the bucket name with opts. Names are
// 1-64 bytes and may not start with '_' (reserved for the store). A second
// call with the same name returns the same *Bucket with opts replacing its
// bounds.
func (s *Store) Bucket(name string, opts BucketOptions) (*Bucket, error) {
	if name == "" || len(name) > 64 || name[0] == '_' {
		return nil, fmt.Errorf("%w: %q", ErrBadName, name)
	}
	return s.bucket(name, opts)
}

func (s *Store) bucket(name string, opts BucketOptions) (*Bucket, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if b, ok := s.buckets[name]; ok {
		s.mu.Unlock()
		b.setOptions(opts)
		return b, nil
	}
	// Not under s.mu: Flush takes s.mu inside its write transaction.
	s.mu.Unlock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		top, err := tx.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return err
		}
		for _, k := range [][]byte{dataKey, orderKey} {
			if _, err := top.CreateBucketIfNotExists(k); err != nil {
				return err
			}
		}
		if top.Get(metaKey) == nil {
			return top.Put(metaKey, make([]byte, 16))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.buckets[name]; ok { // opened meanwhile
		b.setOptions(opts)
		return b, nil
	}
	b := &Bucket{s: s, name: []byte(name), opts: opts}
	s.buckets[name] = b
	return b, nil
}

func (b *Bucket) setOptions(o BucketOptions) {
	b.mu.Lock()
	b.opts = o
	b.mu.Unlock()
}

func (b *Bucket) options() BucketOptions {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opts
}

// Name returns the bucket's name.
func (b *Bucket) Name() string { return string(b.name) }

type txBucket struct {
	top, data, order *bolt.Bucket
	count, size      int64
}

func (b *Bucket) open(tx *bolt.Tx) (*txBucket, error) {
	top := tx.Bucket(b.name)
	if top == nil {
		return nil, fmt.Errorf("store: bucket %s is missing", b.name)
	}
	t := &txBucket{top: top, data: top.Bucket(dataKey), order: top.Bucket(orderKey)}
	if m := top.Get(metaKey); len(m) == 16 {
		t.count = int64(binary.BigEndian.Uint64(m[:8]))
		t.size = int64(binary.BigEndian.Uint64(m[8:]))
	}
	return t, nil
}

func (t *txBucket) saveMeta() error {
	m := make([]byte, 16)
	binary.BigEndian.PutUint64(m[:8], uint64(t.count))
	binary.BigEndian.PutUint64(m[8:], uint64(t.size))
	return t.top.Put(metaKey, m)
}

func orderEntry(ts int64, key []byte) []byte {
	return append(beU64(uint64(ts)), key...)
}

// remove deletes key (whose stored value is v) from data and order.
func (t *txBucket) remove(key, v []byte) error {
	ts := int64(binary.BigEndian.Uint64(v[:8]))
	if err := t.order.Delete(orderEntry(ts, key)); err != nil {
		return err
	}
	t.count--
	t.size -= int64(len(key) + len(v) - 8)
	return t.data.Delete(key)
}

// Get returns a copy of key's value, or nil (and no error) when it is
// absent or expired; a stored empty value comes back as a non-nil empty
// slice. An error means the storage failed.
func (b *Bucket) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ttl := b.options().TTL
	var out []byte
	err := b.s.db.View(func(tx *bolt.Tx) error {
		t, err := b.open(tx)
		if err != nil {
			return err
		}
		v := t.data.Get(key)
		if len(v) < 8 {
			return nil
		}
		if ttl > 0 && time.Unix(0, int64(binary.BigEndian.Uint64(v[:8]))).Add(ttl).Before(b.s.now()) {
			return nil
		}
		out = append([]byte{}, v[8:]...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", b.name, err)
	}
	return out, nil
}

// Update implements KV: fn runs inside the write transaction, so it is
// called once and concurrent Updates are serialised.
func (b *Bucket) Update(ctx context.Context, key []byte, fn func(old []byte) ([]byte, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(key) == 0 {
		return fmt.Errorf("store: %s: empty key", b.name)
	}
	opts := b.options()
	err := b.s.db.Update(func(tx *bolt.Tx) error {
		t, err := b.open(tx)
		if err != nil {
			return err
		}
		return b.updateTx(tx, t, key, opts, fn)
	})
	if err != nil {
		return fmt.Errorf("store: %s: %w", b.name, err)
	}
	return nil
}

// UpdateMany implements MultiUpdater: Update of each key in turn, all in
// one write transaction (one commit and sync for the lot).
func (b *Bucket) UpdateMany(ctx context.Context, keys [][]byte, fn func(i int, old []byte) ([]byte, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, key := range keys {
		if len(key) == 0 {
			return fmt.Errorf("store: %s: empty key", b.name)
		}
	}
	opts := b.options()
	err := b.s.db.Update(func(tx *bolt.Tx) error {
		t, err := b.open(tx)
		if err != nil {
			return err
		}
		for i, key := range keys {
			if err := b.updateTx(tx, t, key, opts, func(old []byte) ([]byte, error) { return fn(i, old) }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: %s: %w", b.name, err)
	}
	return nil
}

// updateTx is Update inside a write transaction (t is the bucket there).
func (b *Bucket) updateTx(tx *bolt.Tx, t *txBucket, key []byte, opts BucketOptions, fn func(old []byte) ([]byte, error)) error {
	var old []byte
	if v := t.data.Get(key); len(v) >= 8 && (opts.TTL <= 0 || !time.Unix(0, int64(binary.BigEndian.Uint64(v[:8]))).Add(opts.TTL).Before(b.s.now())) {
		old = append([]byte{}, v[8:]...)
	}
	value, err := fn(old)
	if err != nil {
		return err
	}
	if opts.MaxBytes > 0 && int64(len(key)+len(value)) > opts.MaxBytes {
		return fmt.Errorf("%w: %d bytes in bucket %s (the limit is %d)", ErrTooLarge, len(key)+len(value), b.name, opts.MaxBytes)
	}
	return b.putTx(tx, key, value, opts)
}

// Put stores value under key, evicting the oldest entries if the bucket
// goes over a bound. An entry larger than MaxBytes is refused (ErrTooLarge).
func (b *Bucket) Put(ctx context.Context, key, value []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(key) == 0 {
		return fmt.Errorf("store: %s: empty key", b.name)
	}
	opts := b.options()
	if opts.MaxBytes > 0 && int64(len(key)+len(value)) > opts.MaxBytes {
		return fmt.Errorf("%w: %d bytes in bucket %s (the limit is %d)", ErrTooLarge, len(key)+len(value), b.name, opts.MaxBytes)
	}
	err := b.s.db.Update(func(tx *bolt.Tx) error { return b.putTx(tx, key, value, opts) })
	if err != nil {
		return fmt.Errorf("store: %s: %w", b.name, err)
	}
	return nil
}

// putTx is Put inside a write transaction.
func (b *Bucket) putTx(tx *bolt.Tx, key, value []byte, opts BucketOptions) error {
	t, err := b.open(tx)
	if err != nil {
		return err
	}
	if old := t.data.Get(key); len(old) >= 8 {
		if err := t.remove(key, old); err != nil {
			return err
		}
	}
	ts := b.s.timestamp()
	v := make([]byte, 8+len(value))
	binary.BigEndian.PutUint64(v, uint64(ts))
	copy(v[8:], value)
	if err := t.data.Put(key, v); err != nil {
		return err
	}
	if err := t.order.Put(orderEntry(ts, key), nil); err != nil {
		return err
	}
	t.count++
	t.size += int64(len(key) + len(value))
	if err := t.evict(opts); err != nil {
		return err
	}
	return t.saveMeta()
}

// evict removes the oldest entries while the bucket is over a bound.
func (t *txBucket) evict(opts BucketOptions) error {
	for (opts.MaxEntries > 0 && t.count > int64(opts.MaxEntries)) || (opts.MaxBytes > 0 && t.size > opts.MaxBytes) {
		k, _ := t.order.Cursor().First()
		if k == nil {
			return nil
		}
		key := append([]byte{}, k[8:]...)
		v := t.data.Get(key)
		if v == nil { // an order entry without data: drop it
			if err := t.order.Delete(k); err != nil {
				return err
			}
			continue
		}
		if err := t.remove(key, v); err != nil {
			return err
		}
	}
	return nil
}

// Delete removes key (absent keys are fine).
func (b *Bucket) Delete(ctx context.Context, key []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := b.s.db.Update(func(tx *bolt.Tx) error { return b.deleteTx(tx, key) })
	if err != nil {
		return fmt.Errorf("store: %s: %w", b.name, err)
	}
	return nil
}

// deleteTx is Delete inside a write transaction.
func (b *Bucket) deleteTx(tx *bolt.Tx, key []byte) error {
	t, err := b.open(tx)
	if err != nil {
		return err
	}
	if v := t.data.Get(key); len(v) >= 8 {
		if err := t.remove(key, v); err != nil {
			return err
		}
		return t.saveMeta()
	}
	return nil
}

// DeletePrefix removes every key that starts with prefix and returns how
// many it removed.
func (b *Bucket) DeletePrefix(ctx context.Context, prefix []byte) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int
	err := b.s.db.Update(func(tx *bolt.Tx) error {
		var err error
		n, err = b.deletePrefixTx(tx, prefix)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("store: %s: %w", b.name, err)
	}
	return n, nil
}

func (b *Bucket) deletePrefixTx(tx *bolt.Tx, prefix []byte) (int, error) {
	t, err := b.open(tx)
	if err != nil {
		return 0, err
	}
	var keys, vals [][]byte
	c := t.data.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		keys = append(keys, append([]byte{}, k...))
		vals = append(vals, append([]byte{}, v...))
	}
	for i := range keys {
		if err := t.remove(keys[i], vals[i]); err != nil {
			return 0, err
		}
	}
	if len(keys) > 0 {
		return len(keys), t.saveMeta()
	}
	return 0, nil
}

// BucketStats describe a bucket's content.
type BucketStats struct {
	Entries int64
	Bytes   int64
}

// Stats returns the bucket's entry count and size.
func (b *Bucket) Stats() (BucketStats, error) {
	var st BucketStats
	err := b.s.db.View(func(tx *bolt.Tx) error {
		t, err := b.open(tx)
		if err != nil {
			return err
		}
		st = BucketStats{Entries: t.count, Bytes: t.size}
		return nil
	})
	return st, err
}

// expire removes entries past the TTL (and, after a bound was lowered,
// entries over the bounds).
func (b *Bucket) expire() (int, error) {
	opts := b.options()
	n := 0
	err := b.s.db.Update(func(tx *bolt.Tx) error {
		t, err := b.open(tx)
		if err != nil {
			return err
		}
		before := t.count
		if opts.TTL > 0 {
			cutoff := uint64(b.s.now().Add(-opts.TTL).UnixNano())
			c := t.order.Cursor()
			var expired [][]byte
			for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k[:8]) < cutoff; k, _ = c.Next() {
				expired = append(expired, append([]byte{}, k[8:]...))
			}
			for _, key := range expired {
				if v := t.data.Get(key); v != nil {
					if err := t.remove(key, v); err != nil {
						return err
					}
				}
			}
		}
		if err := t.evict(opts); err != nil {
			return err
		}
		n = int(before - t.count)
		if n == 0 {
			return nil
		}
		return t.saveMeta()
	})
	return n, err
}
