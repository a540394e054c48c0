"""compactd: compact LLM conversations through the local compactd daemon.

    import compactd

    messages = compactd.compact(messages, policy="sliding", model="gpt-4o")

    c = compactd.Client()               # $COMPACTD_SOCKET or the default socket
    resp = c.compact(messages, policy="sliding", config={"window_size": 8})
    print(resp.stats.tokens_before, "->", resp.stats.tokens_after)
"""

from .client import DEFAULT_TIMEOUT, Client, compact, default_socket_path
from .errors import (
    ERROR_CODES,
    APIError,
    BadRequest,
    CompactdError,
    DaemonUnavailable,
    Forbidden,
    InternalError,
    InvalidConfig,
    InvalidConversation,
    InvalidJSON,
    MethodNotAllowed,
    NoPolicy,
    NotFound,
    RequestTooLarge,
    TooManyMessages,
    Unauthorized,
    UnknownPolicy,
    UnsupportedFormat,
)
from .types import (
    CompactionDetail,
    CompactionRow,
    CompactResponse,
    ConfigDocument,
    Conversation,
    Health,
    StoreHealth,
    Limits,
    LoadError,
    Message,
    MessagePreview,
    Policy,
    PolicyCounts,
    PolicyInstances,
    ProxyStatus,
    ProxyUpstreams,
    RequestRecord,
    RequestUsage,
    RequestsPage,
    Money,
    Stage,
    Stats,
    Status,
    StoreDescriptor,
    Totals,
    UpstreamChange,
    Usage,
)

__version__ = "0.1.0"

__all__ = [
    "Client", "compact", "default_socket_path", "DEFAULT_TIMEOUT", "ERROR_CODES",
    "CompactdError", "DaemonUnavailable", "APIError", "InvalidJSON", "BadRequest",
    "InvalidConversation", "UnsupportedFormat", "InvalidConfig", "NoPolicy", "Unauthorized", "Forbidden", "UnknownPolicy",
    "NotFound", "MethodNotAllowed", "RequestTooLarge", "TooManyMessages", "InternalError",
    "CompactResponse", "Stats", "Stage", "Policy", "PolicyInstances", "Limits", "LoadError", "Status",
    "PolicyCounts", "Totals", "StoreDescriptor", "ProxyStatus", "ProxyUpstreams", "UpstreamChange",
    "Conversation", "CompactionDetail",
    "CompactionRow", "MessagePreview", "ConfigDocument", "Health", "StoreHealth", "Message", "Usage",
    "RequestsPage", "RequestRecord", "RequestUsage", "Money",
]
