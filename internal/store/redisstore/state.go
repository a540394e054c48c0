package redisstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/compactd/compactd/internal/store"
	"github.com/redis/go-redis/v9"
)

// casState writes a policy's state if its version is still ARGV[2] (""
// for none; "*" writes whatever it is), bumps the version, keeps the
// hash's byte count and expiry. It returns {written, bytes delta}.
var casState = redis.NewScript(`
local vf = 'v:' .. ARGV[1]
local sf = 's:' .. ARGV[1]
local cur = redis.call('HGET', KEYS[1], vf)
if ARGV[2] ~= '*' and (cur or '') ~= ARGV[2] then return {0, 0} end
local old = redis.call('HSTRLEN', KEYS[1], sf)
redis.call('HINCRBY', KEYS[1], vf, 1)
redis.call('HSET', KEYS[1], sf, ARGV[3])
local delta = string.len(ARGV[3]) - old
redis.call('HINCRBY', KEYS[1], '_bytes', delta)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, delta}
`)

// LoadState implements compactor.StateStore.
func (s *Store) LoadState(ctx context.Context, conversationID, policy string) (json.RawMessage, error) {
	st, _, err := s.LoadStateVersion(ctx, conversationID, policy)
	return st, err
}

// LoadStateVersion implements store.VersionedState: the state and its
// version ("" when there is none).
func (s *Store) LoadStateVersion(ctx context.Context, conversationID, policy string) (json.RawMessage, string, error) {
	var vals []any
	err := s.read(ctx, func(ctx context.Context) error {
		var err error
		vals, err = s.rdb.HMGet(ctx, s.convKey(conversationID, "ps"), "s:"+policy, "v:"+policy).Result()
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("loading state: %w", err)
	}
	var st json.RawMessage
	var ver string
	if v, ok := vals[0].(string); ok {
		st = json.RawMessage(v)
	}
	if v, ok := vals[1].(string); ok {
		ver = v
	}
	return st, ver, nil
}

// SaveState implements compactor.StateStore: an unconditional write.
func (s *Store) SaveState(ctx context.Context, conversationID, policy string, state json.RawMessage) error {
	return s.SaveStateIf(ctx, conversationID, policy, state, "*")
}

// SaveStateIf implements store.VersionedState: the state is written only
// if its version is still version (as LoadStateVersion returned it);
// otherwise another replica wrote it meanwhile and ErrConflict says so,
// leaving that write in place. "*" writes unconditionally.
func (s *Store) SaveStateIf(ctx context.Context, conversationID, policy string, state json.RawMessage, version string) error {
	ttl, _, _, limit := s.limits()
	if len(state) > limit {
		return fmt.Errorf("%w: state of %d bytes (the limit is %d)", store.ErrTooLarge, len(state), limit)
	}
	var res []any
	err := s.write(ctx, "state", func(ctx context.Context) error {
		var err error
		res, err = casState.Run(ctx, s.rdb, []string{s.convKey(conversationID, "ps")},
			policy, version, string(state), (ttl + keyGrace).Milliseconds()).Slice()
		return err
	})
	if err != nil {
		return fmt.Errorf("saving state: %w", err)
	}
	if len(res) != 2 {
		return fmt.Errorf("saving state: unexpected reply %v", res)
	}
	if ok, _ := res[0].(int64); ok != 1 {
		return fmt.Errorf("%w: %s's state of conversation %s", store.ErrConflict, policy, conversationID)
	}
	if delta, _ := res[1].(int64); delta != 0 {
		// The byte count is a separate key (another slot in a cluster);
		// a lost increment only shifts when the cap starts evicting.
		_ = s.write(ctx, "state bytes", func(ctx context.Context) error {
			return s.rdb.IncrBy(ctx, s.stateBytesKey(), delta).Err()
		})
	}
	return nil
}
