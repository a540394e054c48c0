package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/compactd/compactd/internal/store"
	"github.com/redis/go-redis/v9"
)

// Status hash fields (P:{ID}:st).
const (
	fModel, fPipeline, fMessages, fTokens         = "model", "pipeline", "messages", "tokens"
	fMessagesAfter, fTokensAfter, fWindow, fRatio = "messages_after", "tokens_after", "context_window", "usage_ratio"
	fRequests, fCompactions, fFailures, fSaved    = "requests", "compactions", "failures", "tokens_saved"
	fFirst, fLast, fLastCompacted, fProvider      = "first_seen", "last_seen", "last_compacted", "provider"
	fNeeds, fUsage, fReplica                      = "needs_compaction", "last_usage", "replica"
	fTitle, fTags, fUser, fPeak                   = "title", "tags", "user", "peak_tokens"
	fPaid, fFull, fUnpriced                       = "paid_usd", "full_usd", "unpriced_requests"
	fRecoveries, fRoute                           = "recoveries", "route"
)

// setMax sets a hash field to ARGV[2] if that is more than its value
// (the peak of a conversation's tokens, over replicas).
const setMax = `
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if tonumber(ARGV[2]) > cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1
`

// Observe implements store.Backend: one pipelined round trip that adds to
// the conversation's counters (so replicas add up), sets its last
// request's fields, and moves it up the index. A store that is down drops
// it (counted).
func (s *Store) Observe(o store.Observation) {
	now := s.now().UTC()
	ttl, maxConvs, _, _ := s.limits()
	key := s.convKey(o.ConversationID, "st")
	ratio := 0.0
	if o.ContextWindow > 0 {
		ratio = float64(o.TokensBefore) / float64(o.ContextWindow)
	}
	fields := []any{
		fModel, o.Model, fPipeline, mustJSON(append([]string{}, o.Pipeline...)),
		fMessages, o.MessagesBefore, fTokens, o.TokensBefore, fMessagesAfter, o.MessagesAfter, fTokensAfter, o.TokensAfter,
		fWindow, o.ContextWindow, fRatio, ratio, fLast, now.UnixNano(), fReplica, s.replica,
	}
	if o.Compacted {
		fields = append(fields, fLastCompacted, now.UnixNano(), fNeeds, 0)
	}
	if o.Provider != "" {
		fields = append(fields, fProvider, o.Provider)
	}
	if o.Route != "" {
		fields = append(fields, fRoute, o.Route)
	}
	if o.Title != "" {
		fields = append(fields, fTitle, o.Title)
	}
	if len(o.Tags) > 0 {
		fields = append(fields, fTags, mustJSON(o.Tags))
	}
	if o.User != "" {
		fields = append(fields, fUser, o.User)
	}
	var isNew *redis.BoolCmd
	var count *redis.IntCmd
	_ = s.write(context.Background(), "status", func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			isNew = p.HSetNX(ctx, key, fFirst, now.UnixNano())
			p.HSet(ctx, key, fields...)
			p.HIncrBy(ctx, key, fRequests, 1)
			if o.Title == "" && o.DerivedTitle != "" {
				p.HSetNX(ctx, key, fTitle, o.DerivedTitle)
			}
			p.Eval(ctx, setMax, []string{key}, fPeak, o.TokensBefore)
			if o.Compacted {
				p.HIncrBy(ctx, key, fCompactions, 1)
			}
			if o.Failed {
				p.HIncrBy(ctx, key, fFailures, 1)
			}
			if o.Recovery {
				p.HIncrBy(ctx, key, fRecoveries, 1)
			}
			if saved := o.TokensBefore - o.TokensAfter; saved > 0 {
				p.HIncrBy(ctx, key, fSaved, int64(saved))
			}
			p.PExpire(ctx, key, ttl+keyGrace)
			p.ZAdd(ctx, s.convsKey(), redis.Z{Score: float64(now.UnixMilli()), Member: o.ConversationID})
			count = p.ZCard(ctx, s.convsKey())
			return nil
		})
		return err
	})
	if isNew != nil && isNew.Val() && count != nil && count.Val() > int64(maxConvs) {
		go func() {
			if _, err := s.Sweep(context.Background()); err != nil {
				s.logger.Debug("evicting conversations over the cap", "error", err)
			}
		}()
	}
}

// setIfTracked sets fields of a conversation's status if it exists.
var setIfTracked = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`)

// recordUsage is setIfTracked that also raises the peak to ARGV[1] and
// adds the response's money: ARGV[2] dollars paid, ARGV[3] dollars had
// everything been sent, ARGV[4] unpriced responses (0 or 1). The fields
// to set follow from ARGV[5].
var recordUsage = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local cur = tonumber(redis.call('HGET', KEYS[1], 'peak_tokens') or '0') or 0
if tonumber(ARGV[1]) > cur then redis.call('HSET', KEYS[1], 'peak_tokens', ARGV[1]) end
if tonumber(ARGV[4]) > 0 then
  redis.call('HINCRBY', KEYS[1], 'unpriced_requests', ARGV[4])
else
  redis.call('HINCRBYFLOAT', KEYS[1], 'paid_usd', ARGV[2])
  redis.call('HINCRBYFLOAT', KEYS[1], 'full_usd', ARGV[3])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
return 1
`)

// RecordUsage implements store.Backend (see store.Store.RecordUsage).
func (s *Store) RecordUsage(id string, u store.Usage, window int, threshold float64, triggerTokens int) (ratio float64, needs bool) {
	if u.At.IsZero() {
		u.At = s.now().UTC()
	}
	if window > 0 {
		ratio = float64(u.Total()) / float64(window)
	}
	needs = window > 0 && threshold > 0 && ratio >= threshold || triggerTokens > 0 && u.Total() >= triggerTokens
	paid, full, unpriced := 0.0, 0.0, 1
	if u.Cost != nil {
		paid, full, unpriced = u.Cost.PaidUSD, u.Cost.FullUSD, 0
	}
	u.Cost = nil
	args := []any{u.Total(), strconv.FormatFloat(paid, 'f', -1, 64), strconv.FormatFloat(full, 'f', -1, 64), unpriced,
		fUsage, mustJSON(u), fRatio, ratio, fNeeds, boolInt(needs)}
	if window > 0 {
		args = append(args, fWindow, window)
	}
	_ = s.write(context.Background(), "usage", func(ctx context.Context) error {
		return recordUsage.Run(ctx, s.rdb, []string{s.convKey(id, "st")}, args...).Err()
	})
	return ratio, needs
}

// SetNeedsCompaction implements store.Backend.
func (s *Store) SetNeedsCompaction(id string, needs bool) bool {
	var n int64
	err := s.write(context.Background(), "needs_compaction", func(ctx context.Context) error {
		var err error
		n, err = setIfTracked.Run(ctx, s.rdb, []string{s.convKey(id, "st")}, fNeeds, boolInt(needs)).Int64()
		return err
	})
	return err == nil && n == 1
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Conversation implements store.Backend: the fleet's status of one
// conversation (false also when the store is down).
func (s *Store) Conversation(id string) (store.Conversation, bool) {
	var m map[string]string
	err := s.read(context.Background(), func(ctx context.Context) error {
		var err error
		m, err = s.rdb.HGetAll(ctx, s.convKey(id, "st")).Result()
		return err
	})
	if err != nil || len(m) == 0 {
		return store.Conversation{}, false
	}
	return decodeConversation(id, m), true
}

// Conversations implements store.Backend: the most recently seen first,
// read in one pipelined round trip after the index.
func (s *Store) Conversations(limit int) []store.Conversation {
	out, _ := s.conversations(context.Background(), limit)
	return out
}

func (s *Store) conversations(ctx context.Context, limit int) ([]store.Conversation, error) {
	var ids []string
	var cmds []*redis.MapStringStringCmd
	err := s.read(ctx, func(ctx context.Context) error {
		var err error
		stop := int64(-1)
		if limit > 0 {
			stop = int64(limit - 1)
		}
		ids, err = s.rdb.ZRevRange(ctx, s.convsKey(), 0, stop).Result()
		if err != nil || len(ids) == 0 {
			return err
		}
		cmds = make([]*redis.MapStringStringCmd, len(ids))
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.HGetAll(ctx, s.convKey(id, "st"))
			}
			return nil
		})
		return err
	})
	if err != nil {
		return []store.Conversation{}, err
	}
	out := make([]store.Conversation, 0, len(ids))
	for i, id := range ids {
		if m := cmds[i].Val(); len(m) > 0 {
			out = append(out, decodeConversation(id, m))
		}
	}
	return out, nil
}

// Totals implements store.Backend: sums over the fleet's conversations.
func (s *Store) Totals() store.Totals {
	cs, err := s.conversations(context.Background(), 0)
	if err != nil {
		return store.Totals{}
	}
	t := store.Totals{Conversations: len(cs)}
	for i := range cs {
		t.Add(&cs[i])
	}
	return t
}

func decodeConversation(id string, m map[string]string) store.Conversation {
	i := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
	i64 := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	t := func(k string) time.Time {
		if n := i64(k); n > 0 {
			return time.Unix(0, n).UTC()
		}
		return time.Time{}
	}
	c := store.Conversation{
		ID: id, Model: m[fModel], Messages: i(fMessages), Tokens: i(fTokens),
		MessagesAfter: i(fMessagesAfter), TokensAfter: i(fTokensAfter), ContextWindow: i(fWindow),
		Requests: i64(fRequests), Compactions: i64(fCompactions), Failures: i64(fFailures), TokensSaved: i64(fSaved),
		Recoveries: i64(fRecoveries), FirstSeen: t(fFirst), LastSeen: t(fLast), LastCompacted: t(fLastCompacted),
		Provider: m[fProvider], NeedsCompaction: m[fNeeds] == "1", Replica: m[fReplica],
		Title: m[fTitle], User: m[fUser], PeakTokens: i(fPeak), UnpricedRequests: i64(fUnpriced), Route: m[fRoute],
	}
	c.PaidUSD, _ = strconv.ParseFloat(m[fPaid], 64)
	c.FullUSD, _ = strconv.ParseFloat(m[fFull], 64)
	if t := m[fTags]; t != "" {
		_ = json.Unmarshal([]byte(t), &c.Tags) // an unreadable list shows none
	}
	c.UsageRatio, _ = strconv.ParseFloat(m[fRatio], 64)
	if err := json.Unmarshal([]byte(m[fPipeline]), &c.Pipeline); err != nil || c.Pipeline == nil {
		c.Pipeline = []string{}
	}
	if u := m[fUsage]; u != "" {
		var us store.Usage
		if json.Unmarshal([]byte(u), &us) == nil {
			c.LastUsage = &us
		}
	}
	return c
}

// SetLastCompactionFunc implements store.Backend: the record is built and
// written behind, once per FlushInterval (as on bbolt).
func (s *Store) SetLastCompactionFunc(conversationID string, build func() ([]byte, error)) error {
	s.mu.Lock()
	s.pending[conversationID] = build
	s.mu.Unlock()
	return nil
}

// LastCompaction implements store.Backend.
func (s *Store) LastCompaction(ctx context.Context, conversationID string) ([]byte, error) {
	s.mu.Lock()
	build, ok := s.pending[conversationID]
	s.mu.Unlock()
	if ok {
		if b, err := build(); err == nil {
			return b, nil
		}
	}
	var v []byte
	err := s.read(ctx, func(ctx context.Context) error {
		var err error
		v, err = s.rdb.Get(ctx, s.convKey(conversationID, "lc")).Bytes()
		if err == redis.Nil {
			v, err = nil, nil
		}
		return err
	})
	return v, err
}

// Flush builds and writes the pending last-compaction records in one
// pipeline. Records of a store that is down are dropped (counted).
func (s *Store) Flush() {
	s.mu.Lock()
	pending := s.pending
	s.pending = map[string]func() ([]byte, error){}
	ttl := s.opts.TTL
	s.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	recs := map[string][]byte{}
	for id, build := range pending {
		b, err := build()
		if err != nil || len(b) > store.DefaultMaxDetailValue {
			continue
		}
		recs[id] = b
	}
	err := s.write(context.Background(), "compaction records", func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for id, b := range recs {
				p.Set(ctx, s.convKey(id, "lc"), b, ttl+keyGrace)
			}
			return nil
		})
		return err
	})
	if err != nil && !isUnavailable(err) {
		s.logger.Warn("writing compaction records", "error", fmt.Sprint(err))
	}
}
