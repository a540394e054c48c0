package client

import (
	"encoding/json"
	"time"
)

// CompactRequest is the body of POST /v1/compact.
type CompactRequest struct {
	// Policy or Pipeline names what to run; with neither, the daemon's
	// configured default runs.
	Policy   string   `json:"policy,omitempty"`
	Pipeline []string `json:"pipeline,omitempty"`
	// Config overrides the policy's config for this request. With Policy
	// it holds that policy's keys ({"window_size": 8}); with Pipeline it
	// holds one object per policy name ({"sliding": {"window_size": 8}}).
	Config map[string]any `json:"config,omitempty"`
	// Model is the agent's model: it picks the tokenizer and the context
	// window.
	Model string `json:"model,omitempty"`
	// ConversationID identifies the conversation (at most 256 bytes). When
	// empty the daemon derives a stable one from the leading system
	// messages and the first user message.
	ConversationID string `json:"conversation_id,omitempty"`
	// Title, Tags and User label the conversation on the status page and
	// in GET /v1/status (searchable there); Title defaults to the first
	// line of its task.
	Title string   `json:"title,omitempty"`
	Tags  []string `json:"tags,omitempty"`
	User  string   `json:"user,omitempty"`
	// ContextWindow overrides the model's known context window.
	ContextWindow int `json:"context_window,omitempty"`
	// TargetTokens stops a pipeline early once the conversation fits.
	TargetTokens int `json:"target_tokens,omitempty"`
	// Force compacts now: each policy is told the caller decided
	// (context.compact with reason "manual" and TargetTokens as its
	// target), so its own thresholds do not hold the compaction back.
	Force bool `json:"force,omitempty"`
	// CacheBreakpoints asks for the policy's prompt-cache breakpoints (up
	// to 3 messages) as Anthropic's "cache_control": {"type": "ephemeral"}
	// on the marked messages (on their last content block when the
	// content is an array). Off by default: OpenAI rejects the key.
	CacheBreakpoints bool `json:"cache_breakpoints,omitempty"`
	// Format is "openai" (the default: Messages are OpenAI chat messages),
	// "anthropic" (Messages are Anthropic Messages API messages, System
	// its top-level system prompt) or "responses" (Messages are an OpenAI
	// Responses API input's items, System its instructions); the answer
	// comes back in that format.
	Format string          `json:"format,omitempty"`
	System json.RawMessage `json:"system,omitempty"`
	// Messages are the conversation's messages. The ones a policy keeps
	// come back byte for byte (except the cache_control a breakpoint adds).
	// Without them, ConversationID names a conversation the proxy
	// forwarded, and its last request is compacted.
	Messages []json.RawMessage `json:"messages,omitempty"`
}

// CompactResponse is the answer to POST /v1/compact. When a policy fails,
// Messages is the input unchanged and Warnings says why: messages are never
// lost.
type CompactResponse struct {
	Messages       []json.RawMessage `json:"messages"`
	Compacted      bool              `json:"compacted"`
	Summary        string            `json:"summary"`
	ConversationID string            `json:"conversation_id"`
	Warnings       []string          `json:"warnings"`
	// CacheBreakpoints lists the messages that carry a cache_control
	// breakpoint (indices into Messages), when the request asked for them.
	CacheBreakpoints []int `json:"cache_breakpoints,omitempty"`
	Stats            Stats `json:"stats"`
	// Format and System are set for an Anthropic-format request, and when
	// a proxied conversation's stored request was compacted (a request
	// with only ConversationID): Messages are in that format ("openai",
	// "anthropic" or "responses"), and System is Anthropic's top-level
	// system prompt or the Responses API's instructions.
	Format string          `json:"format,omitempty"`
	System json.RawMessage `json:"system,omitempty"`
}

// Stats sum up a compaction.
type Stats struct {
	TokensBefore   int           `json:"tokens_before"`
	TokensAfter    int           `json:"tokens_after"`
	MessagesBefore int           `json:"messages_before"`
	MessagesAfter  int           `json:"messages_after"`
	Encoding       string        `json:"encoding"`
	Duration       time.Duration `json:"duration_ns"`
	Stages         []Stage       `json:"stages"`
}

// Stage reports one policy's run in a compaction.
type Stage struct {
	Policy            string        `json:"policy"`
	Version           string        `json:"version,omitempty"`
	Path              string        `json:"path,omitempty"`
	Compacted         bool          `json:"compacted"`
	Skipped           string        `json:"skipped,omitempty"`
	Error             string        `json:"error,omitempty"`
	Summary           string        `json:"summary,omitempty"`
	EntriesSummarized int           `json:"entries_summarized,omitempty"`
	Dropped           []int         `json:"dropped,omitempty"`
	Rewritten         []int         `json:"rewritten,omitempty"`
	TokensBefore      int           `json:"tokens_before"`
	TokensAfter       int           `json:"tokens_after"`
	MessagesBefore    int           `json:"messages_before"`
	MessagesAfter     int           `json:"messages_after"`
	Duration          time.Duration `json:"duration_ns"`
}

// PolicyList is the answer to GET /v1/policies.
type PolicyList struct {
	Policies []Policy `json:"policies"`
}

// Policy describes one plugin file and the policy it serves (GET
// /v1/policies/{name}).
type Policy struct {
	// Name is the policy name (the file name when the file never loaded).
	Name string `json:"name"`
	// Serving reports whether a version of this file is serving Name.
	Serving     bool      `json:"serving"`
	Version     string    `json:"version,omitempty"`
	ABI         string    `json:"abi,omitempty"`
	Description string    `json:"description,omitempty"`
	File        string    `json:"file"`
	SHA256      string    `json:"sha256,omitempty"`
	LoadedAt    time.Time `json:"loaded_at,omitzero"`
	Path        string    `json:"path,omitempty"` // "fast" or "extism"
	// View is the view of the conversation the plugin reads: "full"
	// (every message's content) or "headers" (contents on demand).
	View string `json:"view,omitempty"`
	// Tier is how its code runs: "lazy" (described from a previous load,
	// compiled on first use), "interpreted" (a new version, until the
	// compiler is done) or "compiled".
	Tier string `json:"tier,omitempty"`
	// Instances are its pooled instances, waiting for calls, and the
	// linear memory they hold.
	Instances    *Instances      `json:"instances,omitempty"`
	ConfigSchema json.RawMessage `json:"config_schema,omitempty"`
	Defaults     json.RawMessage `json:"defaults,omitempty"`
	Exports      []string        `json:"exports,omitempty"`
	Limits       *Limits         `json:"limits,omitempty"`
	Calls        uint64          `json:"calls"`
	Failures     uint64          `json:"failures"`
	// Error is the file's last load failure; the version above (if any)
	// keeps serving.
	Error *LoadError `json:"error,omitempty"`
	// Quarantined reports that the daemon died while loading the file's
	// current bytes: they are not loaded again until the file changes, or
	// is removed and put back, or a retry (Client.RetryPolicy; Error says
	// when and why).
	Quarantined bool `json:"quarantined,omitempty"`
	// Loading reports that a load of the file is under way.
	Loading bool `json:"loading,omitempty"`
	// LogLinesDropped and LogLinesTruncated count the file's log lines
	// dropped over the rate limit and cut to the line-length limit.
	LogLinesDropped   uint64 `json:"log_lines_dropped"`
	LogLinesTruncated uint64 `json:"log_lines_truncated"`
}

// Instances describe a plugin's pool of instances.
type Instances struct {
	Idle            int    `json:"idle"`
	IdleMemoryBytes uint64 `json:"idle_memory_bytes"`
}

// Limits are a plugin's runtime limits.
type Limits struct {
	MaxMemoryBytes int64  `json:"max_memory_bytes"`
	CallTimeout    string `json:"call_timeout"`
	MaxOutputBytes int    `json:"max_output_bytes"`
	MaxInstances   int    `json:"max_instances"`
	// WorkBudget and StartWorkBudget are the steps (loop iterations and
	// calls) one call and one instantiation may take.
	WorkBudget      uint64 `json:"work_budget"`
	StartWorkBudget uint64 `json:"start_work_budget"`
}

// LoadError is a failed load of a plugin file.
type LoadError struct {
	Message string    `json:"message"`
	SHA256  string    `json:"sha256,omitempty"`
	At      time.Time `json:"at,omitzero"`
}

// Status is the answer to GET /v1/status.
type Status struct {
	Version       string          `json:"version"`
	ABI           string          `json:"abi"`
	StartedAt     time.Time       `json:"started_at"`
	UptimeSeconds float64         `json:"uptime_seconds"`
	Policies      PolicyCounts    `json:"policies"`
	Totals        Totals          `json:"totals"`
	Conversations []Conversation  `json:"conversations"`
	Store         StoreDescriptor `json:"store"`
	// Proxy is where the proxy forwards, and who moved it.
	Proxy ProxyStatus `json:"proxy"`
}

// ProxyStatus is where the proxy forwards each provider's requests, and
// the upstream changes made while the daemon ran (PUT /v1/config,
// SIGHUP): an agent's provider key goes wherever its upstream points.
type ProxyStatus struct {
	// Upstreams are the running upstreams ("" when not proxied).
	Upstreams ProxyUpstreams `json:"upstreams"`
	// AllowUpstreamChange is proxy.allow_upstream_change: false when a
	// running daemon refuses to change its upstreams.
	AllowUpstreamChange bool `json:"allow_upstream_change"`
	// UpstreamChanges are the changes since the daemon started, oldest
	// first (the last 16).
	UpstreamChanges []UpstreamChange `json:"upstream_changes"`
}

// ProxyUpstreams are the base URLs requests go to.
type ProxyUpstreams struct {
	OpenAI    string `json:"openai"`
	Anthropic string `json:"anthropic"`
}

// UpstreamChange is one change of a provider's upstream.
type UpstreamChange struct {
	Provider string    `json:"provider"` // "openai" or "anthropic"
	Old      string    `json:"old"`      // "" when it was not proxied
	New      string    `json:"new"`      // "" when it is no longer proxied
	At       time.Time `json:"at"`
	// By says how: "PUT /v1/config on the Unix socket", "PUT /v1/config
	// on the TCP listener from 127.0.0.1:PORT" or "SIGHUP".
	By string `json:"by"`
}

// PolicyCounts count the plugin files.
type PolicyCounts struct {
	Serving int `json:"serving"`
	Failed  int `json:"failed"` // files whose last load failed
}

// Totals sum the tracked conversations.
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
	// Shadow sums the conversations' shadow figures (see Conversation);
	// nil when no shadow policy ran.
	Shadow *Shadow `json:"shadow,omitempty"`
}

// StoreDescriptor says where state lives and how long it is kept.
type StoreDescriptor struct {
	Path             string `json:"path"`
	TTL              string `json:"ttl"`
	MaxConversations int    `json:"max_conversations"`
}

// Conversation is one tracked conversation's status.
type Conversation struct {
	ID string `json:"id"`
	// Title names the conversation for people: the X-Compactd-Title
	// header (or CompactRequest.Title), else the first line of its task.
	// Tags and User are the last sent X-Compactd-Tags and X-Compactd-User.
	Title    string   `json:"title,omitempty"`
	Tags     []string `json:"tags,omitempty"`
	User     string   `json:"user,omitempty"`
	Model    string   `json:"model,omitempty"`
	Pipeline []string `json:"pipeline"`
	// Route says what chose the last proxied request's pipeline and
	// threshold: the model pattern of the proxy.routes entry that matched,
	// "header" (X-Compactd-Policy) or "default"; "" when only /v1/compact
	// has seen the conversation.
	Route         string  `json:"route,omitempty"`
	Messages      int     `json:"messages"`
	Tokens        int     `json:"tokens"`
	MessagesAfter int     `json:"messages_after"`
	TokensAfter   int     `json:"tokens_after"`
	ContextWindow int     `json:"context_window,omitempty"`
	UsageRatio    float64 `json:"usage_ratio"`
	// PeakTokens is the most tokens the conversation reached (a request
	// before compaction, or a response's usage).
	PeakTokens  int   `json:"peak_tokens,omitempty"`
	Requests    int64 `json:"requests"`
	Compactions int64 `json:"compactions"`
	Failures    int64 `json:"failures"`
	TokensSaved int64 `json:"tokens_saved"`
	// Recoveries counts the proxy's compactions after the upstream
	// refused a request as too long (overflow recovery).
	Recoveries int64 `json:"recoveries,omitempty"`
	// PaidUSD sums what the proxied responses cost at the models.dev
	// catalog's prices, FullUSD what they would have cost had every token
	// compaction removed been sent too (as uncached input).
	// UnpricedRequests counts responses whose model has no price (left
	// out of both).
	PaidUSD          float64   `json:"paid_usd,omitempty"`
	FullUSD          float64   `json:"full_usd,omitempty"`
	UnpricedRequests int64     `json:"unpriced_requests,omitempty"`
	FirstSeen        time.Time `json:"first_seen"`
	LastSeen         time.Time `json:"last_seen"`
	LastCompacted    time.Time `json:"last_compacted,omitzero"`
	// LastCompaction is what the last compaction did, message by message.
	// Only GET /v1/status?conversation_id=ID (Client.Conversation) fills
	// it, and only once the conversation was compacted.
	LastCompaction *CompactionDetail `json:"last_compaction,omitempty"`
	// Provider is "openai", "anthropic" or "responses" for a conversation that came
	// through the proxy.
	Provider string `json:"provider,omitempty"`
	// NeedsCompaction is set when the provider's usage of the last
	// proxied response reached proxy.threshold: the next proxied request
	// is compacted.
	NeedsCompaction bool `json:"needs_compaction"`
	// LastUsage is the provider's usage of the last proxied response.
	LastUsage *Usage `json:"last_usage,omitempty"`
	// Replica names the daemon that served the last request, when the
	// daemons of a fleet share a store (state.url).
	Replica string `json:"replica,omitempty"`
	// Shadow compares the live pipeline with the shadow policies
	// (proxy.shadow) on this conversation's requests; nil when none ran.
	Shadow *Shadow `json:"shadow,omitempty"`
}

// Shadow compares the live pipeline with the shadow policies
// (proxy.shadow) over the same proxied requests, each measured as
// `compactd eval` measures a replayed request: its tokens as sent, its
// input side priced under each cost model's prompt cache (against the
// same way's previous request), and how many identifiers of its history
// and whether its task it still holds. The figures are the answering
// daemon's, kept in its memory: a fleet's daemons each measure the
// requests they proxy.
type Shadow struct {
	// CostModels are the models CostsUSD are priced under, in order.
	CostModels []ShadowCostModel `json:"cost_models"`
	// Live is what the live pipeline forwarded; Full what sending every
	// message would have sent.
	Live ShadowFigures `json:"live"`
	Full ShadowFigures `json:"full"`
	// Pipelines are the shadow pipelines', by name.
	Pipelines []ShadowPipeline `json:"pipelines"`
}

// ShadowCostModel is a model shadow figures are priced under: its name
// and its prompt cache ("automatic": the longest prefix shared with the
// previous request; "breakpoints": Anthropic's cache_control marks).
type ShadowCostModel struct {
	Model string `json:"model"`
	Cache string `json:"cache"`
}

// ShadowFigures sum one way of sending a conversation's requests.
type ShadowFigures struct {
	// Requests measured.
	Requests int `json:"requests"`
	// TokensSent sums the requests' tokens (the messages', without reply
	// priming, as compactd eval counts them).
	TokensSent int `json:"tokens_sent"`
	// CostsUSD prices the requests' input side under each of
	// Shadow.CostModels, in its order.
	CostsUSD []float64 `json:"costs_usd"`
	// Probes are identifiers (paths, names, ids, numbers) of the
	// requests' histories looked for; ProbesKept were still in what was
	// sent; TaskKept counts the requests that still held the task.
	Probes     int `json:"probes"`
	ProbesKept int `json:"probes_kept"`
	TaskKept   int `json:"task_kept"`
}

// ShadowPipeline is one shadow pipeline's figures.
type ShadowPipeline struct {
	// Pipeline is the shadow's policies, joined by ",".
	Pipeline string `json:"pipeline"`
	ShadowFigures
	// Compacted runs shortened the conversation; Failed ended in an
	// error (measured as sent uncompacted, as the proxy forwards a request
	// whose compaction fails); Dropped requests were not measured because
	// proxy.shadow_queue was full.
	Compacted int `json:"compacted"`
	Failed    int `json:"failed"`
	Dropped   int `json:"dropped"`
}

// CompactionDetail is what one compaction did, message by message, for
// people: Rows pair input messages with the output messages they became.
// Texts are previews and the record is bounded (Truncated says when its
// previews were shortened further to stay small).
type CompactionDetail struct {
	At             time.Time `json:"at"`
	Model          string    `json:"model,omitempty"`
	Pipeline       []string  `json:"pipeline"`
	Summary        string    `json:"summary,omitempty"`
	TokensBefore   int       `json:"tokens_before"`
	TokensAfter    int       `json:"tokens_after"`
	MessagesBefore int       `json:"messages_before"`
	MessagesAfter  int       `json:"messages_after"`
	// WireFormat is a proxied request's format; WireMessagesBefore and
	// WireMessagesAfter count its messages in that format (Conversation's
	// Messages counts the same way), where MessagesBefore and
	// MessagesAfter count the chat messages the policies saw.
	WireFormat         string          `json:"wire_format,omitempty"`
	WireMessagesBefore int             `json:"wire_messages_before,omitempty"`
	WireMessagesAfter  int             `json:"wire_messages_after,omitempty"`
	Stages             []Stage         `json:"stages"`
	Rows               []CompactionRow `json:"rows"`
	Truncated          bool            `json:"truncated,omitempty"`
}

// Kinds of CompactionRow.
const (
	RowKept       = "kept"       // one message, unchanged on both sides
	RowMasked     = "masked"     // messages whose content was replaced in place, pairwise
	RowSummarized = "summarized" // messages folded into the new messages beside them
	RowDropped    = "dropped"    // messages removed, nothing in their place
	RowAdded      = "added"      // new messages, nothing removed
	RowElided     = "elided"     // messages not listed, to keep the record small
)

// CompactionRow is one step of a CompactionDetail: the input messages
// (Before) and the output messages (After) they became.
type CompactionRow struct {
	Kind   string           `json:"kind"`
	Before []MessagePreview `json:"before,omitempty"`
	After  []MessagePreview `json:"after,omitempty"`
	// Elided counts the input messages an "elided" row stands for,
	// starting at input index First.
	Elided int  `json:"elided,omitempty"`
	First  *int `json:"first,omitempty"`
	// Omitted counts the messages of this row not listed in Before and
	// After (a long run folded into one summary).
	Omitted int `json:"omitted,omitempty"`
}

// MessagePreview describes one message of a CompactionRow.
type MessagePreview struct {
	// Index is the message's index in the input (Before) or the output
	// (After).
	Index      int      `json:"index"`
	Role       string   `json:"role"`
	Name       string   `json:"name,omitempty"`
	ToolCallID string   `json:"tool_call_id,omitempty"`
	ToolCalls  []string `json:"tool_calls,omitempty"` // the functions called
	Tokens     int      `json:"tokens"`
	// Text is the text content and the tool calls, cut to a preview (Cut
	// says it was); Bytes is the size of the content and the calls'
	// arguments as sent.
	Text  string `json:"text"`
	Cut   bool   `json:"cut,omitempty"`
	Bytes int    `json:"bytes"`
}

// Usage is a provider's usage report for one response.
type Usage struct {
	InputTokens      int       `json:"input_tokens"` // cached tokens included
	OutputTokens     int       `json:"output_tokens"`
	CacheReadTokens  int       `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int       `json:"cache_write_tokens,omitempty"`
	At               time.Time `json:"at"`
}

// ConfigDocument is the answer to GET and PUT /v1/config.
type ConfigDocument struct {
	// File is the config file's path.
	File string `json:"file"`
	// Config is the running config, defaults included (see docs/configuration.md).
	Config json.RawMessage `json:"config"`
	// RestartRequired names changed settings that apply only on restart.
	RestartRequired []string `json:"restart_required,omitempty"`
	// Warnings are non-fatal problems with the config.
	Warnings []string `json:"warnings,omitempty"`
	// Errors (GET only) are problems that would reject the running config
	// now, by the checks an update, a reload and a start make (a reloaded
	// plugin's schema may reject it), or the config file's last reload
	// failed (the running config is the one before).
	Errors []string `json:"errors,omitempty"`
}

// Health is the answer to GET /healthz.
type Health struct {
	// Status is "ok"; "starting" while the daemon tries its plugin files
	// for the first time (policies serve as they load); or "degraded"
	// when no policy serves, or a plugin file that fails to load (or is
	// quarantined) keeps a policy of the default pipeline from serving.
	// The answer is 200 in every case: the daemon is alive.
	Status   string `json:"status"`
	Policies int    `json:"policies"`
	// Loading counts the plugin files being loaded.
	Loading int `json:"loading,omitempty"`
	// Problems say what makes the daemon degraded, and how to clear it.
	Problems []string `json:"problems,omitempty"`
	// Store is the shared state store's reachability (only with
	// state.url); "degraded" while it cannot be reached (requests are
	// still served).
	Store *StoreHealth `json:"store,omitempty"`
}

// StoreHealth is the state store's part of Health.
type StoreHealth struct {
	// Backend is "bbolt" (the embedded state.db) or "redis" (state.url).
	Backend  string `json:"backend"`
	Degraded bool   `json:"degraded"`
	// Error is the last failure while degraded; Since when it began.
	Error string    `json:"error,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// DroppedWrites and FailedReads count what was given up because the
	// store was unreachable, since the daemon started.
	DroppedWrites uint64 `json:"dropped_writes"`
	FailedReads   uint64 `json:"failed_reads"`
}

// ErrorBody is the shape of every error response.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}
