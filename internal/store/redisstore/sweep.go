package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sweep removes what has expired: conversations past their TTL, those
// over the conversation cap (least recently seen first), the state of
// the least recently seen conversations while plugin state is over its
// byte cap, and bucket entries past their TTL. One replica sweeps at a
// time (a lock key that expires on its own). It returns how many
// conversations it removed.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	ttl, maxConvs, maxBytes, _ := s.limits()
	s.mu.Lock()
	interval := s.opts.SweepInterval
	s.mu.Unlock()
	token := randomToken()
	var got bool
	if err := s.call(ctx, func(ctx context.Context) error {
		var err error
		got, err = s.rdb.SetNX(ctx, s.sweepLockKey(), token, interval).Result()
		return err
	}); err != nil {
		return 0, err
	}
	if !got {
		return 0, nil // another replica is sweeping
	}
	n := 0
	err := s.call(ctx, func(ctx context.Context) error {
		// A sweep may take more than one op timeout: its own bound.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*s.opTO+time.Second)
		defer cancel()
		cutoff := s.now().Add(-ttl).UnixMilli()
		for range 100 {
			old, err := s.rdb.ZRangeByScore(ctx, s.convsKey(), &redis.ZRangeBy{Min: "-inf", Max: "(" + strconv.FormatInt(cutoff, 10), Count: 500}).Result()
			if err != nil {
				return err
			}
			if len(old) == 0 {
				break
			}
			if err := s.removeConversations(ctx, old); err != nil {
				return err
			}
			n += len(old)
		}
		count, err := s.rdb.ZCard(ctx, s.convsKey()).Result()
		if err != nil {
			return err
		}
		if count > int64(maxConvs) {
			// Down to nine tenths of the cap, so eviction runs once per
			// many new conversations (as on bbolt).
			target := int64(maxConvs - maxConvs/10)
			if target < 1 {
				target = 1
			}
			victims, err := s.rdb.ZRange(ctx, s.convsKey(), 0, count-target-1).Result()
			if err != nil {
				return err
			}
			if err := s.removeConversations(ctx, victims); err != nil {
				return err
			}
			n += len(victims)
		}
		for range 100 {
			size, err := s.rdb.Get(ctx, s.stateBytesKey()).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if size <= maxBytes {
				break
			}
			ids, err := s.rdb.ZRange(ctx, s.convsKey(), 0, 99).Result()
			if err != nil || len(ids) == 0 {
				return err
			}
			freed := false
			for _, id := range ids {
				f, err := s.dropState(ctx, id)
				if err != nil {
					return err
				}
				if f > 0 {
					freed = true
					if size -= f; size <= maxBytes {
						break
					}
				}
			}
			if !freed {
				break
			}
		}
		s.mu.Lock()
		buckets := make([]*Bucket, 0, len(s.buckets))
		for _, b := range s.buckets {
			buckets = append(buckets, b)
		}
		s.mu.Unlock()
		for _, b := range buckets {
			opts := b.options()
			var cut time.Time
			if opts.TTL > 0 {
				cut = s.now().Add(-opts.TTL)
			}
			if _, err := b.evict(ctx, opts, cut); err != nil {
				return err
			}
		}
		return nil
	})
	// Release the lock if it is still ours.
	_ = s.call(ctx, func(ctx context.Context) error {
		return releaseLock.Run(ctx, s.rdb, []string{s.sweepLockKey()}, token).Err()
	})
	return n, err
}

// releaseLock deletes a lock key if it holds our token.
var releaseLock = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// dropState deletes a conversation's plugin state and returns the bytes
// freed.
func (s *Store) dropState(ctx context.Context, id string) (int64, error) {
	key := s.convKey(id, "ps")
	b, err := s.rdb.HGet(ctx, key, "_bytes").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	if err := s.rdb.Del(ctx, key).Err(); err != nil {
		return 0, err
	}
	if b > 0 {
		if err := s.rdb.DecrBy(ctx, s.stateBytesKey(), b).Err(); err != nil {
			return 0, err
		}
	}
	return b, nil
}

// removeConversations deletes conversations: status, state, record and
// index entry, and their state's bytes from the count.
func (s *Store) removeConversations(ctx context.Context, ids []string) error {
	sizes := make([]*redis.StringCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			sizes[i] = p.HGet(ctx, s.convKey(id, "ps"), "_bytes")
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	var freed int64
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			if b, err := sizes[i].Int64(); err == nil {
				freed += b
			}
			// One key at a time: a cluster needs each DEL in one slot.
			for _, kind := range []string{"st", "ps", "lc"} {
				p.Del(ctx, s.convKey(id, kind))
			}
			p.ZRem(ctx, s.convsKey(), id)
		}
		if freed != 0 {
			p.DecrBy(ctx, s.stateBytesKey(), freed)
		}
		return nil
	})
	s.mu.Lock()
	for _, id := range ids {
		delete(s.pending, id)
	}
	s.mu.Unlock()
	return err
}
