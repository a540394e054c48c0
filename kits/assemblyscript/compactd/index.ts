// compactd: write a compactd compaction policy in AssemblyScript (plugin
// ABI 1.0).
//
// A policy is a function from a Request to a CompactResult:
//
//   import { register, Request, CompactResult } from "../compactd";
//   export * from "../compactd/exports";
//
//   function keepAll(req: Request): CompactResult {
//     return CompactResult.unchanged(req.messages.length, "kept everything");
//   }
//   register(DESCRIPTION, keepAll);
//
// `compactd/exports` defines every export the host looks for: describe and
// compact on the Extism path (JSON in, JSON out), and compactd_fast_v1_alloc
// / compactd_fast_v1_call on the fast path, where the host writes the
// request in binary straight into the module's memory (abi/README.md, "The
// fast path"). Both give the same result.
//
// AssemblyScript has no exceptions: a policy reports a failure by returning
// CompactResult.fail(code, message); config readers record their error on
// the request (req.error) for the policy to return. An abort (a failed
// assertion, an out-of-range index) traps the call; the kit's abort handler
// writes its message to stderr first, so the host's error names it.

import { JSON } from "assemblyscript-json/assembly";

export { JSON };

// ---- Errors ------------------------------------------------------------------

export namespace Code {
  export const InvalidRequest = "invalid_request";
  export const InvalidConfig = "invalid_config";
  export const LLMUnavailable = "llm_unavailable";
  export const Internal = "internal";
}

/** A failed call's code and message (abi/README.md, "Errors"). */
export class PolicyError {
  constructor(public code: string, public message: string) {}

  toJSON(): string {
    return '{"code":' + jsonString(this.code) + ',"message":' + jsonString(this.message) + "}";
  }
}

// ---- JSON writing ------------------------------------------------------------

/** jsonString quotes s as a JSON string (quotes, backslashes and control
 * characters escaped; other characters kept as they are). */
export function jsonString(s: string): string {
  let clean = true;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c == 0x22 || c == 0x5c) {
      clean = false;
      break;
    }
  }
  if (clean) return '"' + s + '"';
  const parts = new Array<string>();
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c != 0x22 && c != 0x5c) continue;
    parts.push(s.substring(start, i));
    start = i + 1;
    if (c == 0x22) parts.push('\\"');
    else if (c == 0x5c) parts.push("\\\\");
    else if (c == 0x0a) parts.push("\\n");
    else if (c == 0x0d) parts.push("\\r");
    else if (c == 0x09) parts.push("\\t");
    else parts.push("\\u00" + (c < 0x10 ? "0" : "") + c.toString(16));
  }
  parts.push(s.substring(start));
  return '"' + parts.join("") + '"';
}

/** stringify writes a parsed JSON value back as JSON. */
export function stringify(v: JSON.Value): string {
  if (v.isString) return jsonString((<JSON.Str>v).valueOf());
  if (v.isArr) {
    const items = (<JSON.Arr>v).valueOf();
    const parts = new Array<string>(items.length);
    for (let i = 0; i < items.length; i++) parts[i] = stringify(items[i]);
    return "[" + parts.join(",") + "]";
  }
  if (v.isObj) {
    const obj = <JSON.Obj>v;
    const keys = obj.keys;
    const parts = new Array<string>(keys.length);
    for (let i = 0; i < keys.length; i++) parts[i] = jsonString(keys[i]) + ":" + stringify(obj.get(keys[i])!);
    return "{" + parts.join(",") + "}";
  }
  return v.stringify(); // numbers, booleans, null
}

/** utf8Length is the number of bytes s takes in UTF-8. */
export function utf8Length(s: string): i32 {
  return String.UTF8.byteLength(s);
}

/** utf8Encode encodes s as UTF-8; a lone surrogate becomes U+FFFD. */
export function utf8Encode(s: string): ArrayBuffer {
  return String.UTF8.encode(s, false, String.UTF8.ErrorMode.REPLACE);
}

// ---- The request -------------------------------------------------------------

export class ToolCall {
  constructor(public id: string, public type: string, public name: string, public arguments: string) {}
}

export const CONTENT_NULL: u8 = 0;
export const CONTENT_TEXT: u8 = 1;
export const CONTENT_JSON: u8 = 2;

/** An input message. Its content is decoded from UTF-8 only when read. */
export class Message {
  role: string = "";
  tokens: u32 = 0;
  /** CONTENT_NULL, CONTENT_TEXT (a string) or CONTENT_JSON (content parts). */
  contentKind: u8 = CONTENT_NULL;
  name: string = "";
  toolCallId: string = "";
  toolCalls: ToolCall[] = [];

  // Undecoded content: bytes [off, off+len) of buf; or the decoded string.
  private buf: ArrayBuffer | null = null;
  private off: i32 = 0;
  private len: i32 = 0;
  private decoded: string | null = null;

  setContentBytes(buf: ArrayBuffer, off: i32, len: i32): void {
    this.buf = buf;
    this.off = off;
    this.len = len;
    this.decoded = null;
  }

  setContent(s: string): void {
    this.buf = null;
    this.decoded = s;
  }

  /** content is the text of a string content, or the JSON of content
   * parts; "" for null. */
  get content(): string {
    if (this.decoded == null) {
      const b = this.buf;
      this.decoded = b == null ? "" : String.UTF8.decodeUnsafe(changetype<usize>(b) + <usize>this.off, <usize>this.len);
    }
    return this.decoded!;
  }

  /** The text of a string content; null for null content or parts. */
  get text(): string | null {
    return this.contentKind == CONTENT_TEXT ? this.content : null;
  }

  /** The content's length in UTF-8 bytes, without decoding it. */
  get contentBytes(): i32 {
    if (this.buf != null) return this.len;
    return this.decoded == null ? 0 : utf8Length(this.decoded!);
  }

  isSystem(): bool {
    return this.role == "system" || this.role == "developer";
  }
}

/** Messages [start, end) kept or dropped together: a message that is not a
 * tool result, and the tool results after it. */
export class Unit {
  constructor(public start: i32, public end: i32) {}
}

export class Request {
  /** The resolved config object, JSON. */
  config: string = "{}";
  model: string = "";
  encoding: string = "";
  contextWindow: u32 = 0;
  totalTokens: u32 = 0;
  conversationId: string = "";
  /** What the plugin returned as state last time, JSON; null the first time. */
  state: string | null = null;
  /** context.compact (ABI 1.1): the host has decided to compact. When
   * hasDecision is set, the policy compacts now, whatever its own
   * thresholds say, to fit targetTokens (0: none given) as well as it can.
   * On the fast path the host sends it only to a plugin whose description
   * says "decision": true. */
  hasDecision: bool = false;
  /** Why the host decided: usage, preflight, trigger_tokens, overflow, prepare or manual. */
  decisionReason: string = "";
  /** The token budget the result should fit; 0 when none is given. */
  targetTokens: u32 = 0;
  messages: Message[] = [];
  /** The first error a config reader met; return it with CompactResult.failed. */
  error: PolicyError | null = null;

  private parsedConfig: JSON.Obj | null = null;

  /** configValue returns the config key's parsed value, or null. */
  configValue(key: string): JSON.Value | null {
    if (this.parsedConfig == null) {
      const v = parseJSON(this.config);
      if (v == null || !v.isObj) {
        this.fail(Code.InvalidConfig, "config is not a JSON object");
        return null;
      }
      this.parsedConfig = <JSON.Obj>v;
    }
    const v = this.parsedConfig!.get(key);
    return v == null || v.isNull ? null : v;
  }

  /** configInt reads an integer config key between min and max; def when
   * absent. On a bad value it records req.error and returns def. */
  configInt(key: string, min: i64, max: i64, def: i64): i64 {
    const v = this.configValue(key);
    if (v == null) return def;
    let n: i64 = 0;
    if (v.isInteger) {
      n = (<JSON.Integer>v).valueOf();
    } else if (v.isFloat && Math.floor((<JSON.Float>v).valueOf()) == (<JSON.Float>v).valueOf() && Math.abs((<JSON.Float>v).valueOf()) < 9e18) {
      n = <i64>(<JSON.Float>v).valueOf();
    } else {
      this.fail(Code.InvalidConfig, "config: " + key + " must be an integer");
      return def;
    }
    if (n < min || n > max) {
      this.fail(Code.InvalidConfig, "config: " + key + " must be between " + min.toString() + " and " + max.toString());
      return def;
    }
    return n;
  }

  /** configBool reads a boolean config key; def when absent. */
  configBool(key: string, def: bool): bool {
    const v = this.configValue(key);
    if (v == null) return def;
    if (!v.isBool) {
      this.fail(Code.InvalidConfig, "config: " + key + " must be true or false");
      return def;
    }
    return (<JSON.Bool>v).valueOf();
  }

  fail(code: string, message: string): void {
    if (this.error == null) this.error = new PolicyError(code, message);
  }

  /** How many messages at the start are system or developer messages:
   * results keep them first, as refs. */
  leadingSystem(): i32 {
    let n = 0;
    while (n < this.messages.length && this.messages[n].isSystem()) n++;
    return n;
  }

  /** units splits messages [from, end) into units. */
  units(from: i32): Unit[] {
    const out = new Array<Unit>();
    for (let i = from; i < this.messages.length; i++) {
      if (out.length > 0 && this.messages[i].role == "tool") {
        out[out.length - 1].end = i + 1;
        continue;
      }
      out.push(new Unit(i, i + 1));
    }
    return out;
  }
}

/** parseJSON parses text, or returns null when it is empty. */
export function parseJSON(text: string): JSON.Value | null {
  if (text.length == 0) return null;
  return JSON.parse(text);
}

// ---- Decoding requests -------------------------------------------------------

class FastReader {
  off: i32 = 4;
  bad: bool = false;
  constructor(public buf: ArrayBuffer, public base: usize, public len: i32) {}

  u8(): u8 {
    if (this.len - this.off < 1) {
      this.bad = true;
      return 0;
    }
    const v = load<u8>(this.base + <usize>this.off);
    this.off++;
    return v;
  }
  u32(): u32 {
    if (this.len - this.off < 4) {
      this.bad = true;
      return 0;
    }
    const v = load<u32>(this.base + <usize>this.off);
    this.off += 4;
    return v;
  }
  /** span reads a string's length and skips it; returns its offset. */
  span(): i32 {
    const n = this.u32();
    if (this.bad || <u32>(this.len - this.off) < n) {
      this.bad = true;
      return -1;
    }
    const at = this.off;
    this.off += <i32>n;
    return at;
  }
  str(): string {
    const at = this.span();
    if (this.bad) return "";
    const n = this.off - at;
    return n == 0 ? "" : String.UTF8.decodeUnsafe(this.base + <usize>at, <usize>n);
  }
}

/** decodeFast decodes the fast path's binary request (abi/fastwire.go) in
 * the first len bytes of buf. Contents stay undecoded until read. */
export function decodeFast(buf: ArrayBuffer, len: i32, req: Request): PolicyError | null {
  const base = changetype<usize>(buf);
  if (len < 4 || load<u32>(base) != 0x31464443) return new PolicyError(Code.InvalidRequest, "fast request: bad magic"); // "CDF1"
  const r = new FastReader(buf, base, len);
  req.config = r.str();
  req.model = r.str();
  req.encoding = r.str();
  req.contextWindow = r.u32();
  req.totalTokens = r.u32();
  req.conversationId = r.str();
  const state = r.str();
  req.state = state.length > 0 ? state : null;
  const count = r.u32();
  if (r.bad || count > <u32>((len - r.off) / 25 + 1)) return new PolicyError(Code.InvalidRequest, "fast request: truncated");
  const msgs = new Array<Message>(<i32>count);
  for (let i = 0; i < <i32>count && !r.bad; i++) {
    const m = new Message();
    m.role = r.str();
    m.tokens = r.u32();
    m.contentKind = r.u8();
    if (m.contentKind > CONTENT_JSON) r.bad = true;
    const at = r.span();
    if (!r.bad) m.setContentBytes(buf, at, r.off - at);
    m.name = r.str();
    m.toolCallId = r.str();
    const calls = r.u32();
    if (r.bad || calls > <u32>((len - r.off) / 16 + 1)) {
      r.bad = true;
      break;
    }
    for (let k: u32 = 0; k < calls; k++) m.toolCalls.push(new ToolCall(r.str(), r.str(), r.str(), r.str()));
    msgs[i] = m;
  }
  // The host's decision, after the messages (ABI 1.1).
  if (!r.bad && r.off < len && r.u8() == 1) {
    req.decisionReason = r.str();
    req.targetTokens = r.u32();
    req.hasDecision = !r.bad;
  }
  if (r.bad || r.off != len) return new PolicyError(Code.InvalidRequest, "fast request: malformed");
  req.messages = msgs;
  return null;
}

function strField(o: JSON.Obj, key: string): string {
  const v = o.get(key);
  return v != null && v.isString ? (<JSON.Str>v).valueOf() : "";
}

function intField(o: JSON.Obj, key: string): u32 {
  const v = o.get(key);
  if (v == null) return 0;
  if (v.isInteger) return <u32>(<JSON.Integer>v).valueOf();
  if (v.isFloat) return <u32>(<JSON.Float>v).valueOf();
  return 0;
}

/** decodeJSON decodes the Extism path's JSON request. A request that is
 * not JSON aborts (the JSON library's way): the host reports a trap. */
export function decodeJSON(input: Uint8Array, req: Request): PolicyError | null {
  const doc = JSON.parse(input);
  if (!doc.isObj) return new PolicyError(Code.InvalidRequest, "the request is not a JSON object");
  const o = <JSON.Obj>doc;
  const cfg = o.get("config");
  req.config = cfg == null || cfg.isNull ? "{}" : stringify(cfg);
  const ctxv = o.get("context");
  if (ctxv != null && ctxv.isObj) {
    const ctx = <JSON.Obj>ctxv;
    req.model = strField(ctx, "model");
    req.encoding = strField(ctx, "encoding");
    req.contextWindow = intField(ctx, "context_window");
    req.totalTokens = intField(ctx, "total_tokens");
    req.conversationId = strField(ctx, "conversation_id");
    const st = ctx.get("state");
    req.state = st == null || st.isNull ? null : stringify(st);
    const dv = ctx.get("compact");
    if (dv != null && dv.isObj) {
      req.hasDecision = true;
      req.decisionReason = strField(<JSON.Obj>dv, "reason");
      req.targetTokens = intField(<JSON.Obj>dv, "target_tokens");
    }
  }
  const mv = o.get("messages");
  if (mv == null || !mv.isArr) return new PolicyError(Code.InvalidRequest, "the request has no messages array");
  const items = (<JSON.Arr>mv).valueOf();
  const msgs = new Array<Message>(items.length);
  for (let i = 0; i < items.length; i++) {
    if (!items[i].isObj) return new PolicyError(Code.InvalidRequest, "a message is not an object");
    const mo = <JSON.Obj>items[i];
    const m = new Message();
    m.role = strField(mo, "role");
    if (m.role.length == 0) return new PolicyError(Code.InvalidRequest, "a message has no role");
    m.tokens = intField(mo, "tokens");
    const c = mo.get("content");
    if (c != null && c.isString) {
      m.contentKind = CONTENT_TEXT;
      m.setContent((<JSON.Str>c).valueOf());
    } else if (c != null && !c.isNull) {
      m.contentKind = CONTENT_JSON;
      m.setContent(stringify(c));
    }
    m.name = strField(mo, "name");
    m.toolCallId = strField(mo, "tool_call_id");
    const calls = mo.get("tool_calls");
    if (calls != null && calls.isArr) {
      const cs = (<JSON.Arr>calls).valueOf();
      for (let k = 0; k < cs.length; k++) {
        if (!cs[k].isObj) continue;
        const co = <JSON.Obj>cs[k];
        const fv = co.get("function");
        const f = fv != null && fv.isObj ? <JSON.Obj>fv : new JSON.Obj();
        m.toolCalls.push(new ToolCall(strField(co, "id"), strField(co, "type"), strField(f, "name"), strField(f, "arguments")));
      }
    }
    msgs[i] = m;
  }
  req.messages = msgs;
  return null;
}

// ---- The result --------------------------------------------------------------

/** The output of compact. Add items in order with keep (an input message,
 * byte for byte) and add (a new message). */
export class CompactResult {
  items: string[] = [];
  compacted: bool = false;
  summary: string = "";
  entriesSummarized: i32 = 0;
  rewritten: i32[] = [];
  warnings: string[] = [];
  /** The conversation's new state, JSON; null keeps the old one. */
  state: string | null = null;
  /** Set by fail: the call fails with this error. */
  error: PolicyError | null = null;

  /** A result that keeps all n input messages. */
  static unchanged(n: i32, summary: string): CompactResult {
    const r = new CompactResult();
    for (let i = 0; i < n; i++) r.keep(i);
    r.summary = summary;
    return r;
  }

  /** A failed call: return CompactResult.fail(Code.InvalidConfig, "..."). */
  static fail(code: string, message: string): CompactResult {
    const r = new CompactResult();
    r.error = new PolicyError(code, message);
    return r;
  }

  /** A failed call with an error a config reader recorded. */
  static failed(err: PolicyError): CompactResult {
    const r = new CompactResult();
    r.error = err;
    return r;
  }

  /** keep appends input message i, unchanged. */
  keep(i: i32): void {
    this.items.push('{"ref":' + i.toString() + "}");
  }

  /** add appends a new message with text content; toolCallId and name may
   * be empty. A tool message must stay where its call is. */
  add(role: string, content: string, toolCallId: string = "", name: string = ""): void {
    let s = '{"role":' + jsonString(role) + ',"content":' + jsonString(content);
    if (toolCallId.length > 0) s += ',"tool_call_id":' + jsonString(toolCallId);
    if (name.length > 0) s += ',"name":' + jsonString(name);
    this.items.push(s + "}");
  }

  toJSON(): string {
    let s = '{"messages":[' + this.items.join(",") + '],"compacted":' + (this.compacted ? "true" : "false");
    s += ',"summary":' + jsonString(this.summary) + ',"entries_summarized":' + this.entriesSummarized.toString();
    if (this.rewritten.length > 0) s += ',"rewritten":[' + this.rewritten.join(",") + "]";
    if (this.warnings.length > 0) {
      const w = new Array<string>(this.warnings.length);
      for (let i = 0; i < w.length; i++) w[i] = jsonString(this.warnings[i]);
      s += ',"warnings":[' + w.join(",") + "]";
    }
    if (this.state != null) s += ',"state":' + this.state!;
    return s + "}";
  }
}

// ---- Registration --------------------------------------------------------------

/** A policy's compact function. */
export type CompactFn = (req: Request) => CompactResult;

let registeredDescription: string = "";
let registeredCompact: CompactFn | null = null;

/** register makes description (the describe JSON) and compact the plugin's
 * policy. Call it once, at the top level of the policy's file. */
export function register(description: string, compact: CompactFn): void {
  registeredDescription = description;
  registeredCompact = compact;
}

export function registeredDescribe(): string {
  return registeredDescription;
}

/** runCompact runs the registered policy on a decoded request: the JSON
 * result, or an error. */
export function runCompact(req: Request): CompactResult {
  const f = registeredCompact;
  if (f == null) return CompactResult.fail(Code.Internal, "no policy registered (call register at the top level)");
  if (req.messages.length == 0) return CompactResult.fail(Code.InvalidRequest, "the request has no messages");
  return f(req);
}

// ---- Host functions ------------------------------------------------------------

// @ts-ignore: decorator
@external("extism:host/env", "alloc")
declare function extismAlloc(n: u64): u64;
// @ts-ignore: decorator
@external("extism:host/env", "free")
declare function extismFree(off: u64): void;
// @ts-ignore: decorator
@external("extism:host/env", "length")
declare function extismLength(off: u64): u64;
// @ts-ignore: decorator
@external("extism:host/env", "load_u64")
declare function extismLoadU64(off: u64): u64;
// @ts-ignore: decorator
@external("extism:host/env", "load_u8")
declare function extismLoadU8(off: u64): u32;
// @ts-ignore: decorator
@external("extism:host/env", "store_u64")
declare function extismStoreU64(off: u64, v: u64): void;
// @ts-ignore: decorator
@external("extism:host/env", "store_u8")
declare function extismStoreU8(off: u64, v: u32): void;
// @ts-ignore: decorator
@external("extism:host/env", "log_debug")
declare function extismLogDebug(off: u64): void;
// @ts-ignore: decorator
@external("extism:host/env", "log_info")
declare function extismLogInfo(off: u64): void;
// @ts-ignore: decorator
@external("extism:host/env", "log_warn")
declare function extismLogWarn(off: u64): void;
// @ts-ignore: decorator
@external("extism:host/env", "log_error")
declare function extismLogError(off: u64): void;
// @ts-ignore: decorator
@external("extism:host/user", "count_tokens")
declare function hostCountTokens(off: u64): u64;
// @ts-ignore: decorator
@external("extism:host/user", "llm_complete")
declare function hostLLMComplete(off: u64): u64;

/** toKernel copies len bytes at ptr into a new Extism kernel block. */
export function toKernel(ptr: usize, len: i32): u64 {
  const off = extismAlloc(<u64>len);
  if (off == 0) return 0;
  let i = 0;
  for (; i + 8 <= len; i += 8) extismStoreU64(off + <u64>i, load<u64>(ptr + <usize>i));
  for (; i < len; i++) extismStoreU8(off + <u64>i, <u32>load<u8>(ptr + <usize>i));
  return off;
}

export function stringToKernel(s: string): u64 {
  const b = utf8Encode(s);
  return toKernel(changetype<usize>(b), b.byteLength);
}

function kernelToString(off: u64): string {
  const n = <i32>extismLength(off);
  const b = new ArrayBuffer(n);
  const p = changetype<usize>(b);
  let i = 0;
  for (; i + 8 <= n; i += 8) store<u64>(p + <usize>i, extismLoadU64(off + <u64>i));
  for (; i < n; i++) store<u8>(p + <usize>i, <u8>extismLoadU8(off + <u64>i));
  return String.UTF8.decode(b);
}

/** countTokens returns text's token count with the request's tokenizer. */
export function countTokens(text: string): u64 {
  if (text.length == 0) return 0;
  const off = stringToKernel(text);
  const n = hostCountTokens(off);
  extismFree(off);
  return n;
}

/** llmComplete sends an LLMRequest (JSON) through the host's LLM provider
 * and returns the LLMResponse JSON; a failed call is an answer with an
 * "error" object. */
export function llmComplete(requestJSON: string): string {
  const off = stringToKernel(requestJSON);
  const res = hostLLMComplete(off);
  extismFree(off);
  if (res == 0) return '{"error":{"code":"provider_error","message":"llm_complete returned nothing"}}';
  const out = kernelToString(res);
  extismFree(res);
  return out;
}

export enum Level {
  Debug,
  Info,
  Warn,
  Error,
}

/** log writes msg to the plugin's log on the host (correct UTF-8). */
export function log(level: Level, msg: string): void {
  const off = stringToKernel(msg); // the host frees log blocks
  if (off == 0) return;
  if (level == Level.Debug) extismLogDebug(off);
  else if (level == Level.Warn) extismLogWarn(off);
  else if (level == Level.Error) extismLogError(off);
  else extismLogInfo(off);
}
