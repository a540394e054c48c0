// Code generated from api/openapi.yaml by `go test ./api -run TestTypeScriptTypes -update`. DO NOT EDIT.

/**
 * an error compactd itself answers on the Anthropic routes, in Anthropic's error format
 */
export interface AnthropicError {
  error: {
    /**
     * what went wrong, starting with "compactd (CODE): ", CODE a ProxyErrorCode
     */
    message: string;
    type: "invalid_request_error" | "authentication_error" | "not_found_error" | "request_too_large" | "api_error";
  };
  type: "error";
}

/**
 * An Anthropic Messages request, forwarded byte for byte unless
 * compactd compacts its `messages`. compactd reads `model`, `system`,
 * `messages` and `stream`; every other field passes through.
 */
export interface AnthropicMessagesRequest {
  max_tokens?: number;
  messages?: Record<string, unknown>[];
  model?: string;
  stream?: boolean;
  system?: string | unknown[];
  [key: string]: unknown;
}

/**
 * `messages` (in `format`), or `conversation_id` alone: the proxy's
 * stored last request of that conversation is compacted.
 */
export interface CompactRequest {
  /**
   * true: the policies' prompt-cache breakpoints (up to 3 messages)
   * come back as Anthropic's `"cache_control": {"type": "ephemeral"}`,
   * added as the last member of the marked message's last content
   * block when its content is an array, else of the message. A
   * marked message is the kept bytes plus that one member. With
   * `format: anthropic` the marker goes on the content block where the
   * policy's message ends, within Anthropic's four markers per request
   * (those the system prompt and kept messages carry count first; the
   * latest breakpoints win). Off by default (OpenAI rejects the key).
   */
  cache_breakpoints?: boolean;
  /**
   * Config overrides for this request. With `policy`: that policy's
   * keys (`{"window_size": 4}`). With `pipeline`: one object per
   * policy name (`{"sliding": {...}, "llm": {...}}`).
   */
  config?: Record<string, unknown>;
  /**
   * overrides the model's context window
   */
  context_window?: number;
  /**
   * at most 256 bytes, no NUL; default a stable hash of the whole
   * content (role, name, every content part) of the leading system
   * messages and the first user message
   */
  conversation_id?: string;
  /**
   * true: compact now. Each policy is told the caller decided
   * (ABI 1.1 `context.compact` with reason `manual` and
   * `target_tokens` as its target), so its own thresholds (ledger's
   * `min_tokens`, llm's `token_threshold`, …) do not hold the
   * compaction back.
   */
  force?: boolean;
  /**
   * the conversation's format: `openai` (the default; chat messages),
   * `anthropic` (Messages API messages and `system`) or `responses`
   * (the OpenAI Responses API: `messages` are its `input` items,
   * `system` its `instructions`); the answer is in the same format
   */
  format?: "openai" | "anthropic" | "responses";
  messages?: (Message | ResponsesItem)[];
  /**
   * the agent's model (at most 256 bytes); picks the tokenizer and the context window
   */
  model?: string;
  /**
   * the policies to run, in order (not with `policy`)
   */
  pipeline?: string[];
  /**
   * the policy to run (not with `pipeline`); neither means the config's default (`ledger` when it names none)
   */
  policy?: string;
  /**
   * Anthropic's top-level system prompt, or the Responses API's
   * `instructions` (with `"format": "anthropic"` or `"responses"`
   * only); policies see it as the leading system message, and it is
   * always kept
   */
  system?: string | unknown[];
  /**
   * labels to find the conversation by (GET /v1/status?tag=)
   */
  tags?: string[];
  /**
   * a pipeline stops once the conversation is at most this many tokens
   */
  target_tokens?: number;
  /**
   * the conversation's title on the status page (printable text); default the first line of its task
   */
  title?: string;
  /**
   * who the conversation is for (GET /v1/status?user=)
   */
  user?: string;
}

export interface CompactResponse {
  /**
   * whether any stage changed the conversation
   */
  compacted: boolean;
  conversation_id: string;
  /**
   * the compacted conversation; kept messages byte for byte (but for the cache_control a breakpoint adds)
   */
  messages: (Message | ResponsesItem)[];
  stats: Stats;
  /**
   * what the stages did, "policy: summary; ..."
   */
  summary: string;
  /**
   * plugin failures (the input was kept) and other non-fatal problems
   */
  warnings: string[];
  /**
   * the messages that carry a cache_control breakpoint (indices into `messages`), when the request asked for them
   */
  cache_breakpoints?: number[];
  /**
   * the format of `messages`; set for an Anthropic- or Responses-format request and for the compaction of a proxied conversation's stored request
   */
  format?: "openai" | "anthropic" | "responses";
  /**
   * Anthropic's top-level system prompt or the Responses API's instructions, unchanged (formats `anthropic` and `responses`, when the conversation has one)
   */
  system?: string | unknown[];
}

/**
 * What a compaction did, message by message, for people (GET
 * /v1/status?conversation_id=ID and the status page). Rows pair the
 * input messages (`before`) with the output messages (`after`) they
 * became: `kept` (the same message on both sides), `masked` (its
 * content replaced in place), `summarized` (folded into the new
 * messages beside it), `dropped` (gone), `added` (a new message with
 * nothing removed), `elided` (messages not listed, to keep the record
 * small: long runs of kept messages, or the middle of a very long
 * conversation). Texts are previews; the record is bounded.
 */
export interface CompactionDetail {
  at: string;
  /**
   * chat messages the policies returned
   */
  messages_after: number;
  /**
   * chat messages the policies were given (an Anthropic request converted: each tool result a message of its own, the system prompt one)
   */
  messages_before: number;
  pipeline: string[];
  rows: CompactionRow[];
  stages: Stage[];
  tokens_after: number;
  tokens_before: number;
  model?: string;
  summary?: string;
  /**
   * previews were shortened further to bound the record
   */
  truncated?: boolean;
  /**
   * for a proxied compaction, the request's wire format; wire_messages_before and wire_messages_after count its messages in that format, as the conversation's `messages` does
   */
  wire_format?: "openai" | "anthropic" | "responses";
  wire_messages_after?: number;
  wire_messages_before?: number;
}

export interface CompactionRow {
  kind: "kept" | "masked" | "summarized" | "dropped" | "added" | "elided";
  after?: MessagePreview[];
  before?: MessagePreview[];
  /**
   * for `elided`, how many input messages the row stands for
   */
  elided?: number;
  /**
   * for `elided`, the first input index it stands for
   */
  first?: number;
  /**
   * messages of this row not listed in before and after (a long run folded into one summary)
   */
  omitted?: number;
}

/**
 * the running config, defaults filled in (docs/configuration.md, "The config file").
 * Every number has a range, given here as `minimum` and `maximum`
 * (durations: in their descriptions); in the file and in an update,
 * 0 or an absent key means the default.
 */
export interface Config {
  cache_dir: string;
  limits: {
    /**
     * 100ms to 24h
     */
    idle_timeout: string;
    max_body_bytes: number;
    max_messages: number;
    plugin: PluginLimits;
    /**
     * 100ms to 1h
     */
    read_timeout: string;
    /**
     * 100ms to 1h
     */
    request_timeout: string;
    /**
     * 100ms to 1h
     */
    shutdown_timeout: string;
    /**
     * 100ms to 1h0m30s
     */
    write_timeout: string;
    /**
     * memory of recent conversations kept, so a request that repeats one plus a turn is parsed and counted only for the turn
     */
    conversation_cache_bytes?: number;
    /**
     * the compile budget of one plugin module, in MiB: a module estimated to cost more to compile is refused before it compiles (default: half of max_total_memory_mb, at most 1024)
     */
    max_compile_memory_mb?: number;
    /**
     * the memory budget of every plugin together, in MiB: each instance holds its memory limit plus a 100 MiB stack reserve, each compile its estimated cost; a request that finds no room within 2s gets its input back with a warning (default: half of the machine's memory or cgroup limit)
     */
    max_total_memory_mb?: number;
    /**
     * 1s to 8760h; a plugin unused this long gives its compiled code and instances back
     */
    plugin_idle_unload?: string;
    plugins?: Record<string, PluginLimits>;
  };
  log_level: "trace" | "debug" | "info" | "warn" | "error" | "off";
  plugins_dir: string;
  /**
   * the OpenAI- and Anthropic-compatible proxy (docs/proxy.md)
   */
  proxy: {
    /**
     * whether PUT /v1/config and SIGHUP may change the upstreams of the running daemon (default true); while false they refuse such a change, and turning this back on, with 403 `forbidden` (SIGHUP: logged, running config kept); a start applies the file
     */
    allow_upstream_change: boolean;
    anthropic: ProxyUpstream;
    /**
     * the most the proxy holds of an upstream answer at a time: one stream event (past it the stream ends with an error event), or a non-streamed answer (a larger one passes through unread) (default 16 MiB)
     */
    max_event_bytes: number;
    /**
     * memory for the conversations' last requests, for manual compaction (default 64 MiB)
     */
    max_stored_bytes: number;
    openai: ProxyUpstream;
    /**
     * 1s to 24h; the longest silence of an upstream once its headers arrived, between two reads of its body; not a limit on the whole answer (default 5m)
     */
    read_timeout: string;
    /**
     * the usage ratio that triggers a compaction (default 0.8)
     */
    threshold: number;
    /**
     * 1s to 24h; the wait for an upstream's response headers, its request sent (default 10m)
     */
    timeout: string;
    /**
     * overrides the model's context window for proxied requests (absent: the model's)
     */
    context_window?: number;
    pipeline?: string[];
    /**
     * what a proxied compaction runs (else pipeline, else the config's default)
     */
    policy?: string;
    /**
     * a preparation not ready after prepare_wait: compact the request synchronously (compact, default) or forward it as it is and use the result next time (forward)
     */
    prepare_miss?: "compact" | "forward";
    /**
     * preparations waiting for a worker; past it one is dropped and counted (default 64)
     */
    prepare_queue?: number;
    /**
     * the usage ratio (below threshold) from which a conversation's compaction is prepared in the background and used at the trigger (absent: off; docs/proxy.md)
     */
    prepare_threshold?: number;
    /**
     * up to 10m; how long a request at the trigger waits for its preparation still running (default 0)
     */
    prepare_wait?: string;
    /**
     * preparations running at once (default 2; read at start)
     */
    prepare_workers?: number;
    /**
     * when an upstream refuses a proxied request as too long (context_length_exceeded, "prompt is too long", a 413), compact it with the proxy's pipeline, ignoring the trigger, and send it once more (default true)
     */
    recover_overflow?: boolean;
    /**
     * routes by the request's model: the first entry whose pattern matches runs its policy or pipeline at its ratios; none matches: policy or pipeline and the ratios here (docs/proxy.md, "Routes")
     */
    routes?: ProxyRoute[];
    /**
     * policies, or pipelines written "a,b", run beside the live one on every proxied request, off the request path; their results are counted, never forwarded (docs/proxy.md, "Shadow policies")
     */
    shadow?: string[];
    /**
     * shadow runs waiting for a worker; past it one is dropped and counted (default 64; read at start)
     */
    shadow_queue?: number;
    /**
     * shadow runs at once (default 1; read at start)
     */
    shadow_workers?: number;
    /**
     * the share of the window a compaction the proxy decides on aims at: the target_tokens handed to the policy (default 0.5; at most threshold)
     */
    target?: number;
    /**
     * also trigger at this many tokens, whatever the window (absent: off)
     */
    trigger_tokens?: number;
  };
  /**
   * a Unix socket path, at most 107 bytes
   */
  socket: string;
  state: {
    max_conversations: number;
    max_state_bytes: number;
    /**
     * 1m to 87600h
     */
    ttl: string;
    /**
     * 10ms to 1m (default 1s); how often status counters and the request log are written behind to the store: the most a crash loses. Read at start
     */
    flush_interval?: string;
    /**
     * the Redis password's file (its first line); wins over a password in url
     */
    password_file?: string;
    /**
     * 10ms to 1m; one call to the shared store (state.url)
     */
    timeout?: string;
    /**
     * false: conversations get no title derived from the first line of their task (a title sent with X-Compactd-Title or "title" is still kept); default true
     */
    titles?: boolean;
    /**
     * a Redis or Valkey server the replicas of a fleet share (redis://host:port/db, rediss://, unix:///path?db=N, or several comma-separated redis:// addresses for a Cluster); GET shows its password as "xxxxx", and a PUT that sends that value back keeps the running password (another URL with the redacted password is refused). Empty: the embedded bbolt store
     */
    url?: string;
  };
  state_dir: string;
  tcp: {
    listen?: string;
    token_file?: string;
  };
  /**
   * the llm policy's settings (its schema narrows the numbers)
   */
  compact?: {
    max_tokens?: number;
    message_threshold?: number;
    model?: string;
    prompt?: string;
    retention_window?: number;
    summary_tag?: string;
    token_threshold?: number;
    turn_threshold?: number;
  };
  /**
   * the LLM provider block (docs/configuration.md, "The LLM provider")
   */
  llm?: Record<string, unknown> | null;
  /**
   * the request log (GET /v1/requests) and its JSON-lines access file
   */
  log?: {
    /**
     * a file that gets every record as a JSON line (empty: none); read when the daemon starts
     */
    access_file?: string;
    /**
     * rotated files kept (default 3)
     */
    access_keep?: number;
    /**
     * the access file is rotated (renamed to FILE.1, FILE.1 to FILE.2, ...) when a record would take it past this size (default 100 MiB)
     */
    access_max_bytes?: number;
    /**
     * records held in memory (default 10000)
     */
    requests?: number;
    /**
     * one conversation's records, in memory and in the state store (default 500)
     */
    requests_per_conversation?: number;
  };
  pipeline?: string[];
  /**
   * each policy's config, checked against its plugin's `config_schema` (integers within 64 bits)
   */
  policies?: Record<string, unknown>;
  policy?: string;
}

export interface ConfigDocument {
  config: Config;
  /**
   * the config file's path (it may not exist yet)
   */
  file: string;
  /**
   * (GET) problems that would reject the running config now, found
   * by the same checks `PUT /v1/config`, SIGHUP and a start make: it
   * no longer passes the plugins loaded now (their schemas, or the
   * memory they declare), or the config file was changed and its
   * last reload (SIGHUP) failed, naming the key, its range and its
   * line
   */
  errors?: string[];
  /**
   * (PUT) changed settings that apply only on restart
   */
  restart_required?: string[];
  /**
   * non-fatal problems, e.g. config for a policy that is not loaded
   */
  warnings?: string[];
}

/**
 * A content part of OpenAI's chat message format (a `Message`'s
 * `content` array in OpenAI format). Other fields (such as
 * `cache_control`) are kept with the message.
 */
export type ContentPart = TextPart | ImageURLPart | InputAudioPart | FilePart | RefusalPart;

/**
 * one tracked conversation's status (its last request, and counters over all of them)
 */
export interface Conversation {
  /**
   * requests that changed the conversation
   */
  compactions: number;
  /**
   * requests where a stage failed (the input was kept)
   */
  failures: number;
  first_seen: string;
  id: string;
  last_seen: string;
  /**
   * messages in the last request, as its client sent them: for a proxied conversation, in its `provider`'s format (Anthropic messages, Responses items); for /v1/compact, chat messages (after converting `format`)
   */
  messages: number;
  /**
   * messages the last request returned
   */
  messages_after: number;
  /**
   * the provider's usage of the last proxied response reached `proxy.threshold` (or a manual compaction asked for it); the next proxied request is compacted
   */
  needs_compaction: boolean;
  pipeline: string[] | null;
  requests: number;
  /**
   * tokens in the last request
   */
  tokens: number;
  /**
   * tokens the last request returned
   */
  tokens_after: number;
  /**
   * tokens removed, over all requests
   */
  tokens_saved: number;
  /**
   * tokens / context_window (0 when the window is unknown); for a proxied conversation, from the provider's last usage: (input + output tokens) / context_window
   */
  usage_ratio: number;
  context_window?: number;
  /**
   * dollars they would have cost had every token compaction removed been sent too, as uncached input (absent: none priced)
   */
  full_usd?: number;
  last_compacted?: string;
  last_compaction?: CompactionDetail;
  last_usage?: Usage;
  model?: string;
  /**
   * dollars the proxied responses cost at the models.dev catalog's prices (absent: none priced)
   */
  paid_usd?: number;
  /**
   * the most tokens the conversation reached: in a request before compaction, or in a response's usage (input + output)
   */
  peak_tokens?: number;
  /**
   * the wire format of a conversation that came through the proxy (`responses`: the OpenAI Responses API)
   */
  provider?: "openai" | "anthropic" | "responses";
  /**
   * the proxy's compactions after the upstream refused a request as too long (overflow recovery, each retried once; absent: none)
   */
  recoveries?: number;
  /**
   * the daemon that served the last request, when the replicas of a fleet share a store (state.url)
   */
  replica?: string;
  /**
   * what chose the last proxied request's pipeline and threshold: the `model` pattern of the proxy.routes entry that matched, `header` (its X-Compactd-Policy), or `default` (proxy.policy or proxy.pipeline, else the config's default); absent for a conversation only /v1/compact has seen
   */
  route?: string;
  shadow?: Shadow;
  /**
   * X-Compactd-Tags (comma-separated) or /v1/compact's `tags`, as last sent
   */
  tags?: string[];
  /**
   * X-Compactd-Title (or /v1/compact's `title`), else the first line of the conversation's task (its first user message), cut to about 80 characters; no other prompt text is kept (state.titles: false turns the derived title off)
   */
  title?: string;
  /**
   * responses with usage whose model the catalog does not price, left out of paid_usd and full_usd (absent: none)
   */
  unpriced_requests?: number;
  /**
   * X-Compactd-User or /v1/compact's `user`, as last sent
   */
  user?: string;
}

/**
 * every error answer
 */
export interface ErrorBody {
  error: {
    code: ErrorCode;
    /**
     * what went wrong, for people
     */
    message: string;
  };
}

export type ErrorBadRequest = ErrorBody;

/**
 * The stable `code` of an error answer, with its HTTP status:
 *
 * | code | status | meaning |
 * | --- | --- | --- |
 * | `invalid_json` | 400 | the body is not the JSON the endpoint takes (or not UTF-8) |
 * | `bad_request` | 400 | the request is not what the endpoint takes |
 * | `invalid_conversation` | 400 | the messages are malformed or structurally invalid |
 * | `unsupported_format` | 400 | the messages are in another provider's format (Anthropic Messages content blocks: `tool_use`, `tool_result`, …); compactd takes OpenAI chat messages |
 * | `invalid_config` | 400 | a policy config or config update is invalid |
 * | `no_policy` | 400 | no policy named and no default configured |
 * | `unauthorized` | 401 | the TCP listener without the bearer token |
 * | `forbidden` | 403 | a config update the running config forbids (`proxy.allow_upstream_change: false`) |
 * | `unknown_policy` | 404 | no plugin serves that policy |
 * | `not_found` | 404 | no such endpoint or conversation |
 * | `method_not_allowed` | 405 | the endpoint does not take the method |
 * | `request_too_large` | 413 | the body is over `limits.max_body_bytes` |
 * | `too_many_messages` | 413 | the conversation is over `limits.max_messages` |
 * | `internal` | 500 | a bug in compactd |
 */
export type ErrorCode = "invalid_json" | "bad_request" | "invalid_conversation" | "unsupported_format" | "invalid_config" | "no_policy" | "unauthorized" | "forbidden" | "unknown_policy" | "not_found" | "method_not_allowed" | "request_too_large" | "too_many_messages" | "internal";

/** The HTTP status of each ErrorCode. */
export const ERROR_CODE_STATUS: Readonly<Record<ErrorCode, number>> = {
  invalid_json: 400,
  bad_request: 400,
  invalid_conversation: 400,
  unsupported_format: 400,
  invalid_config: 400,
  no_policy: 400,
  unauthorized: 401,
  forbidden: 403,
  unknown_policy: 404,
  not_found: 404,
  method_not_allowed: 405,
  request_too_large: 413,
  too_many_messages: 413,
  internal: 500,
};

export type ErrorNotFound = ErrorBody;

export type ErrorUnknownPolicy = ErrorBody;

/**
 * user messages only; `file` has `file_id` or `file_data`
 */
export interface FilePart {
  file: {
    file_data?: string;
    file_id?: string;
    filename?: string;
    [key: string]: unknown;
  };
  type: "file";
  [key: string]: unknown;
}

/**
 * On the Unix socket, and on the TCP listener with the token, every
 * field; on the TCP listener without a token, `status` alone (for
 * uptime checks: nothing else about the daemon is told).
 */
export interface Health {
  /**
   * "starting" while the plugin files are tried for the first time (policies serve as they load); "degraded" while no policy is loaded, or a policy of the default pipeline cannot load, or the shared state store (state.url) cannot be reached (see problems and store): the daemon is up (still 200)
   */
  status: "ok" | "starting" | "degraded";
  /**
   * plugin files being loaded; absent when none
   */
  loading?: number;
  /**
   * policies serving
   */
  policies?: number;
  /**
   * what makes the daemon degraded, and how to clear it (e.g. `compactd plugins retry ledger`)
   */
  problems?: string[];
  /**
   * the shared state store's reachability (present only with state.url); a shared store that cannot be reached makes the status "degraded" (requests are still served, from themselves alone)
   */
  store?: {
    backend: "bbolt" | "redis";
    degraded: boolean;
    /**
     * writes given up because the store was unreachable
     */
    dropped_writes: number;
    /**
     * reads given up because the store was unreachable
     */
    failed_reads: number;
    /**
     * the last failure while degraded
     */
    error?: string;
    /**
     * when the store became unreachable
     */
    since?: string;
  };
}

/**
 * user messages only
 */
export interface ImageURLPart {
  image_url: {
    url: string;
    detail?: string;
    [key: string]: unknown;
  };
  type: "image_url";
  [key: string]: unknown;
}

/**
 * user messages only
 */
export interface InputAudioPart {
  input_audio: {
    /**
     * base64-encoded audio
     */
    data: string;
    format: string;
    [key: string]: unknown;
  };
  type: "input_audio";
  [key: string]: unknown;
}

/**
 * a plugin's runtime limits
 */
export interface Limits {
  /**
   * a Go duration, e.g. 10s: the wall-clock limit of a call
   */
  call_timeout: string;
  max_instances: number;
  max_memory_bytes: number;
  max_output_bytes: number;
  /**
   * the steps the start section, and then _initialize, may each take
   */
  start_work_budget: number;
  /**
   * the steps (loop iterations and calls) one call may take
   */
  work_budget: number;
}

/**
 * the file's last failed load; the version above (if any) keeps serving
 */
export interface LoadError {
  message: string;
  at?: string;
  /**
   * the bad bytes' hash (the same bytes are not tried again)
   */
  sha256?: string;
}

/**
 * An OpenAI chat message. compactd reads `role`, `content`, `name`,
 * `tool_calls` and `tool_call_id`; other fields are kept, and a
 * message a policy keeps comes back byte for byte. With
 * `"format": "anthropic"`, an Anthropic message instead: `role`
 * `user` or `assistant`, `content` a string or content blocks
 * (`text`, `tool_use`, `tool_result`, ...).
 */
export interface Message {
  role: "system" | "developer" | "user" | "assistant" | "tool";
  /**
   * text, an array of content parts, or null (an assistant message
   * with tool calls). In OpenAI format the parts are `ContentPart`s:
   * `text` (every role), `image_url`, `input_audio` and `file`
   * (user), `refusal` (assistant); in Anthropic format, content
   * blocks.
   */
  content?: string | unknown[] | null;
  name?: string;
  tool_call_id?: string;
  tool_calls?: {
    function: {
      name: string;
      arguments?: string;
      [key: string]: unknown;
    };
    id: string;
    type?: string;
    [key: string]: unknown;
  }[];
  [key: string]: unknown;
}

export interface MessagePreview {
  /**
   * the size of the content (its JSON) and the calls' arguments, as sent
   */
  bytes: number;
  /**
   * the message's index in the input (before) or the output (after)
   */
  index: number;
  role: string;
  /**
   * the text content and the tool calls, cut to a preview
   */
  text: string;
  tokens: number;
  /**
   * the text was cut
   */
  cut?: boolean;
  name?: string;
  tool_call_id?: string;
  /**
   * the names of the functions called
   */
  tool_calls?: string[];
}

/**
 * what the listed requests cost at the models.dev catalog's prices, and what sending everything (nothing compacted away, as uncached input) would have cost
 */
export interface Money {
  full_usd: number;
  paid_usd: number;
  /**
   * requests with usage and a catalog price
   */
  priced: number;
  /**
   * requests with usage whose model the catalog does not price
   */
  unpriced: number;
  unpriced_models?: string[];
}

/**
 * An OpenAI Chat Completions request, forwarded byte for byte unless
 * compactd compacts its `messages` or adds `stream_options`. compactd
 * reads `model` (tokenizer and context window), `messages`, `stream`
 * and `stream_options`; every other field passes through. A request
 * compactd cannot read is forwarded as it is, for the provider to
 * judge.
 */
export interface OpenAIChatRequest {
  messages?: Record<string, unknown>[];
  model?: string;
  stream?: boolean;
  stream_options?: Record<string, unknown>;
  [key: string]: unknown;
}

/**
 * an error compactd itself answers on the OpenAI routes, in OpenAI's error format (SDKs raise their usual exceptions)
 */
export interface OpenAIError {
  error: {
    code: ProxyErrorCode;
    /**
     * what went wrong, starting with "compactd: "
     */
    message: string;
    param: null;
    type: "compactd_error";
  };
}

/**
 * An OpenAI Responses request, forwarded byte for byte unless compactd
 * compacts its `input`. compactd reads `model`, `instructions`,
 * `input` (a string or an array of items), `stream` and
 * `previous_response_id`; every other field (`store`,
 * `prompt_cache_key`, `tools`, `include`, …) passes through.
 */
export interface OpenAIResponsesRequest {
  input?: string | unknown[];
  instructions?: string | null;
  model?: string;
  previous_response_id?: string | null;
  stream?: boolean;
  [key: string]: unknown;
}

export interface PluginLimits {
  /**
   * 10ms to 1h
   */
  call_timeout?: string;
  max_instances?: number;
  /**
   * and at least the initial memory each loaded plugin declares
   */
  max_memory_mb?: number;
  max_output_bytes?: number;
  start_work_budget?: number;
  work_budget?: number;
}

/**
 * one plugin file and the policy it serves
 */
export interface Policy {
  calls: number;
  failures: number;
  file: string;
  /**
   * the file's log lines dropped over the rate limit (100 a second, bursts of 1000), over every version of the file
   */
  log_lines_dropped: number;
  /**
   * the file's log lines cut to the line-length limit (4 KiB)
   */
  log_lines_truncated: number;
  /**
   * the policy name (the file name when the file never loaded)
   */
  name: string;
  /**
   * whether a version of this file serves the policy
   */
  serving: boolean;
  abi?: string;
  /**
   * the policy's config as a JSON Schema
   */
  config_schema?: Record<string, unknown>;
  defaults?: Record<string, unknown>;
  description?: string;
  error?: LoadError;
  exports?: string[];
  /**
   * the pooled instances waiting for calls
   */
  instances?: {
    idle: number;
    /**
     * the linear memory they hold
     */
    idle_memory_bytes: number;
  };
  limits?: Limits;
  loaded_at?: string;
  /**
   * a load of the file is under way; absent when false
   */
  loading?: boolean;
  path?: "fast" | "extism";
  /**
   * the daemon died while loading the file's current bytes (or
   * twice while compiling them): they are not loaded again until the
   * file changes, or is removed and put back, or
   * `POST /v1/policies/{name}/retry` (`error` says when and why);
   * absent when false
   */
  quarantined?: boolean;
  sha256?: string;
  /**
   * how its code runs: compiled on first use (a restart, or after limits.plugin_idle_unload), interpreted (a new version, until the compiler is done), compiled
   */
  tier?: "lazy" | "interpreted" | "compiled";
  version?: string;
  /**
   * the view of the conversation the plugin reads (ABI 1.1): every content, or contents on demand
   */
  view?: "full" | "headers";
}

export interface PolicyList {
  policies: Policy[];
}

/**
 * The codes of the errors compactd itself answers on the proxy's
 * routes, in the provider's error format (`OpenAIError`: `code`;
 * `AnthropicError`: `error.message` starts with `compactd (CODE):`):
 *
 * | code | status | meaning |
 * | --- | --- | --- |
 * | `bad_request` | 400 | `X-Compactd-Conversation` (or `-Title`, `-Tags`, `-User`, `-Policy`) is malformed, or the body could not be read |
 * | `unknown_policy` | 400 | `X-Compactd-Policy` names a policy no plugin serves |
 * | `unauthorized` | 401 | the TCP listener without `X-Compactd-Token` |
 * | `proxy_off` | 404 | no upstream is configured for this provider |
 * | `not_found` | 404 | a forwarded path whose upstream was removed as the request arrived |
 * | `upstream_unreachable` | 502 | the upstream could not be reached |
 * | `bad_upstream` | 502 | the upstream URL is unusable |
 * | `upstream_timeout` | 504 | the upstream did not send its headers within `proxy.timeout`, or went silent after them for `proxy.read_timeout` (a stream: its error event) |
 * | `upstream_event_too_large` | — | a stream's error event: a line or an event of the upstream's ran past `proxy.max_event_bytes` |
 */
export type ProxyErrorCode = "bad_request" | "unknown_policy" | "unauthorized" | "proxy_off" | "not_found" | "upstream_unreachable" | "bad_upstream" | "upstream_timeout" | "upstream_event_too_large";

/**
 * one entry of proxy.routes: what a proxied request whose model matches runs (exactly one of policy and pipeline)
 */
export interface ProxyRoute {
  /**
   * a pattern the whole model name is matched against, as Go's path.Match matches: * any run of characters but /, ? one character, [a-z] a class, \ quotes ("claude-*", "gpt-4o*")
   */
  model: string;
  pipeline?: string[];
  policy?: string;
  /**
   * replaces proxy.prepare_threshold for the route (absent: the proxy's; below the route's threshold)
   */
  prepare_threshold?: number;
  /**
   * replaces proxy.target for the route (absent: the proxy's; at most the route's threshold)
   */
  target?: number;
  /**
   * replaces proxy.threshold for the route (absent: the proxy's)
   */
  threshold?: number;
}

/**
 * where the proxy forwards each provider's requests (and the provider keys they carry), and who moved it
 */
export interface ProxyStatus {
  /**
   * `proxy.allow_upstream_change`: false when the running daemon refuses to change its upstreams
   */
  allow_upstream_change: boolean;
  /**
   * the upstream changes since the daemon started (PUT /v1/config, SIGHUP), oldest first, the last 16
   */
  upstream_changes: UpstreamChange[];
  /**
   * the running upstreams' base URLs ("" when that provider is not proxied)
   */
  upstreams: {
    anthropic: string;
    openai: string;
  };
}

/**
 * one provider's upstream (without `upstream`, that provider is not proxied)
 */
export interface ProxyUpstream {
  /**
   * (OpenAI) add stream_options.include_usage to streams that lack it (default true)
   */
  stream_usage?: boolean;
  /**
   * the base URL, as the provider's SDK takes it
   */
  upstream?: string;
}

/**
 * assistant messages only
 */
export interface RefusalPart {
  refusal: string;
  type: "refusal";
  [key: string]: unknown;
}

export interface RequestRecord {
  /**
   * compactd's own time: reading, counting, compacting
   */
  compactd_ms: number;
  compacted: boolean;
  /**
   * unique in a fleet: the daemon's instance and a sequence
   */
  id: string;
  /**
   * a proxied provider request, or POST /v1/compact
   */
  kind: "proxy" | "compact";
  /**
   * when the request arrived
   */
  time: string;
  context_window?: number;
  conversation_id?: string;
  /**
   * the usage at the catalog's price (absent for an unpriced model)
   */
  cost_usd?: number;
  /**
   * from sending the request upstream to its answer's headers
   */
  first_byte_ms?: number;
  /**
   * wire format: openai, anthropic or responses
   */
  format?: string;
  /**
   * the same with the tokens compaction removed sent as uncached input
   */
  full_cost_usd?: number;
  model?: string;
  /**
   * why the request went on as it came: below_threshold, no_policy, policy_kept, failed, error (compactd answered with an error), or a pass-through reason (path, unreadable, unsupported, previous_response_id, too_large)
   */
  not_compacted?: string;
  /**
   * the policies a compaction ran
   */
  pipeline?: string[];
  /**
   * why a compaction ran
   */
  reason?: string;
  /**
   * what chose a proxied request's pipeline and threshold: the `model` pattern of the proxy.routes entry that matched, `header` (X-Compactd-Policy) or `default`
   */
  route?: string;
  /**
   * the answer's HTTP status: the upstream's when upstream is true, else compactd's own
   */
  status?: number;
  /**
   * the tokens sent on (compactd's count)
   */
  tokens_after?: number;
  tokens_before?: number;
  upstream?: boolean;
  /**
   * from sending the request upstream to the end of its answer
   */
  upstream_ms?: number;
  /**
   * the upstream's usage, when its answer reported one
   */
  usage?: {
    /**
     * cached ones included
     */
    input_tokens: number;
    output_tokens: number;
    /**
     * input written to the prompt cache (Anthropic's cache_creation_input_tokens), priced at the catalog's cache-write price
     */
    cache_write_tokens?: number;
    cached_tokens?: number;
  };
  warnings?: string[];
}

export interface RequestsPage {
  money: Money;
  requests: RequestRecord[];
  /**
   * set when older records remain: pass it as cursor
   */
  next_cursor?: string;
  /**
   * the state store could not be read: this daemon's records only
   */
  warning?: string;
}

/**
 * An OpenAI Responses API input item (`"format": "responses"`):
 * a message (`role`, `content` a string or `input_text`,
 * `output_text`, `input_image`, … parts), `function_call` and
 * `function_call_output` (paired by `call_id`), `custom_tool_call`
 * and `custom_tool_call_output`, `reasoning` (kept with the call it
 * precedes, `encrypted_content` included), `compaction` (a
 * provider's summary, always kept) or a provider tool's item
 * (`web_search_call`, …), or an `item_reference` (opaque, kept
 * with the outputs of the calls it holds). Other item types
 * (`computer_call`, …) are refused with `unsupported_format`. Kept items come back byte
 * for byte.
 */
export interface ResponsesItem {
  call_id?: string;
  role?: "system" | "developer" | "user" | "assistant";
  type?: string;
  [key: string]: unknown;
}

/**
 * The live pipeline and the shadow policies (`proxy.shadow`) compared
 * over the same proxied requests (absent: no shadow ran), each request
 * measured as `compactd eval` measures a replayed one: its tokens as
 * sent, its input side priced under each cost model's prompt cache
 * (against the same way's previous request of the conversation), the
 * identifiers of its history and its task still held. Figures are
 * the answering daemon's, kept in its memory: in a fleet each daemon
 * measures the requests it proxied.
 */
export interface Shadow {
  /**
   * the models `costs_usd` are priced under, in order (the eval's default pricing table's comparison models)
   */
  cost_models: ({
    /**
     * `automatic`: the longest prefix shared with the previous request is cached (OpenAI); `breakpoints`: cache_control marks (Anthropic)
     */
    cache: "automatic" | "breakpoints";
    model: string;
  })[];
  full: ShadowFigures;
  live: ShadowFigures;
  pipelines: ShadowPipeline[];
}

/**
 * one way of sending a conversation's requests, summed (`live`, what the live pipeline forwarded; `full`, every message; or a shadow pipeline's)
 */
export interface ShadowFigures {
  /**
   * the input side in dollars under each of `cost_models`, in its order
   */
  costs_usd: number[];
  /**
   * identifiers (paths, names, ids, numbers) of the requests' histories looked for
   */
  probes: number;
  /**
   * of those, still in what was sent
   */
  probes_kept: number;
  /**
   * requests measured
   */
  requests: number;
  /**
   * requests that still held the task
   */
  task_kept: number;
  /**
   * tokens as `compactd eval` counts them (the messages', without reply priming)
   */
  tokens_sent: number;
}

/**
 * one shadow pipeline's figures (see ShadowFigures), with its runs' outcomes
 */
export interface ShadowPipeline {
  /**
   * runs that shortened the conversation
   */
  compacted: number;
  /**
   * the input side in dollars under each of `cost_models`, in its order
   */
  costs_usd: number[];
  /**
   * requests not measured because proxy.shadow_queue was full
   */
  dropped: number;
  /**
   * runs that ended in an error (measured as sent uncompacted, as the proxy forwards a request whose compaction fails)
   */
  failed: number;
  /**
   * the shadow's policies, joined by ","
   */
  pipeline: string;
  /**
   * identifiers (paths, names, ids, numbers) of the requests' histories looked for
   */
  probes: number;
  /**
   * of those, still in what was sent
   */
  probes_kept: number;
  /**
   * requests measured
   */
  requests: number;
  /**
   * requests that still held the task
   */
  task_kept: number;
  /**
   * tokens as `compactd eval` counts them (the messages', without reply priming)
   */
  tokens_sent: number;
}

/**
 * one policy's run in a compaction
 */
export interface Stage {
  compacted: boolean;
  duration_ns: number;
  messages_after: number;
  messages_before: number;
  policy: string;
  tokens_after: number;
  tokens_before: number;
  /**
   * the stage's input indices it did not keep
   */
  dropped?: number[];
  entries_summarized?: number;
  /**
   * the plugin's failure (its input was kept)
   */
  error?: string;
  path?: "fast" | "extism";
  /**
   * the stage's input indices the plugin replaced by a new message
   */
  rewritten?: number[];
  /**
   * why the stage did not run
   */
  skipped?: string;
  summary?: string;
  version?: string;
}

export interface Stats {
  duration_ns: number;
  /**
   * the tokenizer, e.g. o200k_base
   */
  encoding: string;
  messages_after: number;
  messages_before: number;
  stages: Stage[];
  tokens_after: number;
  tokens_before: number;
}

export interface Status {
  abi: string;
  conversations: Conversation[];
  policies: {
    /**
     * files whose last load failed
     */
    failed: number;
    serving: number;
  };
  proxy: ProxyStatus;
  started_at: string;
  store: {
    max_conversations: number;
    path: string;
    ttl: string;
  };
  totals: {
    compactions: number;
    conversations: number;
    failures: number;
    /**
     * dollars they would have cost had every token compaction removed been sent too (as uncached input)
     */
    full_usd: number;
    /**
     * dollars the proxied responses of the tracked conversations cost at the models.dev catalog's prices
     */
    paid_usd: number;
    requests: number;
    tokens_saved: number;
    /**
     * responses with usage whose model the catalog does not price (left out of both sums)
     */
    unpriced_requests: number;
    shadow?: Shadow;
  };
  uptime_seconds: number;
  version: string;
}

export interface TextPart {
  text: string;
  type: "text";
  [key: string]: unknown;
}

export interface UpstreamChange {
  at: string;
  /**
   * how: "PUT /v1/config on the Unix socket", "PUT /v1/config on the TCP listener from ADDRESS", or "SIGHUP (the config file reloaded)"
   */
  by: string;
  /**
   * the new base URL ("" when it is no longer proxied)
   */
  new: string;
  /**
   * the old base URL ("" when it was not proxied)
   */
  old: string;
  provider: "openai" | "anthropic";
}

/**
 * the provider's usage report of a conversation's last proxied response
 */
export interface Usage {
  at: string;
  /**
   * prompt tokens, cached ones included
   */
  input_tokens: number;
  output_tokens: number;
  /**
   * prompt tokens read from the provider's cache
   */
  cache_read_tokens?: number;
  /**
   * prompt tokens written to the provider's cache (Anthropic)
   */
  cache_write_tokens?: number;
}
