package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/store"
	"github.com/redis/go-redis/v9"
)

// Bucket is a named, bounded key/value bucket on the server, shared by
// the fleet (store.KV). Entries are 8-byte write time ‖ value; "order"
// ranks keys by write time for eviction and the TTL, "bytes" counts
// len(key)+len(value) over the entries.
type Bucket struct {
	s    *Store
	name string

	mu   sync.Mutex
	opts store.BucketOptions
}

// OpenBucket implements store.Backend.
func (s *Store) OpenBucket(name string, opts store.BucketOptions) (store.KV, error) {
	return s.Bucket(name, opts)
}

// Bucket opens the bucket name (1-64 bytes, not starting with '_').
func (s *Store) Bucket(name string, opts store.BucketOptions) (*Bucket, error) {
	if name == "" || len(name) > 64 || name[0] == '_' {
		return nil, fmt.Errorf("%w: %q", store.ErrBadName, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.buckets[name]; ok {
		b.mu.Lock()
		b.opts = opts
		b.mu.Unlock()
		return b, nil
	}
	b := &Bucket{s: s, name: name, opts: opts}
	s.buckets[name] = b
	return b, nil
}

func (b *Bucket) options() store.BucketOptions {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opts
}

func (b *Bucket) base() string               { return b.s.prefix + ":b:" + b.name + ":" }
func (b *Bucket) entryKey(key []byte) string { return b.base() + "k:" + string(key) }
func (b *Bucket) leaseKey(key []byte) string { return b.base() + "lease:" + string(key) }
func (b *Bucket) orderKey() string           { return b.base() + "order" }
func (b *Bucket) bytesKey() string           { return b.base() + "bytes" }

// Get returns key's value, or nil when it is absent or expired. A store
// that is down answers an error (the summary cache then calls the
// provider).
func (b *Bucket) Get(ctx context.Context, key []byte) ([]byte, error) {
	ttl := b.options().TTL
	var v []byte
	err := b.s.read(ctx, func(ctx context.Context) error {
		var err error
		v, err = b.s.rdb.Get(ctx, b.entryKey(key)).Bytes()
		if err == redis.Nil {
			v, err = nil, nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", b.name, err)
	}
	if len(v) < 8 {
		return nil, nil
	}
	if ttl > 0 && time.Unix(0, int64(binary.BigEndian.Uint64(v[:8]))).Add(ttl).Before(b.s.now()) {
		return nil, nil
	}
	return v[8:], nil
}

// Put stores value under key and evicts the oldest entries past the
// bounds: one pipelined round trip, and a second only when over a bound.
func (b *Bucket) Put(ctx context.Context, key, value []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("store: %s: empty key", b.name)
	}
	opts := b.options()
	if opts.MaxBytes > 0 && int64(len(key)+len(value)) > opts.MaxBytes {
		return fmt.Errorf("%w: %d bytes in bucket %s (the limit is %d)", store.ErrTooLarge, len(key)+len(value), b.name, opts.MaxBytes)
	}
	now := b.s.now()
	v := make([]byte, 8+len(value))
	binary.BigEndian.PutUint64(v, uint64(now.UnixNano()))
	copy(v[8:], value)
	var old *redis.StatusCmd
	var count *redis.IntCmd
	err := b.s.write(ctx, "bucket "+b.name, func(ctx context.Context) error {
		_, err := b.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			old = p.SetArgs(ctx, b.entryKey(key), v, redis.SetArgs{Get: true})
			p.ZAdd(ctx, b.orderKey(), redis.Z{Score: float64(now.UnixMilli()), Member: string(key)})
			count = p.ZCard(ctx, b.orderKey())
			return nil
		})
		if err == redis.Nil {
			err = nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("store: %s: %w", b.name, err)
	}
	delta := int64(len(key) + len(value))
	if o, err := old.Result(); err == nil && len(o) >= 8 {
		delta -= int64(len(key) + len(o) - 8)
	}
	var total int64
	err = b.s.write(ctx, "bucket "+b.name, func(ctx context.Context) error {
		var err error
		total, err = b.s.rdb.IncrBy(ctx, b.bytesKey(), delta).Result()
		return err
	})
	if err != nil {
		return fmt.Errorf("store: %s: %w", b.name, err)
	}
	if (opts.MaxEntries > 0 && count.Val() > int64(opts.MaxEntries)) || (opts.MaxBytes > 0 && total > opts.MaxBytes) {
		if _, err := b.evict(ctx, opts, time.Time{}); err != nil {
			return fmt.Errorf("store: %s: evicting: %w", b.name, err)
		}
	}
	return nil
}

// swapIfSame sets KEYS[1] to ARGV[2] if its value's SHA-1 is still ARGV[1]
// (the SHA-1 of "" for an absent key): Update's compare-and-set, on one
// key so that it works on a cluster too.
var swapIfSame = redis.NewScript(`
if redis.sha1hex(redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
`)

// Update implements store.KV optimistically: read the entry, let fn
// compute the new value, and write it only if the entry is still what was
// read (compared by SHA-1 in a script); a lost race starts over, at most
// store.MaxUpdateAttempts times (then store.ErrConflict). Three round
// trips when nobody races: the read, the swap, and the bucket's order and
// byte count.
func (b *Bucket) Update(ctx context.Context, key []byte, fn func(old []byte) ([]byte, error)) error {
	if len(key) == 0 {
		return fmt.Errorf("store: %s: empty key", b.name)
	}
	opts := b.options()
	ek := b.entryKey(key)
	for range store.MaxUpdateAttempts {
		var raw []byte
		err := b.s.read(ctx, func(ctx context.Context) error {
			var err error
			raw, err = b.s.rdb.Get(ctx, ek).Bytes()
			if err == redis.Nil {
				raw, err = nil, nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("store: %s: %w", b.name, err)
		}
		var old []byte
		if len(raw) >= 8 && (opts.TTL <= 0 || !time.Unix(0, int64(binary.BigEndian.Uint64(raw[:8]))).Add(opts.TTL).Before(b.s.now())) {
			old = raw[8:]
		}
		value, err := fn(old)
		if err != nil {
			return err
		}
		if opts.MaxBytes > 0 && int64(len(key)+len(value)) > opts.MaxBytes {
			return fmt.Errorf("%w: %d bytes in bucket %s (the limit is %d)", store.ErrTooLarge, len(key)+len(value), b.name, opts.MaxBytes)
		}
		now := b.s.now()
		v := make([]byte, 8+len(value))
		binary.BigEndian.PutUint64(v, uint64(now.UnixNano()))
		copy(v[8:], value)
		sum := sha1.Sum(raw)
		var swapped int64
		err = b.s.write(ctx, "bucket "+b.name, func(ctx context.Context) error {
			var err error
			swapped, err = swapIfSame.Run(ctx, b.s.rdb, []string{ek}, hex.EncodeToString(sum[:]), v).Int64()
			return err
		})
		if err != nil {
			return fmt.Errorf("store: %s: %w", b.name, err)
		}
		if swapped == 0 {
			continue // another writer came between the read and the swap
		}
		delta := int64(len(key) + len(value))
		if len(raw) >= 8 {
			delta -= int64(len(key) + len(raw) - 8)
		}
		return b.account(ctx, opts, key, now, delta)
	}
	return fmt.Errorf("store: %s: %w: %d attempts lost to concurrent writers", b.name, store.ErrConflict, store.MaxUpdateAttempts)
}

// account ranks key as written at now, adds delta to the byte count, and
// evicts past the bounds (one round trip, a second only when over one).
func (b *Bucket) account(ctx context.Context, opts store.BucketOptions, key []byte, now time.Time, delta int64) error {
	var count, total *redis.IntCmd
	err := b.s.write(ctx, "bucket "+b.name, func(ctx context.Context) error {
		_, err := b.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, b.orderKey(), redis.Z{Score: float64(now.UnixMilli()), Member: string(key)})
			count = p.ZCard(ctx, b.orderKey())
			total = p.IncrBy(ctx, b.bytesKey(), delta)
			return nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("store: %s: %w", b.name, err)
	}
	if (opts.MaxEntries > 0 && count.Val() > int64(opts.MaxEntries)) || (opts.MaxBytes > 0 && total.Val() > opts.MaxBytes) {
		if _, err := b.evict(ctx, opts, time.Time{}); err != nil {
			return fmt.Errorf("store: %s: evicting: %w", b.name, err)
		}
	}
	return nil
}

// Delete removes key.
func (b *Bucket) Delete(ctx context.Context, key []byte) error {
	_, err := b.remove(ctx, []string{string(key)})
	return err
}

// remove deletes members (keys) and their entries, keeping the byte count.
func (b *Bucket) remove(ctx context.Context, members []string) (int, error) {
	if len(members) == 0 {
		return 0, nil
	}
	lens := make([]*redis.IntCmd, len(members))
	err := b.s.write(ctx, "bucket "+b.name, func(ctx context.Context) error {
		_, err := b.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, m := range members {
				lens[i] = p.StrLen(ctx, b.entryKey([]byte(m)))
			}
			return nil
		})
		if err != nil {
			return err
		}
		var freed int64
		n := 0
		_, err = b.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, m := range members {
				if l := lens[i].Val(); l >= 8 {
					freed += int64(len(m)) + l - 8
					n++
				}
				p.Del(ctx, b.entryKey([]byte(m)))
				p.ZRem(ctx, b.orderKey(), m)
			}
			if freed != 0 {
				p.DecrBy(ctx, b.bytesKey(), freed)
			}
			return nil
		})
		return err
	})
	return len(members), err
}

// evict removes entries written before cutoff (the TTL; zero: none), then
// the oldest while the bucket is over a bound. It returns how many went.
func (b *Bucket) evict(ctx context.Context, opts store.BucketOptions, cutoff time.Time) (int, error) {
	n := 0
	if !cutoff.IsZero() {
		old, err := b.s.rdb.ZRangeByScore(ctx, b.orderKey(), &redis.ZRangeBy{Min: "-inf", Max: "(" + strconv.FormatInt(cutoff.UnixMilli(), 10), Count: 1000}).Result()
		if err != nil {
			return n, err
		}
		k, err := b.remove(ctx, old)
		n += k
		if err != nil {
			return n, err
		}
	}
	for range 100 { // bounded: at most 100 rounds of 100 per call
		var cc *redis.IntCmd
		var zc *redis.StringCmd
		if _, err := b.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			cc = p.ZCard(ctx, b.orderKey())
			zc = p.Get(ctx, b.bytesKey())
			return nil
		}); err != nil && err != redis.Nil {
			return n, err
		}
		count := cc.Val()
		size, _ := zc.Int64()
		over := 0
		if opts.MaxEntries > 0 && count > int64(opts.MaxEntries) {
			over = int(count - int64(opts.MaxEntries))
		}
		if opts.MaxBytes > 0 && size > opts.MaxBytes && over == 0 {
			over = 1 + int(count/20) // a twentieth at a time
		}
		if over == 0 {
			return n, nil
		}
		if over > 100 {
			over = 100
		}
		oldest, err := b.s.rdb.ZRange(ctx, b.orderKey(), 0, int64(over-1)).Result()
		if err != nil || len(oldest) == 0 {
			return n, err
		}
		k, err := b.remove(ctx, oldest)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Stats returns the bucket's entry count and size.
func (b *Bucket) Stats(ctx context.Context) (store.BucketStats, error) {
	var st store.BucketStats
	err := b.s.read(ctx, func(ctx context.Context) error {
		var err error
		if st.Entries, err = b.s.rdb.ZCard(ctx, b.orderKey()).Result(); err != nil {
			return err
		}
		st.Bytes, err = b.s.rdb.Get(ctx, b.bytesKey()).Int64()
		if err == redis.Nil {
			err = nil
		}
		return err
	})
	return st, err
}

// Lease takes key's lease for ttl (SET NX PX) unless another holder has
// it: the daemon that wins computes the value, the others wait for it in
// the bucket (llm.Leaser). release deletes the lease if it is still ours.
// A store that is down answers an error (the caller then goes on alone).
func (b *Bucket) Lease(ctx context.Context, key []byte, ttl time.Duration) (release func(), won bool, err error) {
	token := randomToken()
	lk := b.leaseKey(key)
	err = b.s.call(ctx, func(ctx context.Context) error {
		var err error
		won, err = b.s.rdb.SetNX(ctx, lk, token, ttl).Result()
		return err
	})
	if err != nil || !won {
		return func() {}, false, err
	}
	return func() {
		_ = b.s.call(context.Background(), func(ctx context.Context) error {
			return releaseLock.Run(ctx, b.s.rdb, []string{lk}, token).Err()
		})
	}, true, nil
}
