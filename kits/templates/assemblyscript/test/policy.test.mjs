// Unit tests for __NAME__: node --test, on the built __NAME__.wasm. Each
// case runs through both of the daemon's paths (JSON and the fast path's
// binary request) and checks they agree.
import { test } from "node:test";
import assert from "node:assert/strict";
import { loadPolicy } from "../compactd/testhost.mjs";

const policy = await loadPolicy(new URL("../__NAME__.wasm", import.meta.url));

// A system prompt, the task, then n tool-call units whose outputs have
// three lines each.
function conversation(n, config) {
  const messages = [
    { role: "system", content: "You are an agent." },
    { role: "user", content: "Fix the bug in parse.go" },
  ];
  for (let i = 0; i < n; i++) {
    messages.push({ role: "assistant", content: null, tool_calls: [{ id: `c${i}`, type: "function", function: { name: "bash", arguments: "{}" } }] });
    messages.push({ role: "tool", tool_call_id: `c${i}`, content: `line one of ${i} \u00e9\nline two, long enough to be worth masking\nline three` });
  }
  return { abi: "1.0", config, context: { total_tokens: 0 }, messages };
}

test("describe is JSON", () => {
  const { status, output } = policy.callJSON("describe");
  assert.equal(status, 0);
  assert.equal(JSON.parse(output).name, "__NAME__");
});

test("short conversations are unchanged", () => {
  const { status, result } = policy.compact(conversation(3, { keep_units: 8, mask_units: 24, step: 4 }));
  assert.equal(status, 0);
  assert.equal(result.compacted, false);
  assert.equal(result.messages.length, 8);
});

test("masks and drops", () => {
  // The task and 20 units with keep 4, mask 8, step 4: 17 units are older,
  // 16 leave the verbatim tail; the newest 8 of those are masked, the
  // other 8 dropped but for the task.
  const { status, result } = policy.compact(conversation(20, { keep_units: 4, mask_units: 8, step: 4 }));
  assert.equal(status, 0);
  assert.equal(result.compacted, true);
  assert.deepEqual(result.messages.slice(0, 3), [{ ref: 0 }, { ref: 1 }, { ref: 16 }]);
  assert.equal(result.messages[5].content, "line one of 8 \u00e9 [\u2026 53 bytes masked]");
  assert.equal(result.summary, "dropped 14 messages, masked 8 tool outputs, kept the last 5 units verbatim");
  assert.equal(result.entries_summarized, 22);
});

test("bad config is an error", () => {
  const { status, result } = policy.compact(conversation(2, { keep_units: 0 }));
  assert.equal(status, 1);
  assert.equal(result.code, "invalid_config");
});

test("a truncated fast request is an error", () => {
  const { status, output } = policy.callFast(2, new TextEncoder().encode("CDF1\x05\x00\x00\x00{}"));
  assert.equal(status, 1);
  assert.equal(JSON.parse(output).code, "invalid_request");
});
