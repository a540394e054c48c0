"""compactd's Python client against a real daemon (see conftest.py)."""

import dataclasses
import os
import threading
import uuid

import pytest

import compactd
from compactd import types
from conftest import chat


@pytest.fixture
def client(socket_path):
    return compactd.Client(socket_path=socket_path)


def test_compact_real_conversation(client, tau):
    resp = client.compact(tau, policy="sliding", model="gpt-4o", config={"window_size": 4, "step": 1})
    assert isinstance(resp, compactd.CompactResponse)
    assert resp.compacted and len(resp.messages) < len(tau)
    assert resp.messages[0] == tau[0] and resp.messages[-1] == tau[-1]
    assert resp.stats.tokens_after < resp.stats.tokens_before
    assert resp.stats.messages_before == len(tau) and resp.stats.encoding == "o200k_base"
    stage = resp.stats.stages[0]
    assert isinstance(stage, compactd.Stage) and stage.policy == "sliding" and stage.compacted and stage.dropped
    assert resp.warnings == [] and resp.conversation_id.startswith("h-")
    # Kept messages come back as sent.
    for m in resp.messages:
        assert m in tau or "earlier entries" in str(m.get("content"))


def test_compact_helper_returns_the_messages_to_send(tau):
    # The module-level helper finds the daemon through $COMPACTD_SOCKET.
    out = compactd.compact(tau, policy="lastn", config={"n": 3, "step": 1})
    assert isinstance(out, list) and out[0] == tau[0] and out[-3:] == tau[-3:]
    assert len(out) < 8  # lastn extends the tail to a whole tool-call unit
    unchanged = compactd.compact(chat(1), policy="lastn", config={"n": 50})
    assert unchanged == chat(1)


def anthropic_conversation(turns):
    """An Anthropic Messages conversation with tool calls: its system
    prompt and messages."""
    system = "You book flights. Be terse."
    msgs = [{"role": "user", "content": "Book a flight to Boston."}]
    for i in range(turns):
        msgs.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Looking that up ({i})."},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "lookup", "input": {"step": i}},
        ]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"flight data {i} " * 40},
            {"type": "text", "text": f"and then {i}?", "cache_control": {"type": "ephemeral"}},
        ]})
    msgs.append({"role": "assistant", "content": "Anything else?"})
    msgs.append({"role": "user", "content": "last question"})
    return system, msgs


def test_compact_anthropic_format(client):
    system, msgs = anthropic_conversation(8)
    resp = client.compact(msgs, policy="sliding", format="anthropic", system=system, model="claude-sonnet-4-5",
                          config={"window_size": 4, "step": 1})
    assert resp.format == "anthropic" and resp.system == system and resp.compacted
    assert len(resp.messages) < len(msgs) and resp.messages[-1] == msgs[-1]
    # Still a valid Messages conversation: Anthropic roles only, and every
    # tool_result answers a tool_use of the message before it.
    for i, m in enumerate(resp.messages):
        assert m["role"] in ("user", "assistant")
        for block in m["content"] if isinstance(m["content"], list) else []:
            if block["type"] == "tool_result":
                before = resp.messages[i - 1]["content"]
                assert any(b.get("id") == block["tool_use_id"] for b in before if isinstance(b, dict))
    # Messages kept whole come back as sent, cache_control included.
    kept = [m for m in resp.messages if m in msgs]
    assert len(kept) >= 3 and any("cache_control" in str(m) for m in kept)
    # The helper returns Anthropic messages too.
    out = compactd.compact(msgs, policy="sliding", format="anthropic", system=system, config={"window_size": 4, "step": 1})
    assert len(out) < len(msgs) and out[-1] == msgs[-1] and all(m["role"] in ("user", "assistant") for m in out)


def test_compact_format_errors(client):
    with pytest.raises(compactd.BadRequest) as info:
        client.compact(chat(1), policy="lastn", format="gemini")
    assert "format" in info.value.message
    with pytest.raises(compactd.BadRequest) as info:
        client.compact(chat(1), policy="lastn", system="You are terse.")
    assert "anthropic" in info.value.message
    with pytest.raises(compactd.APIError) as info:
        client.compact([{"role": "system", "content": "x"}], policy="lastn", format="anthropic")
    assert info.value.code in ("bad_request", "invalid_conversation")


def test_compact_proxied(client):
    # go test ./clients sent this conversation through the daemon's proxy.
    cid = os.environ["COMPACTD_TEST_PROXIED"]
    before = client.conversation(cid)
    assert before.provider == "openai" and isinstance(before.last_usage, compactd.Usage)
    assert before.last_usage.input_tokens > 0 and before.last_usage.at is not None
    resp = client.compact_proxied(cid, policy="sliding", config={"window_size": 4, "step": 1})
    assert resp.format == "openai" and resp.system is None and resp.compacted
    assert resp.conversation_id == cid and len(resp.messages) < before.messages
    after = client.conversation(cid)
    assert after.needs_compaction and after.last_compaction is not None
    with pytest.raises(compactd.NotFound):
        client.compact_proxied("never-proxied", policy="sliding")


def test_pipeline_and_target(client):
    resp = client.compact(chat(6), pipeline=["lastn", "sliding"], config={"lastn": {"n": 3}}, target_tokens=100000)
    assert [s.policy for s in resp.stats.stages] == ["lastn", "sliding"]
    assert resp.stats.stages[0].skipped.startswith("fits the target")
    assert resp.messages == chat(6)


def test_force(client):
    # lastn waits for n+step messages before it cuts; told the caller
    # decided (force), it cuts back to the last n now, and the policy's
    # state keeps that cut for the conversation's later requests.
    msgs = chat(6)
    opts = {"policy": "lastn", "config": {"n": 3, "step": 50}, "conversation_id": "py-force-" + uuid.uuid4().hex}
    assert not client.compact(msgs, **opts).compacted
    resp = client.compact(msgs, force=True, **opts)
    assert resp.compacted and len(resp.messages) < len(msgs)
    assert resp.messages[-3:] == msgs[-3:]
    assert client.compact(msgs, **opts).messages == resp.messages


def test_plugin_failure_keeps_the_input(client):
    msgs = chat(2)
    resp = client.compact(msgs, policy="gohostile", config={"mode": "exit"})
    assert resp.messages == msgs and not resp.compacted
    assert len(resp.warnings) == 1 and "trapped" in resp.warnings[0]
    assert resp.stats.stages[0].error


@pytest.mark.parametrize(
    "kwargs,exc,code,status",
    [
        ({"policy": "nope"}, compactd.UnknownPolicy, "unknown_policy", 404),
        ({"policy": "lastn", "config": {"n": 0}}, compactd.InvalidConfig, "invalid_config", 400),
        ({"policy": "lastn", "config": {"bogus": 1}}, compactd.InvalidConfig, "invalid_config", 400),
        # No policy named: the default, ledger, which this daemon lacks.
        ({}, compactd.UnknownPolicy, "unknown_policy", 404),
        ({"policy": "Not A Name"}, compactd.BadRequest, "bad_request", 400),
        ({"policy": "lastn", "conversation_id": "x" * 300}, compactd.BadRequest, "bad_request", 400),
    ],
)
def test_errors_carry_the_api_code(client, kwargs, exc, code, status):
    with pytest.raises(exc) as info:
        client.compact(chat(1), **kwargs)
    e = info.value
    assert isinstance(e, compactd.APIError) and isinstance(e, compactd.CompactdError)
    assert e.code == code and e.status == status and e.message
    assert code in str(e)


@pytest.mark.parametrize(
    "messages,exc",
    [
        ([], compactd.InvalidConversation),
        ([{"role": "robot", "content": "hi"}], compactd.InvalidConversation),
        ([{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "x", "content": "b"}], compactd.InvalidConversation),
        ([1, 2], compactd.InvalidConversation),
    ],
)
def test_invalid_conversations(client, messages, exc):
    with pytest.raises(exc) as info:
        client.compact(messages, policy="lastn")
    assert info.value.code == "invalid_conversation"


def test_raw_requests_map_every_error(client):
    with pytest.raises(compactd.MethodNotAllowed):
        client.request("DELETE", "/v1/config")
    with pytest.raises(compactd.NotFound):
        client.request("GET", "/v2/nothing")
    with pytest.raises(compactd.InvalidJSON):
        client.request("POST", "/v1/compact", {"policy": "lastn", "mesages": []})


def test_policies(client):
    policies = {p.name: p for p in client.policies()}
    assert {"sliding", "lastn", "gohostile"} <= set(policies)
    sliding = policies["sliding"]
    assert sliding.serving and sliding.path == "fast" and sliding.version and sliding.calls >= 1
    assert isinstance(sliding.limits, compactd.Limits) and sliding.limits.call_timeout
    assert isinstance(sliding.config_schema, dict) and sliding.loaded_at is not None and sliding.error is None
    assert not sliding.quarantined and sliding.log_lines_dropped == 0 and sliding.log_lines_truncated == 0
    assert client.policy("lastn").path == "fast"  # the C kit exports the fast path
    with pytest.raises(compactd.UnknownPolicy):
        client.policy("nope")
    retried = client.retry_policy("lastn")  # loads the file again: it still serves
    assert isinstance(retried, compactd.Policy) and retried.serving and retried.name == "lastn" and not retried.loading
    with pytest.raises(compactd.UnknownPolicy):
        client.retry_policy("nope")


def test_status_and_last_compaction(client):
    client.compact(chat(4), policy="lastn", config={"n": 2, "step": 1}, conversation_id="py-status", model="gpt-4o")
    st = client.status(limit=50)
    assert isinstance(st, compactd.Status) and st.policies.serving >= 3 and st.uptime_seconds > 0
    ids = [c.id for c in st.conversations]
    assert "py-status" in ids
    assert all(c.last_compaction is None for c in st.conversations)
    c = client.conversation("py-status")
    assert c.messages == 10 and c.messages_after == 4 and c.context_window == 128000
    assert c.usage_ratio == pytest.approx(c.tokens / 128000)
    assert c.last_seen >= c.first_seen and c.last_compacted is not None
    d = c.last_compaction
    assert isinstance(d, compactd.CompactionDetail) and d.pipeline == ["lastn"]
    # lastn keeps the system message, the task and the last 2.
    assert [r.kind for r in d.rows] == ["kept", "kept", "dropped", "kept", "kept"]
    assert d.rows[2].before[0].index == 2 and d.rows[-1].before[0].text == "last question"
    assert len(client.status(limit=1).conversations) == 1
    with pytest.raises(compactd.NotFound):
        client.conversation("no-such-conversation")
    with pytest.raises(compactd.BadRequest):
        client.status(limit=0)


def test_titles_tags_users_and_search(client):
    task = [{"role": "user", "content": "Fix the flaky parser test\nIt fails on CI."}] + chat(3)[1:]
    lastn = {"policy": "lastn", "config": {"n": 2, "step": 1}}
    client.compact(task, conversation_id="py labels 1", tags=["py-night", "ci"], user="ana é", **lastn)
    client.compact(chat(2), conversation_id="py labels 2", title="Release notes & more", tags=("py-night",), **lastn)
    c = client.conversation("py labels 1")
    assert c.title == "Fix the flaky parser test"  # the task's first line
    assert c.tags == ["py-night", "ci"] and c.user == "ana é" and c.peak_tokens >= c.tokens

    def ids(**search):
        return sorted(x.id for x in client.status(**search).conversations)

    assert ids(tag="py-night") == ["py labels 1", "py labels 2"]
    assert ids(tag=["py-night", "ci"]) == ["py labels 1"]
    assert ids(user="ana é", limit=5) == ["py labels 1"]
    assert ids(q="notes & MORE") == ["py labels 2"]  # characters a URL must escape
    assert ids(q="no such text anywhere") == []


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.status(5),  # keyword-only, as TypeScript's options object
        lambda c: c.status(limit="2"),
        lambda c: c.status(limit=True),
        lambda c: c.status(tag=3),
        lambda c: c.status(tag=["x", 3]),
        lambda c: c.status(tags=["x"]),
        lambda c: c.conversation(None),
        lambda c: c.conversation(5),
        lambda c: c.policy(""),
        lambda c: c.retry_policy(None),
        lambda c: c.compact("hi"),
        lambda c: c.compact([], "sliding"),
        lambda c: c.compact([], tags="x"),
        lambda c: c.compact_proxied(1),
        lambda c: c.update_config([]),
        lambda c: c.request("GET", "/v1/status?q=a b"),
        lambda c: c.request("GET", "v1/status"),
        lambda c: compactd.compact([], "sliding", client=c),
        lambda c: compactd.Client("/x.sock"),
    ],
)
def test_wrong_arguments_are_type_errors(client, call):
    with pytest.raises(TypeError):
        call(client)


def test_requests(client):
    conv = "py-requests-" + uuid.uuid4().hex  # unique: the daemon may outlive one run of the suite
    for turn in (3, 4, 5):
        client.compact(chat(turn), policy="lastn", config={"n": 2, "step": 1}, conversation_id=conv, model="gpt-4o")
    page = client.requests(conversation=conv, limit=2)
    assert isinstance(page, compactd.RequestsPage) and len(page.requests) == 2 and page.next_cursor
    first = page.requests[0]
    assert isinstance(first, compactd.RequestRecord) and first.kind == "compact" and first.compacted
    assert first.conversation_id == conv and first.pipeline == ["lastn"] and first.tokens_after < first.tokens_before
    rest = client.requests(conversation=conv, limit=2, cursor=page.next_cursor)
    assert len(rest.requests) == 1 and not rest.next_cursor and rest.requests[0].time <= first.time
    assert isinstance(rest.money, compactd.Money) and rest.money.priced == 0  # /v1/compact has no upstream usage
    assert len(client.requests().requests) >= 3
    with pytest.raises(compactd.BadRequest):
        client.requests(cursor="not-a-cursor")
    with pytest.raises(TypeError):
        client.requests(conv)  # keyword-only


def test_config(client):
    doc = client.config()
    assert isinstance(doc.config, dict) and doc.config["limits"]["max_messages"] == 10000 and doc.file
    with pytest.raises(compactd.InvalidConfig) as info:
        client.update_config({"policies": {"lastn": {"n": 0}}})
    assert "lastn" in info.value.message
    with pytest.raises(compactd.InvalidConfig):
        client.update_config({"limits": {"max_mesages": 1}})
    with pytest.raises(compactd.InvalidConfig) as info:
        client.update_config({"limits": {"plugin": {"max_instances": -3}}})
    assert "limits.plugin.max_instances: -3 is out of range (allowed: 1 to 256" in info.value.message
    assert client.config().config["limits"].get("plugin", {}).get("max_instances") is None
    up = client.update_config({"log_level": "warn"})
    assert up.config["log_level"] == "warn"
    client.update_config({"log_level": None})
    assert client.config().config["log_level"] == "info"


def test_health_metrics_openapi(client):
    h = client.health()
    assert h.status == "ok" and h.policies >= 3
    assert "compactd_http_requests_total" in client.metrics()
    doc = client.openapi()
    assert doc["openapi"].startswith("3.1") and "/v1/compact" in doc["paths"]


def test_tcp_with_token(tcp, token):
    c = compactd.Client(tcp=tcp, token=token)
    assert c.health().status == "ok"
    assert len(c.compact(chat(3), policy="lastn", config={"n": 1, "step": 1}).messages) == 3
    for bad in (None, "wrong"):
        with pytest.raises(compactd.Unauthorized) as info:
            compactd.Client(tcp=tcp, token=bad).health()
        assert info.value.status == 401


def test_socket_discovery(socket_path, monkeypatch, tmp_path):
    env = {"COMPACTD_SOCKET": "/a.sock", "XDG_RUNTIME_DIR": "/run/user/7", "HOME": "/home/u"}
    assert compactd.default_socket_path(env) == "/a.sock"
    del env["COMPACTD_SOCKET"]
    assert compactd.default_socket_path(env) == "/run/user/7/compactd.sock"
    del env["XDG_RUNTIME_DIR"]
    assert compactd.default_socket_path(env) == "/home/u/.local/state/compactd/compactd.sock"
    env["XDG_STATE_HOME"] = "/state"
    assert compactd.default_socket_path(env) == "/state/compactd/compactd.sock"
    # With no argument the client finds the daemon as the CLI does.
    assert compactd.Client().socket_path == socket_path
    monkeypatch.delenv("COMPACTD_SOCKET")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert compactd.Client().socket_path == str(tmp_path / "compactd.sock")


def test_daemon_unavailable(tmp_path):
    c = compactd.Client(socket_path=str(tmp_path / "none.sock"), timeout=2)
    with pytest.raises(compactd.DaemonUnavailable) as info:
        c.health()
    assert isinstance(info.value, compactd.CompactdError) and "none.sock" in str(info.value)
    with pytest.raises(compactd.DaemonUnavailable):
        compactd.Client(tcp="127.0.0.1:1", timeout=2).health()
    with pytest.raises(ValueError):
        compactd.Client(socket_path="/x.sock", tcp="127.0.0.1:1")


def test_shared_between_threads(client):
    errors = []

    def work(i):
        try:
            out = client.compact(chat(3 + i % 3), policy="lastn", config={"n": 2, "step": 1}, conversation_id=f"py-thread-{i}")
            assert len(out.messages) == 4
        except Exception as e:  # noqa: BLE001 - collected and reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_error_codes_match_the_spec(client):
    schema = client.openapi()["components"]["schemas"]["ErrorCode"]
    assert set(schema["enum"]) == set(compactd.ERROR_CODES)
    assert schema["x-status"] == compactd.ERROR_CODES
    for code, status in compactd.ERROR_CODES.items():
        e = compactd.errors.error_for(status, code, "m")
        assert type(e) is not compactd.APIError and e.code == code


# Each dataclass and the spec schema it decodes.
SCHEMAS = {
    "CompactResponse": types.CompactResponse,
    "Stats": types.Stats,
    "Stage": types.Stage,
    "Policy": types.Policy,
    "Limits": types.Limits,
    "LoadError": types.LoadError,
    "Status": types.Status,
    "ProxyStatus": types.ProxyStatus,
    "UpstreamChange": types.UpstreamChange,
    "Conversation": types.Conversation,
    "Usage": types.Usage,
    "CompactionDetail": types.CompactionDetail,
    "CompactionRow": types.CompactionRow,
    "MessagePreview": types.MessagePreview,
    "ConfigDocument": types.ConfigDocument,
    "Health": types.Health,
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_dataclasses_match_the_spec(client, name):
    schema = client.openapi()["components"]["schemas"][name]
    cls = SCHEMAS[name]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(fields) == set(schema["properties"]), f"{cls.__name__} fields differ from the {name} schema"
    required = {n for n, f in fields.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert required == set(schema.get("required", [])), f"{cls.__name__}'s required fields differ from the {name} schema"


def test_status_nested_schemas_match(client):
    props = client.openapi()["components"]["schemas"]["Status"]["properties"]
    for key, cls in (("policies", types.PolicyCounts), ("totals", types.Totals), ("store", types.StoreDescriptor)):
        assert {f.name for f in dataclasses.fields(cls)} == set(props[key]["properties"])
    props = client.openapi()["components"]["schemas"]["ProxyStatus"]["properties"]
    assert {f.name for f in dataclasses.fields(types.ProxyUpstreams)} == set(props["upstreams"]["properties"])
    props = client.openapi()["components"]["schemas"]["Policy"]["properties"]
    assert {f.name for f in dataclasses.fields(types.PolicyInstances)} == set(props["instances"]["properties"])


def test_parse_time():
    t = types.parse_time("2026-11-23T20:44:15.477747464Z")
    assert t.microsecond == 477747 and t.utcoffset().total_seconds() == 0
    assert types.parse_time("2026-01-02T03:04:05+02:00").hour == 3


def test_installed_copy_is_what_runs():
    # go test ./clients also installs the package with pip (offline) and
    # runs this file against the installed copy.
    want = os.environ.get("COMPACTD_TEST_EXPECT_INSTALLED")
    if want:
        assert compactd.__file__.startswith(want), compactd.__file__


def test_health_with_a_shared_store_decodes():
    # A fleet daemon's /healthz while Redis is down (state.url set).
    h = types.from_dict(types.Health, {
        "status": "degraded", "policies": 8, "problems": ["the shared state store cannot be reached"],
        "store": {"backend": "redis", "degraded": True, "error": "dial unix: connection refused",
                  "since": "2026-11-26T13:40:00.123456789Z", "dropped_writes": 3, "failed_reads": 1},
    })
    assert h.store is not None and h.store.degraded and h.store.dropped_writes == 3
    assert h.store.since is not None and h.store.since.year == 2026
    assert types.from_dict(types.Health, {"status": "ok", "policies": 8}).store is None
