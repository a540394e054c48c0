"""A client for the compactd daemon's HTTP/JSON API, over its Unix socket
or its loopback TCP listener (with a bearer token). Standard library only.
"""

import http.client
import json
import os
import re
import socket
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union
from urllib.parse import quote, urlencode

from .errors import DaemonUnavailable, error_for
from .types import (
    CompactResponse,
    ConfigDocument,
    RequestsPage,
    Conversation,
    Health,
    Message,
    Policy,
    Status,
    from_dict,
)

DEFAULT_TIMEOUT = 150.0
"""Seconds a request may take: the daemon's default request_timeout (2m)
plus a margin, as a compaction that runs out of time still answers."""


def default_socket_path(environ: Optional[Mapping[str, str]] = None) -> str:
    """The daemon's socket, found the way the compactd command finds it:
    $COMPACTD_SOCKET, else $XDG_RUNTIME_DIR/compactd.sock, else
    $XDG_STATE_HOME/compactd/compactd.sock (~/.local/state/compactd/compactd.sock).
    """
    env = os.environ if environ is None else environ
    if env.get("COMPACTD_SOCKET"):
        return env["COMPACTD_SOCKET"]
    if env.get("XDG_RUNTIME_DIR"):
        return os.path.join(env["XDG_RUNTIME_DIR"], "compactd.sock")
    state = env.get("XDG_STATE_HOME")
    if not state:
        home = env.get("HOME") or "/tmp"
        state = os.path.join(home, ".local", "state")
    return os.path.join(state, "compactd", "compactd.sock")


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "…")
    if isinstance(value, (bool, int, float)) or value is None:
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def _want_str(what: str, value: Any, allow_empty: bool = False) -> None:
    """Raise a TypeError unless value is a str (non-empty unless allow_empty)."""
    if not isinstance(value, str) or (not allow_empty and value == ""):
        raise TypeError(f"compactd: {what} must be a {'' if allow_empty else 'non-empty '}str, not {_describe(value)}")


def _strings(what: str, values: Any) -> List[str]:
    """values as a list of non-empty strs (a TypeError otherwise)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"compactd: {what} must be a list of str, not {_describe(values)}")
    out = list(values)
    for v in out:
        _want_str(what, v)
    return out


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection over a Unix socket."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Client:
    """Calls a compactd daemon. Each call opens its own connection, so a
    Client is safe to share between threads.

    >>> c = Client()                                   # the default socket
    >>> c = Client(socket_path="/run/user/1000/compactd.sock")
    >>> c = Client(tcp="127.0.0.1:7077", token="...")  # the TCP listener
    """

    def __init__(
        self,
        *,
        socket_path: Optional[str] = None,
        tcp: Optional[str] = None,
        token: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
    ):
        if tcp and socket_path:
            raise ValueError("give socket_path or tcp, not both")
        self.timeout = timeout
        self.token = token
        self.tcp = tcp
        self.socket_path = None if tcp else (socket_path or default_socket_path())

    @property
    def address(self) -> str:
        """Where the daemon is: the socket path, or the TCP host:port."""
        return self.tcp or self.socket_path or ""

    def _connection(self) -> http.client.HTTPConnection:
        if self.tcp:
            host, _, port = self.tcp.rpartition(":")
            return http.client.HTTPConnection(host.strip("[]") or "127.0.0.1", int(port), timeout=self.timeout)
        return _UnixConnection(self.socket_path or "", self.timeout)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send a request and return the decoded JSON answer (or the text,
        for a non-JSON answer). An error answer raises an APIError."""
        # Checked here, so a bad path is our TypeError, not http.client's.
        if not isinstance(method, str) or not re.fullmatch(r"[A-Z]+", method):
            raise TypeError(f"compactd: request()'s method must be an HTTP method such as 'GET', not {_describe(method)}")
        if not isinstance(path, str) or not path.startswith("/") or re.search(r"[^\x21-\x7e]", path):
            raise TypeError(
                "compactd: request()'s path must start with '/' and be URL-encoded "
                f"(no spaces or other characters to escape), not {_describe(path)}"
            )
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        conn = self._connection()
        try:
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise DaemonUnavailable(self.address, e) from e
        finally:
            conn.close()
        ctype = resp.getheader("Content-Type", "")
        if resp.status >= 300:
            code, message = None, raw.decode("utf-8", "replace").strip()
            if ctype.startswith("application/json"):
                try:
                    err = json.loads(raw)["error"]
                    code, message = err["code"], err["message"]
                except (ValueError, KeyError, TypeError):
                    pass
            raise error_for(resp.status, code, message)
        if ctype.startswith("application/json"):
            return json.loads(raw)
        return raw.decode("utf-8")

    def compact(
        self,
        messages: Sequence[Message],
        *,
        policy: Optional[str] = None,
        pipeline: Optional[Sequence[str]] = None,
        config: Optional[Mapping[str, Any]] = None,
        model: Optional[str] = None,
        conversation_id: Optional[str] = None,
        context_window: Optional[int] = None,
        target_tokens: Optional[int] = None,
        force: Optional[bool] = None,
        cache_breakpoints: Optional[bool] = None,
        format: Optional[str] = None,
        system: Any = None,
        title: Optional[str] = None,
        tags: Optional[Sequence[str]] = None,
        user: Optional[str] = None,
    ) -> CompactResponse:
        """Compact a conversation (POST /v1/compact).

        ``policy`` or ``pipeline`` names what runs (neither: the daemon's
        default); ``config`` overrides its settings, with a pipeline one
        object per policy name. ``cache_breakpoints=True`` returns the
        policy's prompt-cache breakpoints as Anthropic ``cache_control``
        markers (do not send them to OpenAI). ``force=True`` compacts now:
        the policy is told the caller decided (its own thresholds do not
        apply) and aims at ``target_tokens``. When a plugin fails the answer
        holds the input unchanged and the failure in ``warnings``: messages
        are never lost.

        ``format="anthropic"`` takes an Anthropic Messages conversation:
        ``messages`` in Anthropic's form and its top-level ``system``
        prompt; ``format="responses"`` an OpenAI Responses API input:
        ``messages`` its items and ``system`` its ``instructions``. The
        answer is in the same form (``system`` comes back unchanged).

        ``title``, ``tags`` and ``user`` label the conversation on the status
        page and in ``status()``'s search (the title defaults to the first
        line of its task).
        """
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise TypeError(f"compactd: compact()'s messages must be a list of messages, not {_describe(messages)}")
        if tags is not None:
            tags = _strings("compact()'s tags", tags)
        body: Dict[str, Any] = {"messages": list(messages)}
        self._options(
            body,
            policy=policy,
            pipeline=pipeline,
            config=config,
            model=model,
            conversation_id=conversation_id,
            context_window=context_window,
            target_tokens=target_tokens,
            force=force,
            cache_breakpoints=cache_breakpoints,
            format=format,
            system=system,
            title=title,
            tags=tags,
            user=user,
        )
        return from_dict(CompactResponse, self.request("POST", "/v1/compact", body))

    def compact_proxied(
        self,
        conversation_id: str,
        *,
        policy: Optional[str] = None,
        pipeline: Optional[Sequence[str]] = None,
        config: Optional[Mapping[str, Any]] = None,
    ) -> CompactResponse:
        """Compact the last request the daemon's proxy forwarded for this
        conversation (POST /v1/compact with only ``conversation_id``).

        The answer is in that request's format (``format`` says which), and
        the conversation is flagged ``needs_compaction``, so the agent's
        next request through the proxy is compacted on its way. Raises
        NotFound when the proxy holds no request of that conversation.
        """
        _want_str("compact_proxied()'s conversation_id", conversation_id)
        body: Dict[str, Any] = {"conversation_id": conversation_id}
        self._options(body, policy=policy, pipeline=pipeline, config=config)
        return from_dict(CompactResponse, self.request("POST", "/v1/compact", body))

    @staticmethod
    def _options(body: Dict[str, Any], **options: Any) -> None:
        """Add the options that are set to a request body."""
        for key, value in options.items():
            if value is None:
                continue
            if key == "pipeline":
                value = list(value)
            elif key == "config":
                value = dict(value)
            body[key] = value

    def policies(self) -> List[Policy]:
        """Every plugin file and the policy it serves (GET /v1/policies)."""
        return [from_dict(Policy, p) for p in self.request("GET", "/v1/policies")["policies"]]

    def policy(self, name: str) -> Policy:
        """One policy (GET /v1/policies/{name})."""
        _want_str("policy()'s name", name)
        return from_dict(Policy, self.request("GET", "/v1/policies/" + quote(name, safe="")))

    def retry_policy(self, name: str) -> Policy:
        """Loads a plugin file again now (POST /v1/policies/{name}/retry),
        lifting its quarantine or the failure of its bytes the daemon
        remembers; ``name`` is the policy, or the file's name. Returns the
        file's state once the load is over."""
        _want_str("retry_policy()'s name", name)
        return from_dict(Policy, self.request("POST", "/v1/policies/" + quote(name, safe="") + "/retry"))

    def status(
        self,
        *,
        limit: Optional[int] = None,
        q: Optional[str] = None,
        tag: Union[str, Sequence[str], None] = None,
        user: Optional[str] = None,
    ) -> Status:
        """Uptime, totals and the most recently seen conversations
        (GET /v1/status; the daemon lists 100 unless ``limit`` says), those
        matching ``q`` (found in the id, title, user, model, tags or
        pipeline, case-insensitively), carrying every tag in ``tag`` (one
        or a list), and of ``user``::

            client.status(limit=20, tag="nightly", q="parser")
        """
        params: List[Any] = []
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise TypeError(f"compactd: status()'s limit must be an int, not {_describe(limit)}")
            params.append(("limit", limit))
        if q is not None:
            _want_str("status()'s q", q, allow_empty=True)
            if q:
                params.append(("q", q))
        if tag is not None:
            params.extend(("tag", t) for t in _strings("status()'s tag", [tag] if isinstance(tag, str) else tag))
        if user is not None:
            _want_str("status()'s user", user, allow_empty=True)
            if user:
                params.append(("user", user))
        path = "/v1/status"
        if params:
            path += "?" + urlencode(params)
        return from_dict(Status, self.request("GET", path))

    def conversation(self, conversation_id: str) -> Conversation:
        """One conversation, with ``last_compaction``: what its last
        compaction kept, masked, summarized or dropped."""
        _want_str("conversation()'s conversation_id", conversation_id)
        path = "/v1/status?" + urlencode({"conversation_id": conversation_id})
        return from_dict(Conversation, self.request("GET", path))

    def requests(
        self, *, conversation: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> RequestsPage:
        """The request log, newest first (GET /v1/requests): one
        conversation's records with ``conversation``, else every record
        the daemon holds; ``limit`` per page (the daemon's default is 50),
        ``cursor`` the previous page's ``next_cursor``."""
        query = {k: v for k, v in (("conversation", conversation), ("limit", limit), ("cursor", cursor)) if v is not None}
        path = "/v1/requests"
        if query:
            path += "?" + urlencode(query)
        return from_dict(RequestsPage, self.request("GET", path))

    def config(self) -> ConfigDocument:
        """The running config and its problems (GET /v1/config)."""
        return from_dict(ConfigDocument, self.request("GET", "/v1/config"))

    def update_config(self, patch: Mapping[str, Any]) -> ConfigDocument:
        """Change settings (PUT /v1/config): ``patch`` is a JSON merge patch
        (nested objects merge, None deletes a key), validated and written
        back to the daemon's config file; an invalid one changes nothing."""
        if not isinstance(patch, Mapping):
            raise TypeError(f"compactd: update_config()'s patch must be a mapping, not {_describe(patch)}")
        return from_dict(ConfigDocument, self.request("PUT", "/v1/config", dict(patch)))

    def health(self) -> Health:
        """Liveness (GET /healthz)."""
        return from_dict(Health, self.request("GET", "/healthz"))

    def metrics(self) -> str:
        """The Prometheus metrics, as text (GET /metrics)."""
        return self.request("GET", "/metrics")

    def openapi(self) -> Dict[str, Any]:
        """The API's OpenAPI document (GET /v1/openapi.json)."""
        return self.request("GET", "/v1/openapi.json")


def compact(
    messages: Iterable[Message],
    *,
    policy: Optional[str] = None,
    client: Optional[Client] = None,
    **options: Any,
) -> List[Message]:
    """Compact ``messages`` and return the list to send to the model.

    The one-call helper for agent loops (LangChain-style)::

        messages = compactd.compact(messages, policy="sliding", model="gpt-4o")

    It talks to the daemon on the default socket unless ``client`` is
    given; ``options`` are Client.compact's (pipeline, config, model,
    conversation_id, context_window, target_tokens, force, cache_breakpoints, format,
    system). A policy that fails returns the messages unchanged, as the
    daemon does.

    An Anthropic conversation keeps its form: with ``format="anthropic"``
    and its ``system`` prompt, the returned messages are Anthropic
    messages (the system prompt is unchanged)::

        messages = compactd.compact(messages, policy="sliding", format="anthropic", system=system)
    """
    c = client or Client()
    return c.compact(list(messages), policy=policy, **options).messages
