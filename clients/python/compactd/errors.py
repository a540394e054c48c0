"""Errors the compactd client raises."""

from typing import Dict, Optional, Type

# The API's error codes and their HTTP statuses: the ErrorCode schema of
# api/openapi.yaml (the tests check this table against the document the
# daemon serves).
ERROR_CODES: Dict[str, int] = {
    "invalid_json": 400,
    "bad_request": 400,
    "invalid_conversation": 400,
    "unsupported_format": 400,
    "invalid_config": 400,
    "no_policy": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "unknown_policy": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_too_large": 413,
    "too_many_messages": 413,
    "internal": 500,
}


class CompactdError(Exception):
    """Base class of every error this package raises."""


class DaemonUnavailable(CompactdError):
    """The daemon could not be reached (no socket, connection refused, timeout)."""

    def __init__(self, address: str, cause: BaseException):
        super().__init__(f"compactd: cannot reach the daemon at {address}: {cause}")
        self.address = address
        self.cause = cause


class APIError(CompactdError):
    """An error answer from the daemon: {"error": {"code", "message"}}.

    ``code`` is the API's stable error code (see ERROR_CODES), ``status``
    the HTTP status. Catch a subclass to handle one code, e.g.
    ``except compactd.UnknownPolicy``.
    """

    code: str = ""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"compactd: {code} (HTTP {status}): {message}")
        self.status = status
        self.code = code
        self.message = message


class InvalidJSON(APIError):
    """400 invalid_json: the body is not the JSON the endpoint takes."""


class BadRequest(APIError):
    """400 bad_request: the request is not what the endpoint takes."""


class InvalidConversation(APIError):
    """400 invalid_conversation: the messages are malformed or structurally invalid."""


class InvalidConfig(APIError):
    """400 invalid_config: a policy config or config update is invalid."""


class UnsupportedFormat(APIError):
    """400 unsupported_format: the messages are in another provider's format
    (Anthropic Messages content blocks); compactd takes OpenAI chat messages."""


class NoPolicy(APIError):
    """400 no_policy: no policy named and no default configured."""


class Unauthorized(APIError):
    """401 unauthorized: the TCP listener needs the bearer token."""


class Forbidden(APIError):
    """403 forbidden: a config update the running config forbids
    (proxy.allow_upstream_change: false refuses changing the upstreams)."""


class UnknownPolicy(APIError):
    """404 unknown_policy: no plugin serves that policy."""


class NotFound(APIError):
    """404 not_found: no such endpoint or conversation."""


class MethodNotAllowed(APIError):
    """405 method_not_allowed."""


class RequestTooLarge(APIError):
    """413 request_too_large: the body is over limits.max_body_bytes."""


class TooManyMessages(APIError):
    """413 too_many_messages: the conversation is over limits.max_messages."""


class InternalError(APIError):
    """500 internal: a bug in compactd."""


_BY_CODE: Dict[str, Type[APIError]] = {
    "invalid_json": InvalidJSON,
    "bad_request": BadRequest,
    "invalid_conversation": InvalidConversation,
    "unsupported_format": UnsupportedFormat,
    "invalid_config": InvalidConfig,
    "no_policy": NoPolicy,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "unknown_policy": UnknownPolicy,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "request_too_large": RequestTooLarge,
    "too_many_messages": TooManyMessages,
    "internal": InternalError,
}


def error_for(status: int, code: Optional[str], message: str) -> APIError:
    """Return the exception for an error answer."""
    if not code:
        code = f"http_{status}"
    cls = _BY_CODE.get(code, APIError)
    return cls(status, code, message)
