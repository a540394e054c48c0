"""The API's answers as typed dataclasses (schemas of api/openapi.yaml).

Fields the daemon adds in later versions are ignored, so an older client
keeps working against a newer daemon.
"""

import dataclasses
import datetime as _dt
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar, Union, get_type_hints

Message = Dict[str, Any]
"""An OpenAI chat message: {"role": ..., "content": ..., ...} (with
``format="anthropic"``, an Anthropic message: role user or assistant,
content a string or content blocks)."""


@dataclass
class Stage:
    """One policy's run in a compaction."""

    policy: str
    compacted: bool
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    duration_ns: int
    version: str = ""
    path: str = ""
    skipped: str = ""
    error: str = ""
    summary: str = ""
    entries_summarized: int = 0
    dropped: List[int] = field(default_factory=list)
    rewritten: List[int] = field(default_factory=list)


@dataclass
class Stats:
    """The sums of a compaction."""

    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    encoding: str
    duration_ns: int
    stages: List[Stage]


@dataclass
class CompactResponse:
    """The answer to POST /v1/compact. When a policy fails, ``messages`` is
    the input unchanged and ``warnings`` says why."""

    messages: List[Message]
    compacted: bool
    summary: str
    conversation_id: str
    warnings: List[str]
    stats: Stats
    #: the messages carrying a cache_control breakpoint (indices into
    #: ``messages``) when the request asked for them
    cache_breakpoints: Optional[List[int]] = None
    format: str = ""
    """The format of ``messages``, "openai", "anthropic" or "responses"; set
    for an Anthropic- or Responses-format request and for a proxied
    conversation's compaction."""
    system: Optional[Union[str, List[Any]]] = None
    """Anthropic's top-level system prompt or the Responses API's
    instructions, unchanged (formats "anthropic" and "responses")."""


@dataclass
class Limits:
    """A plugin's runtime limits."""

    max_memory_bytes: int
    call_timeout: str
    max_output_bytes: int
    max_instances: int
    work_budget: int
    """The steps (loop iterations and calls) one call may take."""
    start_work_budget: int
    """The steps the start section, and then _initialize, may each take."""


@dataclass
class LoadError:
    """A plugin file's last failed load (the previous version keeps serving)."""

    message: str
    sha256: str = ""
    at: Optional[_dt.datetime] = None


@dataclass
class PolicyInstances:
    """A policy's pooled instances waiting for calls, and the linear memory
    they hold."""

    idle: int
    idle_memory_bytes: int


@dataclass
class Policy:
    """One plugin file and the policy it serves. ``view`` is the view of the
    conversation it reads ("full" or "headers"), ``tier`` how its code runs
    ("lazy", "interpreted" or "compiled")."""

    name: str
    serving: bool
    file: str
    calls: int
    failures: int
    #: log lines dropped over the rate limit / cut to the length limit
    log_lines_dropped: int
    log_lines_truncated: int
    version: str = ""
    abi: str = ""
    description: str = ""
    sha256: str = ""
    loaded_at: Optional[_dt.datetime] = None
    path: str = ""
    config_schema: Optional[Dict[str, Any]] = None
    defaults: Optional[Dict[str, Any]] = None
    exports: List[str] = field(default_factory=list)
    limits: Optional[Limits] = None
    error: Optional[LoadError] = None
    view: str = ""
    tier: str = ""
    instances: Optional[PolicyInstances] = None
    #: the daemon died while loading these bytes (or twice compiling
    #: them); not loaded again until the file changes or
    #: ``Client.retry_policy`` (``error`` says when)
    quarantined: bool = False
    #: a load of the file is under way
    loading: bool = False


@dataclass
class MessagePreview:
    """One message of a CompactionRow; ``text`` is a preview (``cut`` says
    it was shortened), ``bytes`` the size of the content as sent."""

    index: int
    role: str
    tokens: int
    text: str
    bytes: int
    cut: bool = False
    name: str = ""
    tool_call_id: str = ""
    tool_calls: List[str] = field(default_factory=list)


@dataclass
class CompactionRow:
    """Input messages (``before``) and the output messages they became
    (``after``): kind is kept, masked, summarized, dropped, added or elided."""

    kind: str
    before: List[MessagePreview] = field(default_factory=list)
    after: List[MessagePreview] = field(default_factory=list)
    elided: int = 0
    first: Optional[int] = None
    omitted: int = 0


@dataclass
class CompactionDetail:
    """What a conversation's last compaction did, message by message."""

    at: _dt.datetime
    pipeline: List[str]
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    stages: List[Stage]
    rows: List[CompactionRow]
    model: str = ""
    summary: str = ""
    truncated: bool = False
    #: a proxied compaction's wire format (``anthropic``, ``responses``,
    #: ``openai``); the wire counts are its messages in that format, as the
    #: conversation's ``messages`` counts them, where ``messages_before``
    #: and ``messages_after`` count the chat messages the policies saw
    wire_format: str = ""
    wire_messages_before: int = 0
    wire_messages_after: int = 0


@dataclass
class Usage:
    """The provider's usage report of a proxied conversation's last response."""

    input_tokens: int
    """Prompt tokens, cached ones included."""
    output_tokens: int
    at: _dt.datetime
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass
class ShadowCostModel:
    """A model shadow figures are priced under, and its prompt cache
    ("automatic": OpenAI's shared prefix; "breakpoints": Anthropic's
    cache_control marks)."""

    model: str
    cache: str


@dataclass
class ShadowFigures:
    """One way of sending a conversation's requests, summed: tokens as
    ``compactd eval`` counts them, the input side's dollars under each of
    ``Shadow.cost_models`` (in order), identifiers of the histories looked
    for and kept, and requests that still held the task."""

    requests: int
    tokens_sent: int
    costs_usd: List[float]
    probes: int
    probes_kept: int
    task_kept: int


@dataclass
class ShadowPipeline(ShadowFigures):
    """One shadow pipeline's figures and its runs' outcomes."""

    pipeline: str = ""
    compacted: int = 0
    failed: int = 0
    dropped: int = 0


@dataclass
class Shadow:
    """The live pipeline (``live``), every message (``full``) and each
    shadow policy (``proxy.shadow``) measured over the same proxied
    requests, as ``compactd eval`` measures them; the answering daemon's
    figures."""

    cost_models: List[ShadowCostModel]
    live: ShadowFigures
    full: ShadowFigures
    pipelines: List[ShadowPipeline]


@dataclass
class Conversation:
    """One tracked conversation: its last request and counters over all.
    A conversation that came through the proxy also has its ``provider``,
    ``last_usage``, and ``needs_compaction`` (its next proxied request is
    compacted)."""

    id: str
    pipeline: Optional[List[str]]
    messages: int
    tokens: int
    messages_after: int
    tokens_after: int
    usage_ratio: float
    requests: int
    compactions: int
    failures: int
    tokens_saved: int
    first_seen: _dt.datetime
    last_seen: _dt.datetime
    needs_compaction: bool
    model: str = ""
    #: what chose the last proxied request's pipeline and threshold: the
    #: model pattern of the ``proxy.routes`` entry that matched,
    #: ``"header"`` (X-Compactd-Policy) or ``"default"``
    route: str = ""
    context_window: int = 0
    recoveries: int = 0
    last_compacted: Optional[_dt.datetime] = None
    last_compaction: Optional[CompactionDetail] = None
    provider: str = ""
    last_usage: Optional[Usage] = None
    #: the daemon that served the last request, when the replicas of a
    #: fleet share a store (``state.url``)
    replica: str = ""
    #: X-Compactd-Title (or compact()'s ``title``), else the first line of
    #: the conversation's task
    title: str = ""
    #: X-Compactd-Tags / X-Compactd-User (or compact()'s), as last sent
    tags: List[str] = field(default_factory=list)
    user: str = ""
    #: the most tokens the conversation reached (a request before
    #: compaction, or a response's usage)
    peak_tokens: int = 0
    #: dollars the proxied responses cost at the models.dev catalog's
    #: prices, and had every token compaction removed been sent too
    paid_usd: float = 0.0
    full_usd: float = 0.0
    #: responses whose model the catalog does not price (left out of both)
    unpriced_requests: int = 0
    #: the live pipeline and the shadow policies compared on this
    #: conversation's requests (None: no shadow ran)
    shadow: Optional[Shadow] = None


@dataclass
class PolicyCounts:
    serving: int
    failed: int


@dataclass
class Totals:
    conversations: int
    requests: int
    compactions: int
    failures: int
    tokens_saved: int
    paid_usd: float = 0.0
    full_usd: float = 0.0
    unpriced_requests: int = 0
    #: the conversations' shadow figures summed (None: no shadow ran)
    shadow: Optional[Shadow] = None


@dataclass
class StoreDescriptor:
    path: str
    ttl: str
    max_conversations: int


@dataclass
class ProxyUpstreams:
    """The proxy's running upstreams ("" when not proxied)."""

    openai: str
    anthropic: str


@dataclass
class UpstreamChange:
    """One change of a provider's upstream while the daemon ran."""

    provider: str
    old: str
    new: str
    at: _dt.datetime
    by: str


@dataclass
class ProxyStatus:
    """Where the proxy forwards, and the upstream changes since the start."""

    upstreams: ProxyUpstreams
    allow_upstream_change: bool
    upstream_changes: List[UpstreamChange]


@dataclass
class Status:
    """The answer to GET /v1/status."""

    version: str
    abi: str
    started_at: _dt.datetime
    uptime_seconds: float
    policies: PolicyCounts
    totals: Totals
    conversations: List[Conversation]
    store: StoreDescriptor
    proxy: ProxyStatus


@dataclass
class RequestUsage:
    """The upstream's usage for one proxied request."""

    input_tokens: int
    """Prompt tokens, cached ones included."""
    output_tokens: int
    cached_tokens: int = 0
    #: input written to the prompt cache (Anthropic)
    cache_write_tokens: int = 0


@dataclass
class RequestRecord:
    """One request in the request log (GET /v1/requests): what compactd
    did, what the upstream answered and billed, and how long each part
    took. No prompt content and no header is recorded."""

    id: str
    time: _dt.datetime
    kind: str
    """"proxy" or "compact"."""
    compacted: bool
    compactd_ms: float
    conversation_id: str = ""
    format: str = ""
    model: str = ""
    pipeline: List[str] = field(default_factory=list)
    #: what chose a proxied request's pipeline and threshold: the model
    #: pattern of the ``proxy.routes`` entry that matched, ``"header"`` or
    #: ``"default"``
    route: str = ""
    reason: str = ""
    not_compacted: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    context_window: int = 0
    usage: Optional[RequestUsage] = None
    status: int = 0
    upstream: bool = False
    upstream_ms: float = 0.0
    first_byte_ms: float = 0.0
    cost_usd: Optional[float] = None
    full_cost_usd: Optional[float] = None
    warnings: List[str] = field(default_factory=list)


@dataclass
class Money:
    """What listed requests cost at the models.dev catalog's prices, and
    what sending everything would have cost."""

    paid_usd: float
    full_usd: float
    priced: int
    unpriced: int
    unpriced_models: List[str] = field(default_factory=list)


@dataclass
class RequestsPage:
    """The answer to GET /v1/requests: newest first; pass ``next_cursor``
    back as ``cursor`` for the next page."""

    requests: List[RequestRecord]
    money: Money
    next_cursor: str = ""
    warning: str = ""


@dataclass
class ConfigDocument:
    """The answer to GET and PUT /v1/config; ``config`` is the running
    config, defaults filled in."""

    file: str
    config: Dict[str, Any]
    restart_required: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)


@dataclass
class StoreHealth:
    """The shared state store's reachability in GET /healthz (present only
    with ``state.url``): while it cannot be reached, requests are still
    served from themselves alone and the daemon is "degraded"."""

    backend: str
    degraded: bool
    dropped_writes: int
    failed_reads: int
    #: the last failure while degraded
    error: str = ""
    #: when the store became unreachable
    since: Optional[_dt.datetime] = None


@dataclass
class Health:
    """The answer to GET /healthz. ``status`` is "ok", "starting" (the
    daemon tries its plugin files for the first time; policies serve as they
    load) or "degraded" (no policy serves, or a policy of the default
    pipeline cannot load: ``problems`` says why and how to clear it)."""

    status: str
    #: policies serving (0 in the tokenless answer on the TCP listener)
    policies: int = 0
    #: plugin files being loaded
    loading: int = 0
    problems: List[str] = field(default_factory=list)
    store: Optional[StoreHealth] = None


T = TypeVar("T")

_FRACTION = re.compile(r"(\.\d{1,6})\d*")


def parse_time(s: str) -> _dt.datetime:
    """Parse an RFC 3339 time as Go writes it (nanoseconds, "Z")."""
    s = s.strip()
    if s.endswith("Z") or s.endswith("z"):
        s = s[:-1] + "+00:00"
    s = _FRACTION.sub(lambda m: m.group(1), s, count=1)
    return _dt.datetime.fromisoformat(s)


def _decode(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = getattr(tp, "__origin__", None)
    args = getattr(tp, "__args__", ())
    if origin is Union:  # Optional[X]
        inner = [a for a in args if a is not type(None)]
        return _decode(inner[0], value) if len(inner) == 1 else value
    if origin in (list, List):
        return [_decode(args[0], v) for v in value] if args else list(value)
    if origin in (dict, Dict):
        return dict(value)
    if tp is _dt.datetime:
        return parse_time(value)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value)
    if tp is float and isinstance(value, int):
        return float(value)
    return value


def from_dict(cls: Type[T], data: Dict[str, Any]) -> T:
    """Build dataclass ``cls`` from a decoded JSON object, ignoring unknown
    keys and decoding nested dataclasses, lists and times."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: want a JSON object, got {type(data).__name__}")
    hints = get_type_hints(cls, vars(sys.modules[cls.__module__]))
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _decode(hints[f.name], data[f.name])
    return cls(**kwargs)
