package store

import (
	"encoding/json"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Conversation is what the daemon knows of one conversation: the status
// GET /v1/status reports.
type Conversation struct {
	ID string `json:"id"`
	// Title names the conversation for people: the X-Compactd-Title
	// header (or /v1/compact's "title"), else the first line of its task
	// (its first user message), cut (see Title). Tags and User come from
	// X-Compactd-Tags and X-Compactd-User (or "tags" and "user").
	Title string   `json:"title,omitempty"`
	Tags  []string `json:"tags,omitempty"`
	User  string   `json:"user,omitempty"`
	// Model and Pipeline are the last request's.
	Model    string   `json:"model,omitempty"`
	Pipeline []string `json:"pipeline"`
	// Route says what chose the last proxied request's pipeline and
	// threshold: the model pattern of the proxy.routes entry that matched,
	// "header" (X-Compactd-Policy) or "default" (proxy.policy or
	// proxy.pipeline, else the config's default); "" for /v1/compact.
	Route string `json:"route,omitempty"`
	// Messages and Tokens are the last request's input; MessagesAfter and
	// TokensAfter what it returned.
	Messages      int `json:"messages"`
	Tokens        int `json:"tokens"`
	MessagesAfter int `json:"messages_after"`
	TokensAfter   int `json:"tokens_after"`
	// ContextWindow is the model's window (0 when unknown); UsageRatio is
	// Tokens / ContextWindow (0 when unknown).
	ContextWindow int     `json:"context_window,omitempty"`
	UsageRatio    float64 `json:"usage_ratio"`
	// PeakTokens is the largest conversation seen: the most tokens a
	// request brought (before compaction) or a response's usage reported.
	PeakTokens int `json:"peak_tokens,omitempty"`
	// Requests counts compaction requests, Compactions those that changed
	// the conversation, Failures those where a stage failed (the input was
	// kept), TokensSaved the tokens removed over all requests.
	Requests    int64 `json:"requests"`
	Compactions int64 `json:"compactions"`
	Failures    int64 `json:"failures"`
	TokensSaved int64 `json:"tokens_saved"`
	// Recoveries counts the proxy's compactions after the upstream
	// refused a request as too long (overflow recovery; each retried once).
	Recoveries int64 `json:"recoveries,omitempty"`
	// PaidUSD sums what the proxied responses cost at the models.dev
	// catalog's prices; FullUSD what they would have cost had every
	// token compaction removed been sent too (as uncached input).
	// UnpricedRequests counts responses with usage but no catalog price
	// for their model (left out of both sums).
	PaidUSD          float64   `json:"paid_usd,omitempty"`
	FullUSD          float64   `json:"full_usd,omitempty"`
	UnpricedRequests int64     `json:"unpriced_requests,omitempty"`
	FirstSeen        time.Time `json:"first_seen"`
	LastSeen         time.Time `json:"last_seen"`
	LastCompacted    time.Time `json:"last_compacted,omitzero"`
	// Provider is "openai" or "anthropic" for a conversation that came
	// through the proxy ("" for /v1/compact only).
	Provider string `json:"provider,omitempty"`
	// NeedsCompaction is set when the provider's usage of the last
	// response reached the proxy's threshold (or a manual compaction asked
	// for it): the next proxied request is compacted.
	NeedsCompaction bool `json:"needs_compaction"`
	// LastUsage is the provider's usage of the last proxied response.
	LastUsage *Usage `json:"last_usage,omitempty"`
	// Replica names the daemon that served the last request (the shared
	// store only; a single daemon leaves it empty).
	Replica string `json:"replica,omitempty"`
}

// Usage is what a provider reported for one response.
type Usage struct {
	// InputTokens counts every prompt token, cached ones included.
	InputTokens int `json:"input_tokens"`
	// OutputTokens counts the completion's tokens.
	OutputTokens int `json:"output_tokens"`
	// CacheReadTokens and CacheWriteTokens are the parts of InputTokens
	// read from and written to the provider's prompt cache.
	CacheReadTokens  int       `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int       `json:"cache_write_tokens,omitempty"`
	At               time.Time `json:"at"`
	// Cost, when set, is the response's price, added to the
	// conversation's money by RecordUsage; nil means the model has no
	// catalog price (counted in UnpricedRequests). It is not kept with
	// LastUsage.
	Cost *Cost `json:"-"`
}

// Cost is what one response cost at the model's catalog price, and what
// it would have cost had compaction removed nothing.
type Cost struct {
	PaidUSD float64
	FullUSD float64
}

// Total is the conversation's size after the response: the prompt plus
// the completion the next request will carry.
func (u Usage) Total() int { return u.InputTokens + u.OutputTokens }

// Observation is one compaction request, as Observe records it.
type Observation struct {
	ConversationID string
	Model          string
	Pipeline       []string
	// Route is the proxied request's route (see Conversation.Route; ""
	// keeps the conversation's).
	Route                        string
	MessagesBefore, TokensBefore int
	MessagesAfter, TokensAfter   int
	ContextWindow                int
	Compacted, Failed            bool
	// Provider marks a proxied request ("" keeps the conversation's).
	Provider string
	// Title, Tags and User label the conversation (empty ones keep the
	// conversation's): see Conversation. DerivedTitle, the first line of
	// the task, is the title only of a conversation that has none.
	Title, DerivedTitle string
	Tags                []string
	User                string
	// Recovery marks the proxy's compaction after a context-length error.
	Recovery bool
}

// Observe records a compaction request in the conversation's status. It
// does not block on disk (see the package comment).
func (s *Store) Observe(o Observation) {
	now := s.now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	c, ok := s.convs[o.ConversationID]
	if !ok {
		c = &Conversation{ID: o.ConversationID, FirstSeen: now}
		s.convs[o.ConversationID] = c
		delete(s.removed, o.ConversationID)
	}
	c.Model, c.Pipeline = o.Model, append([]string{}, o.Pipeline...) // [] rather than null when none ran
	if o.Route != "" {
		c.Route = o.Route
	}
	c.Messages, c.Tokens, c.MessagesAfter, c.TokensAfter = o.MessagesBefore, o.TokensBefore, o.MessagesAfter, o.TokensAfter
	c.ContextWindow, c.UsageRatio = o.ContextWindow, 0
	if o.ContextWindow > 0 {
		c.UsageRatio = float64(o.TokensBefore) / float64(o.ContextWindow)
	}
	c.Requests++
	if o.Compacted {
		c.Compactions++
		c.LastCompacted = now
	}
	if o.Failed {
		c.Failures++
	}
	if o.Recovery {
		c.Recoveries++
	}
	if saved := o.TokensBefore - o.TokensAfter; saved > 0 {
		c.TokensSaved += int64(saved)
	}
	if o.Provider != "" {
		c.Provider = o.Provider
	}
	c.PeakTokens = max(c.PeakTokens, o.TokensBefore)
	if o.Title != "" {
		c.Title = o.Title
	} else if c.Title == "" {
		c.Title = o.DerivedTitle
	}
	if len(o.Tags) > 0 {
		c.Tags = append([]string{}, o.Tags...)
	}
	if o.User != "" {
		c.User = o.User
	}
	if o.Compacted {
		c.NeedsCompaction = false // done; the next response's usage decides again
	}
	c.LastSeen = now
	s.dirty[c.ID] = true
	if !ok && len(s.convs) > s.opts.MaxConversations {
		s.evictLocked()
	}
}

// RecordUsage records a provider's usage for a proxied response: the
// conversation's usage ratio becomes u.Total() / window (0 when the window
// is unknown), and NeedsCompaction is set when the ratio reaches
// threshold, or the total reaches triggerTokens (> 0). It returns the
// ratio and the flag. A conversation not tracked (expired meanwhile) is
// not recorded.
func (s *Store) RecordUsage(id string, u Usage, window int, threshold float64, triggerTokens int) (ratio float64, needs bool) {
	if u.At.IsZero() {
		u.At = s.now().UTC()
	}
	if window > 0 {
		ratio = float64(u.Total()) / float64(window)
	}
	needs = window > 0 && threshold > 0 && ratio >= threshold || triggerTokens > 0 && u.Total() >= triggerTokens
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.convs[id]
	if !ok || s.closed {
		return ratio, needs
	}
	if u.Cost != nil {
		c.PaidUSD += u.Cost.PaidUSD
		c.FullUSD += u.Cost.FullUSD
	} else {
		c.UnpricedRequests++
	}
	u.Cost = nil
	c.LastUsage = &u
	c.UsageRatio = ratio
	c.PeakTokens = max(c.PeakTokens, u.Total())
	if window > 0 {
		c.ContextWindow = window
	}
	c.NeedsCompaction = needs
	s.dirty[id] = true
	return ratio, needs
}

// SetNeedsCompaction sets or clears a conversation's NeedsCompaction flag;
// it reports whether the conversation is tracked.
func (s *Store) SetNeedsCompaction(id string, needs bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.convs[id]
	if !ok || s.closed {
		return false
	}
	c.NeedsCompaction = needs
	s.dirty[id] = true
	return true
}

// evictLocked drops the least recently seen conversations until a tenth of
// the cap is free, so eviction runs once per many new conversations.
func (s *Store) evictLocked() {
	target := s.opts.MaxConversations - s.opts.MaxConversations/10
	if target < 1 {
		target = 1
	}
	all := make([]Conversation, 0, len(s.convs))
	for _, c := range s.convs {
		all = append(all, Conversation{ID: c.ID, LastSeen: c.LastSeen})
	}
	sortByLastSeen(all)
	for _, c := range all[target:] {
		s.removeLocked(c.ID)
	}
}

func (s *Store) removeLocked(id string) {
	delete(s.convs, id)
	delete(s.dirty, id)
	delete(s.pendingDetails, id)
	delete(s.pendingBuilders, id)
	s.removed[id] = true
}

// expireConversations drops conversations past their TTL or over the cap.
func (s *Store) expireConversations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := s.now().Add(-s.opts.TTL)
	n := 0
	for id, c := range s.convs {
		if c.LastSeen.Before(cutoff) {
			s.removeLocked(id)
			n++
		}
	}
	if len(s.convs) > s.opts.MaxConversations {
		before := len(s.convs)
		s.evictLocked()
		n += before - len(s.convs)
	}
	return n
}

// Conversations returns the tracked conversations, most recently seen
// first; limit > 0 keeps the first limit.
func (s *Store) Conversations(limit int) []Conversation {
	s.mu.Lock()
	out := make([]Conversation, 0, len(s.convs))
	for _, c := range s.convs {
		out = append(out, *c)
	}
	s.mu.Unlock()
	sortByLastSeen(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Conversation returns one conversation's status.
func (s *Store) Conversation(id string) (Conversation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.convs[id]
	if !ok {
		return Conversation{}, false
	}
	return *c, true
}

// Totals sums the tracked conversations.
type Totals struct {
	Conversations int   `json:"conversations"`
	Requests      int64 `json:"requests"`
	Compactions   int64 `json:"compactions"`
	Failures      int64 `json:"failures"`
	TokensSaved   int64 `json:"tokens_saved"`
	// PaidUSD, FullUSD and UnpricedRequests sum the conversations' money
	// (see Conversation).
	PaidUSD          float64 `json:"paid_usd"`
	FullUSD          float64 `json:"full_usd"`
	UnpricedRequests int64   `json:"unpriced_requests"`
}

// Add adds c's counts and money to t (not Conversations).
func (t *Totals) Add(c *Conversation) {
	t.Requests += c.Requests
	t.Compactions += c.Compactions
	t.Failures += c.Failures
	t.TokensSaved += c.TokensSaved
	t.PaidUSD += c.PaidUSD
	t.FullUSD += c.FullUSD
	t.UnpricedRequests += c.UnpricedRequests
}

// Totals returns the sums over the tracked conversations.
func (s *Store) Totals() Totals {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := Totals{Conversations: len(s.convs)}
	for _, c := range s.convs {
		t.Add(c)
	}
	return t
}

func (s *Store) loadConversations() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(conversationsBucket)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			var c Conversation
			if err := json.Unmarshal(v, &c); err != nil || c.ID != string(k) {
				s.logger.Warn("dropping an unreadable conversation record", "id", strings.ToValidUTF8(string(k), "?"))
				s.removed[string(k)] = true
				return nil
			}
			s.convs[c.ID] = &c
			return nil
		})
	})
}
