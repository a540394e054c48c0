// compactd's TypeScript client against a real daemon, which the Go test
// clients/clients_test.go starts (`go test ./clients`, part of `make
// test`): $COMPACTD_SOCKET is a socket that validates every answer against
// api/openapi.yaml on its way; $COMPACTD_TEST_TCP and $COMPACTD_TEST_TOKEN
// are the daemon's TCP listener.

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";

import {
  APIError,
  Client,
  CompactdError,
  DaemonUnavailable,
  ERROR_CODES,
  compact,
  defaultSocketPath,
  type CompactionDetail,
  type ErrorCode,
  type Message,
} from "../src/index.js";

function need(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`$${name} is not set: these tests need a daemon; run them with \`go test ./clients\` (or \`make test\`)`);
  return v;
}

const socketPath = need("COMPACTD_SOCKET");
const tcp = need("COMPACTD_TEST_TCP");
const token = need("COMPACTD_TEST_TOKEN");
const fixtures = need("COMPACTD_TEST_FIXTURES");

const client = new Client({ socketPath });
after(() => client.close());

function chat(turns: number): Message[] {
  const msgs: Message[] = [{ role: "system", content: "You are terse." }];
  for (let i = 0; i < turns; i++) {
    msgs.push({ role: "user", content: `question ${i}` }, { role: "assistant", content: `answer ${i}` });
  }
  msgs.push({ role: "user", content: "last question" });
  return msgs;
}

/** The longest tau-bench airline conversation of the fixture. */
function tau(): Message[] {
  const lines = fs.readFileSync(path.join(fixtures, "tau_bench_gpt4o_airline.jsonl"), "utf8").split("\n").filter((l) => l.trim());
  return lines.map((l) => (JSON.parse(l) as { messages: Message[] }).messages).reduce((a, b) => (b.length > a.length ? b : a));
}

async function rejectsWith(p: Promise<unknown>, code: ErrorCode, status: number): Promise<APIError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof APIError && e instanceof CompactdError, `${String(e)} is not an APIError`);
    assert.equal(e.code, code);
    assert.equal(e.status, status);
    assert.ok(APIError.is(e, code));
    return e;
  }
  assert.fail(`no ${code} error`);
}

describe("compact", () => {
  test("a real conversation", async () => {
    const msgs = tau();
    const resp = await client.compact(msgs, { policy: "sliding", model: "gpt-4o", config: { window_size: 4, step: 1 } });
    assert.ok(resp.compacted && resp.messages.length < msgs.length);
    assert.deepEqual(resp.messages[0], msgs[0]);
    assert.deepEqual(resp.messages.at(-1), msgs.at(-1));
    assert.ok(resp.stats.tokens_after < resp.stats.tokens_before);
    assert.equal(resp.stats.encoding, "o200k_base");
    const stage = resp.stats.stages[0];
    assert.ok(stage && stage.policy === "sliding" && stage.compacted && (stage.dropped ?? []).length > 0);
    assert.deepEqual(resp.warnings, []);
  });

  test("the helper returns the messages to send", async () => {
    const msgs = tau();
    const out = await compact(msgs, { policy: "lastn", config: { n: 3, step: 1 } }); // finds the daemon through $COMPACTD_SOCKET
    assert.deepEqual(out.slice(-3), msgs.slice(-3));
    assert.deepEqual(out[0], msgs[0]);
    assert.deepEqual(out[1], msgs[1]); // the task stays
    assert.ok(out.length < 9);
    assert.deepEqual(await compact(chat(1), { policy: "lastn", config: { n: 50 }, client }), chat(1));
  });

  test("a pipeline that stops at the target", async () => {
    const resp = await client.compact(chat(6), { pipeline: ["lastn", "sliding"], config: { lastn: { n: 3 } }, target_tokens: 100000 });
    assert.deepEqual(resp.stats.stages.map((s) => s.policy), ["lastn", "sliding"]);
    assert.match(resp.stats.stages[0]?.skipped ?? "", /^fits the target/);
    assert.deepEqual(resp.messages, chat(6));
  });

  test("force compacts below the policy's own trigger", async () => {
    // lastn waits for n+step messages before it cuts; told the caller
    // decided (force), it cuts back to the last n now, and the policy's
    // state keeps that cut for the conversation's later requests.
    const opts = { policy: "lastn", config: { n: 3, step: 50 }, conversation_id: `ts-force-${Math.random().toString(36).slice(2)}` };
    assert.equal((await client.compact(chat(6), opts)).compacted, false);
    const resp = await client.compact(chat(6), { ...opts, force: true });
    assert.equal(resp.compacted, true);
    assert.ok(resp.messages.length < chat(6).length);
    assert.deepEqual(resp.messages.slice(-3), chat(6).slice(-3));
    assert.deepEqual((await client.compact(chat(6), opts)).messages, resp.messages);
  });

  test("a failing plugin keeps the input", async () => {
    const resp = await client.compact(chat(2), { policy: "gohostile", config: { mode: "exit" } });
    assert.deepEqual(resp.messages, chat(2));
    assert.equal(resp.warnings.length, 1);
    assert.match(resp.warnings[0] ?? "", /trapped/);
  });

  const errors: [string, Parameters<Client["compact"]>[1], Message[], ErrorCode, number][] = [
    ["unknown policy", { policy: "nope" }, chat(1), "unknown_policy", 404],
    ["invalid config", { policy: "lastn", config: { n: 0 } }, chat(1), "invalid_config", 400],
    ["no policy: the default, ledger, is not loaded here", {}, chat(1), "unknown_policy", 404],
    ["bad policy name", { policy: "Not A Name" }, chat(1), "bad_request", 400],
    ["empty conversation", { policy: "lastn" }, [], "invalid_conversation", 400],
    ["orphan tool result", { policy: "lastn" }, [{ role: "user", content: "a" }, { role: "tool", tool_call_id: "x", content: "b" }], "invalid_conversation", 400],
  ];
  for (const [name, options, messages, code, status] of errors) {
    test(`error: ${name}`, async () => {
      const e = await rejectsWith(client.compact(messages, options), code, status);
      assert.ok(e.detail.length > 0 && e.message.includes(code));
    });
  }
});

/** An Anthropic Messages conversation with tool calls. */
function anthropicConversation(turns: number): { system: string; messages: Message[] } {
  const messages: Message[] = [{ role: "user", content: "Book a flight to Boston." }];
  for (let i = 0; i < turns; i++) {
    messages.push(
      {
        role: "assistant",
        content: [
          { type: "text", text: `Looking that up (${i}).` },
          { type: "tool_use", id: `toolu_${i}`, name: "lookup", input: { step: i } },
        ],
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: `toolu_${i}`, content: `flight data ${i} `.repeat(40) },
          { type: "text", text: `and then ${i}?`, cache_control: { type: "ephemeral" } },
        ],
      },
    );
  }
  messages.push({ role: "assistant", content: "Anything else?" }, { role: "user", content: "last question" });
  return { system: "You book flights. Be terse.", messages };
}

type Block = { type?: string; id?: string; tool_use_id?: string };

describe("anthropic format and the proxy", () => {
  test("an Anthropic conversation comes back in its form", async () => {
    const { system, messages } = anthropicConversation(8);
    const options = { policy: "sliding", format: "anthropic", system, config: { window_size: 4, step: 1 } } as const;
    const resp = await client.compact(messages, { ...options, model: "claude-sonnet-4-5" });
    assert.equal(resp.format, "anthropic");
    assert.equal(resp.system, system);
    assert.ok(resp.compacted && resp.messages.length < messages.length);
    assert.deepEqual(resp.messages.at(-1), messages.at(-1));
    resp.messages.forEach((m, i) => {
      assert.ok(m.role === "user" || m.role === "assistant", m.role);
      for (const b of Array.isArray(m.content) ? (m.content as Block[]) : []) {
        if (b.type !== "tool_result") continue;
        const before = resp.messages[i - 1]?.content;
        assert.ok(Array.isArray(before) && (before as Block[]).some((p) => p.id === b.tool_use_id), `tool_result ${b.tool_use_id} without its call`);
      }
    });
    const out = await compact(messages, { ...options, client });
    assert.ok(out.length < messages.length);
    assert.deepEqual(out.at(-1), messages.at(-1));
  });

  test("format errors", async () => {
    await rejectsWith(client.compact(chat(1), { policy: "lastn", format: "gemini" as "openai" }), "bad_request", 400);
    await rejectsWith(client.compact(chat(1), { policy: "lastn", system: "terse" }), "bad_request", 400);
  });

  test("a proxied conversation's last request", async () => {
    const id = need("COMPACTD_TEST_PROXIED");
    const before = await client.conversation(id);
    assert.equal(before.provider, "openai");
    assert.ok(before.last_usage && before.last_usage.input_tokens > 0);
    const resp = await client.compactProxied(id, { policy: "sliding", config: { window_size: 4, step: 1 } });
    assert.equal(resp.format, "openai");
    assert.ok(resp.compacted && resp.messages.length < before.messages && resp.system === undefined);
    const after = await client.conversation(id);
    assert.ok(after.needs_compaction && after.last_compaction);
    await rejectsWith(client.compactProxied("never-proxied", { policy: "sliding" }), "not_found", 404);
  });
});

describe("status and config", () => {
  test("policies", async () => {
    const policies = await client.policies();
    const byName = new Map(policies.map((p) => [p.name, p]));
    for (const n of ["sliding", "lastn", "gohostile"]) assert.ok(byName.get(n)?.serving, n);
    const sliding = await client.policy("sliding");
    assert.equal(sliding.path, "fast");
    assert.ok(sliding.limits && sliding.limits.call_timeout && sliding.calls >= 1);
    assert.ok(!sliding.quarantined && sliding.log_lines_dropped === 0 && sliding.log_lines_truncated === 0);
    await rejectsWith(client.policy("nope"), "unknown_policy", 404);
    const retried = await client.retryPolicy("lastn"); // loads the file again: it still serves
    assert.ok(retried.serving && retried.name === "lastn" && !retried.loading);
    await rejectsWith(client.retryPolicy("nope"), "unknown_policy", 404);
  });

  test("status and the last compaction", async () => {
    await client.compact(chat(4), { policy: "lastn", config: { n: 2, step: 1 }, conversation_id: "ts status/é", model: "gpt-4o" });
    const st = await client.status({ limit: 50 });
    assert.ok(st.conversations.some((c) => c.id === "ts status/é"));
    assert.ok(st.policies.serving >= 3 && st.uptime_seconds > 0);
    const c = await client.conversation("ts status/é");
    assert.equal(c.messages, 10);
    assert.equal(c.messages_after, 4); // the system message, the task and the last 2
    assert.equal(c.context_window, 128000);
    const d = c.last_compaction as CompactionDetail;
    assert.deepEqual(d.rows.map((r) => r.kind), ["kept", "kept", "dropped", "kept", "kept"]);
    assert.equal(d.rows.at(-1)?.before?.[0]?.text, "last question");
    assert.equal((await client.status({ limit: 1 })).conversations.length, 1);
    await rejectsWith(client.conversation("no-such-conversation"), "not_found", 404);
    await rejectsWith(client.status({ limit: 0 }), "bad_request", 400);
  });

  test("titles, tags and users, and the search", async () => {
    const task: Message[] = [{ role: "user", content: "Fix the flaky parser test\nIt fails on CI." }, ...chat(3).slice(1)];
    await client.compact(task, { policy: "lastn", config: { n: 2, step: 1 }, conversation_id: "ts labels 1", tags: ["ts-night", "ci"], user: "ana é" });
    await client.compact(chat(2), { policy: "lastn", config: { n: 2, step: 1 }, conversation_id: "ts labels 2", title: "Release notes & more", tags: ["ts-night"] });
    const c = await client.conversation("ts labels 1");
    assert.equal(c.title, "Fix the flaky parser test"); // the task's first line
    assert.deepEqual(c.tags, ["ts-night", "ci"]);
    assert.equal(c.user, "ana é");
    assert.ok((c.peak_tokens ?? 0) >= c.tokens);
    const ids = async (o: Parameters<Client["status"]>[0]) => (await client.status(o)).conversations.map((x) => x.id).sort();
    assert.deepEqual(await ids({ tag: "ts-night" }), ["ts labels 1", "ts labels 2"]);
    assert.deepEqual(await ids({ tag: ["ts-night", "ci"] }), ["ts labels 1"]);
    assert.deepEqual(await ids({ user: "ana é", limit: 5 }), ["ts labels 1"]);
    assert.deepEqual(await ids({ q: "notes & MORE" }), ["ts labels 2"]); // characters a URL must escape
    assert.deepEqual(await ids({ q: "no such text anywhere" }), []);
  });

  test("a wrong argument is a TypeError, before any request", async () => {
    const bad: [string, () => Promise<unknown>][] = [
      ["status(5)", () => client.status(5 as never)],
      ["status('a b')", () => client.status("a b" as never)],
      ["status({limit: '2'})", () => client.status({ limit: "2" as never })],
      ["status({limit: 1.5})", () => client.status({ limit: 1.5 })],
      ["status({tag: 3})", () => client.status({ tag: 3 as never })],
      ["status({tags: ...})", () => client.status({ tags: ["x"] } as never)],
      ["conversation(undefined)", () => client.conversation(undefined as never)],
      ["conversation(5)", () => client.conversation(5 as never)],
      ["policy('')", () => client.policy("")],
      ["retryPolicy(null)", () => client.retryPolicy(null as never)],
      ["compact('hi')", () => client.compact("hi" as never)],
      ["compact([], 'sliding')", () => client.compact([], "sliding" as never)],
      ["compactProxied(1)", () => client.compactProxied(1 as never)],
      ["updateConfig([])", () => client.updateConfig([] as never)],
      ["request('GET', '/v1/status?q=a b')", () => client.request("GET", "/v1/status?q=a b")],
      ["request('GET', 'v1/status')", () => client.request("GET", "v1/status")],
    ];
    for (const [name, call] of bad) {
      await assert.rejects(call, (e: unknown) => {
        assert.ok(e instanceof TypeError, `${name}: ${String(e)}`);
        assert.ok(e.message.startsWith("compactd: "), `${name}: ${e.message}`);
        assert.ok(!("code" in e), `${name}: node's error ${String((e as { code?: string }).code)}`);
        return true;
      }, name);
    }
  });

  test("requests", async () => {
    const conv = `ts requests/é ${Date.now()}-${Math.random()}`; // unique: the daemon may outlive one run
    for (const turn of [3, 4, 5]) {
      await client.compact(chat(turn), { policy: "lastn", config: { n: 2, step: 1 }, conversation_id: conv, model: "gpt-4o" });
    }
    const page = await client.requests({ conversation: conv, limit: 2 });
    assert.equal(page.requests.length, 2);
    assert.ok(page.next_cursor);
    const first = page.requests[0]!;
    assert.ok(first.kind === "compact" && first.compacted && first.conversation_id === conv);
    assert.deepEqual(first.pipeline, ["lastn"]);
    const rest = await client.requests({ conversation: conv, limit: 2, cursor: page.next_cursor });
    assert.equal(rest.requests.length, 1);
    assert.equal(rest.next_cursor, undefined);
    assert.equal(rest.money.priced, 0); // /v1/compact has no upstream usage
    assert.ok((await client.requests()).requests.length >= 3);
    await rejectsWith(client.requests({ cursor: "not-a-cursor" }), "bad_request", 400);
  });

  test("config", async () => {
    const doc = await client.config();
    assert.equal(doc.config.limits.max_messages, 10000);
    await rejectsWith(client.updateConfig({ policies: { lastn: { n: 0 } } }), "invalid_config", 400);
    const e = await rejectsWith(client.updateConfig({ limits: { plugin: { max_instances: -3 } } }), "invalid_config", 400);
    assert.ok(e.detail.includes("limits.plugin.max_instances: -3 is out of range (allowed: 1 to 256"), e.detail);
    const up = await client.updateConfig({ log_level: "warn" });
    assert.equal(up.config.log_level, "warn");
    await client.updateConfig({ log_level: null });
    assert.equal((await client.config()).config.log_level, "info");
  });

  test("health, metrics, the OpenAPI document", async () => {
    assert.equal((await client.health()).status, "ok");
    assert.match(await client.metrics(), /compactd_http_requests_total/);
    const doc = (await client.openapi()) as { openapi: string; components: { schemas: Record<string, { enum?: string[]; "x-status"?: Record<string, number> }> } };
    assert.match(doc.openapi, /^3\.1/);
    // The generated ErrorCode type and its statuses are the document's.
    const spec = doc.components.schemas.ErrorCode;
    assert.deepEqual(Object.keys(ERROR_CODES).sort(), [...(spec?.enum ?? [])].sort());
    assert.deepEqual({ ...ERROR_CODES }, spec?.["x-status"]);
  });

  test("raw requests map errors", async () => {
    await rejectsWith(client.request("DELETE", "/v1/config"), "method_not_allowed", 405);
    await rejectsWith(client.request("GET", "/v2/nothing"), "not_found", 404);
    await rejectsWith(client.request("POST", "/v1/compact", { policy: "lastn", mesages: [] }), "invalid_json", 400);
  });
});

describe("connections", () => {
  test("TCP with the token", async () => {
    const c = new Client({ tcp, token });
    try {
      assert.equal((await c.health()).status, "ok");
      assert.equal((await c.compact(chat(3), { policy: "lastn", config: { n: 1, step: 1 } })).messages.length, 3);
    } finally {
      c.close();
    }
    for (const bad of [undefined, "wrong"]) {
      const c = new Client({ tcp, token: bad });
      await rejectsWith(c.health(), "unauthorized", 401);
      c.close();
    }
  });

  test("socket discovery, as the CLI does it", () => {
    assert.equal(defaultSocketPath({ COMPACTD_SOCKET: "/a.sock", XDG_RUNTIME_DIR: "/run/user/7" }), "/a.sock");
    assert.equal(defaultSocketPath({ XDG_RUNTIME_DIR: "/run/user/7", HOME: "/home/u" }), "/run/user/7/compactd.sock");
    assert.equal(defaultSocketPath({ HOME: "/home/u" }), "/home/u/.local/state/compactd/compactd.sock");
    assert.equal(defaultSocketPath({ HOME: "/home/u", XDG_STATE_HOME: "/state" }), "/state/compactd/compactd.sock");
    assert.equal(new Client().socketPath, socketPath);
    assert.throws(() => new Client({ socketPath: "/x.sock", tcp: "127.0.0.1:1" }), TypeError);
  });

  test("an absent daemon", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cd-"));
    for (const c of [new Client({ socketPath: path.join(dir, "none.sock") }), new Client({ tcp: "127.0.0.1:1" })]) {
      await assert.rejects(c.health(), (e: unknown) => e instanceof DaemonUnavailable && e instanceof CompactdError && e.message.includes(c.address));
      c.close();
    }
    fs.rmSync(dir, { recursive: true });
  });

  test("concurrent requests share a client", async () => {
    const results = await Promise.all(
      Array.from({ length: 24 }, (_, i) => client.compact(chat(3 + (i % 3)), { policy: "lastn", config: { n: 2, step: 1 }, conversation_id: `ts-par-${i}` })),
    );
    for (const r of results) assert.equal(r.messages.length, 4);
  });
});
