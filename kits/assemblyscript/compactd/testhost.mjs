// A compactd host in JavaScript for a policy's unit tests (node --test).
// It loads the built .wasm with the imports compactd provides (the Extism
// kernel, count_tokens, llm_complete and WASI's fd_write), and calls it the
// two ways the daemon does: JSON through the Extism exports, and the binary
// request through the fast-path exports.
import { readFileSync } from "node:fs";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** encodeFast encodes a CompactRequest object (abi/README.md) in the fast
 * path's binary form, as the daemon does (abi/fastwire.go). */
export function encodeFast(req) {
  const parts = [];
  const u32 = (v) => {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, v >>> 0, true);
    parts.push(b);
  };
  const str = (s) => {
    const b = typeof s === "string" ? enc.encode(s) : s;
    u32(b.length);
    parts.push(b);
  };
  const ctx = req.context || {};
  parts.push(enc.encode("CDF1"));
  str(JSON.stringify(req.config || {}));
  str(ctx.model || "");
  str(ctx.encoding || "");
  u32(ctx.context_window || 0);
  u32(ctx.total_tokens || 0);
  str(ctx.conversation_id || "");
  str(ctx.state === undefined || ctx.state === null ? "" : JSON.stringify(ctx.state));
  u32(req.messages.length);
  for (const m of req.messages) {
    str(m.role);
    u32(m.tokens || 0);
    if (m.content === null || m.content === undefined) {
      parts.push(Uint8Array.of(0));
      str("");
    } else if (typeof m.content === "string") {
      parts.push(Uint8Array.of(1));
      str(m.content);
    } else {
      parts.push(Uint8Array.of(2));
      str(JSON.stringify(m.content));
    }
    str(m.name || "");
    str(m.tool_call_id || "");
    const calls = m.tool_calls || [];
    u32(calls.length);
    for (const c of calls) {
      str(c.id || "");
      str(c.type || "");
      str((c.function && c.function.name) || "");
      str((c.function && c.function.arguments) || "");
    }
  }
  if (ctx.compact) {
    parts.push(Uint8Array.of(1));
    str(ctx.compact.reason || "");
    u32(ctx.compact.target_tokens || 0);
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** loadPolicy instantiates a policy module. Options: countTokens(text),
 * llm(requestJSON) → responseJSON. */
export async function loadPolicy(path, options = {}) {
  const host = new TestHost(options);
  const { instance } = await WebAssembly.instantiate(readFileSync(path), host.imports());
  host.instance = instance;
  if (instance.exports._initialize) instance.exports._initialize();
  return host;
}

class TestHost {
  constructor(options) {
    this.options = options;
    this.blocks = new Map(); // kernel offset → Uint8Array
    this.next = 8;
    this.input = new Uint8Array(0);
    this.output = null;
    this.error = null;
    this.logs = [];
    this.stderr = "";
  }

  memory() {
    return new Uint8Array(this.instance.exports.memory.buffer);
  }

  block(off) {
    const b = this.blocks.get(Number(off));
    if (!b) throw new Error(`extism kernel: no block at ${off}`);
    return b;
  }

  put(bytes) {
    const off = this.next;
    this.next += bytes.length + 8;
    this.blocks.set(off, bytes);
    return BigInt(off);
  }

  imports() {
    const h = this;
    const u64 = (b, at) => new DataView(b.buffer, b.byteOffset).getBigUint64(at, true);
    const locate = (off) => {
      for (const [start, b] of h.blocks) if (off >= start && off < start + b.length) return [b, off - start];
      throw new Error(`extism kernel: offset ${off} is outside every block`);
    };
    const log = (level) => (off) => {
      h.logs.push(`${level} ${dec.decode(h.block(off))}`);
      h.blocks.delete(Number(off));
    };
    return {
      "extism:host/env": {
        input_length: () => BigInt(h.input.length),
        input_load_u64: (off) => {
          const b = new Uint8Array(8);
          b.set(h.input.subarray(Number(off), Number(off) + 8));
          return u64(b, 0);
        },
        input_load_u8: (off) => h.input[Number(off)],
        alloc: (n) => h.put(new Uint8Array(Number(n))),
        free: (off) => void h.blocks.delete(Number(off)),
        length: (off) => BigInt(h.block(off).length),
        load_u64: (off) => {
          const [b, at] = locate(Number(off));
          return u64(b, at);
        },
        load_u8: (off) => {
          const [b, at] = locate(Number(off));
          return b[at];
        },
        store_u64: (off, v) => {
          const [b, at] = locate(Number(off));
          new DataView(b.buffer, b.byteOffset).setBigUint64(at, BigInt.asUintN(64, v), true);
        },
        store_u8: (off, v) => {
          const [b, at] = locate(Number(off));
          b[at] = v;
        },
        output_set: (off, n) => {
          h.output = h.block(off).subarray(0, Number(n));
        },
        error_set: (off) => {
          h.error = h.block(off);
        },
        log_debug: log("debug"),
        log_info: log("info"),
        log_warn: log("warn"),
        log_error: log("error"),
      },
      "extism:host/user": {
        count_tokens: (off) => {
          const text = dec.decode(h.block(off));
          return BigInt(h.options.countTokens ? h.options.countTokens(text) : Math.ceil(h.block(off).length / 4));
        },
        llm_complete: (off) => {
          const req = dec.decode(h.block(off));
          const res = h.options.llm
            ? h.options.llm(req)
            : '{"error":{"code":"no_provider","message":"no LLM provider configured"},"usage":{"input_tokens":0,"output_tokens":0}}';
          return h.put(enc.encode(res));
        },
      },
      wasi_snapshot_preview1: {
        fd_write: (fd, iovs, n, written) => {
          const view = new DataView(h.instance.exports.memory.buffer);
          let total = 0;
          for (let i = 0; i < n; i++) {
            const p = view.getUint32(iovs + 8 * i, true);
            const len = view.getUint32(iovs + 8 * i + 4, true);
            if (fd === 2) h.stderr += dec.decode(h.memory().subarray(p, p + len));
            total += len;
          }
          view.setUint32(written, total, true);
          return 0;
        },
      },
    };
  }

  /** callJSON runs an Extism export ("describe", "compact") on a JSON
   * string: {status, output} with output the JSON text (or error body). */
  callJSON(name, input = "") {
    this.input = enc.encode(input);
    this.output = this.error = null;
    this.blocks.clear();
    const status = this.instance.exports[name]();
    const out = status === 0 ? this.output : this.error;
    return { status, output: out ? dec.decode(out) : "" };
  }

  /** callFast runs a fast-path function (1 describe, 2 compact) on binary
   * input: {status, output}. */
  callFast(fn, input = new Uint8Array(0)) {
    const ex = this.instance.exports;
    const ptr = ex.compactd_fast_v1_alloc(input.length) >>> 0;
    this.memory().set(input, ptr);
    const r = BigInt.asUintN(64, BigInt(ex.compactd_fast_v1_call(fn, ptr, input.length)));
    const outPtr = Number(r >> 32n);
    const outLen = Number(r & 0xffffffffn);
    const out = this.memory().subarray(outPtr, outPtr + outLen);
    return { status: out[0], output: dec.decode(out.subarray(1)) };
  }

  /** compact runs compact on a request object through both paths, checks
   * that they agree, and returns {status, result} (result parsed). */
  compact(req) {
    const json = this.callJSON("compact", JSON.stringify(req));
    const fast = this.callFast(2, encodeFast(req));
    if (json.status !== fast.status || json.output !== fast.output) {
      throw new Error(`the fast path disagrees:\n  json: ${json.output}\n  fast: ${fast.output}`);
    }
    return { status: json.status, result: JSON.parse(json.output) };
  }
}
