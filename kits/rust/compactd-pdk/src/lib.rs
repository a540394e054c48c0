//! Write compactd compaction policies in Rust (plugin ABI 1.0).
//!
//! A policy is a plain function from a [`Request`] to a [`CompactResult`]:
//!
//! ```ignore
//! use compactd_pdk::{compactd_policy, CompactResult, Error, Host, Request};
//!
//! const DESCRIPTION: &str = r#"{"abi":"1.0","name":"keep-all","version":"0.1.0"}"#;
//!
//! fn compact(_host: &dyn Host, req: &Request) -> Result<CompactResult, Error> {
//!     Ok(CompactResult::unchanged(req.messages.len(), "kept everything"))
//! }
//!
//! compactd_policy!(DESCRIPTION, compact);
//! ```
//!
//! `compactd_policy!` defines every export the host looks for: `describe`
//! and `compact` on the Extism path (JSON in, JSON out) and
//! `compactd_fast_v1_alloc` / `compactd_fast_v1_call` on the fast path,
//! where the host writes the request in binary straight into the module's
//! memory (abi/README.md, "The fast path"). Both give the same result.
//!
//! Build with Debian's toolchain for `wasm32-wasi`
//! (`/usr/bin/cargo build --release --target wasm32-wasi`). The same code
//! builds natively, so `cargo test` tests a policy with a [`TestHost`].
//!
//! A panic traps the call: the host reports the panic message (it arrives
//! on stderr) and returns the caller's conversation unchanged.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

pub use serde_json;

/// The ABI version this crate implements.
pub const ABI_VERSION: &str = "1.0";

// ---- The request -----------------------------------------------------------

/// A message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content<'a> {
    /// `null` (an assistant message that only makes tool calls).
    Null,
    /// A string: the decoded text.
    Text(Cow<'a, str>),
    /// An array of content parts, as JSON text.
    Json(Cow<'a, str>),
}

impl<'a> Content<'a> {
    /// The text of a string content; `None` for null or parts.
    pub fn text(&self) -> Option<&str> {
        match self {
            Content::Text(t) => Some(t),
            _ => None,
        }
    }
}

/// One function call of an assistant message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall<'a> {
    pub id: Cow<'a, str>,
    pub kind: Cow<'a, str>,
    pub name: Cow<'a, str>,
    /// The arguments JSON text the model produced.
    pub arguments: Cow<'a, str>,
}

/// An input message. `tokens` is the host's count for the whole message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    pub role: Cow<'a, str>,
    pub tokens: u32,
    pub content: Content<'a>,
    /// Empty when absent.
    pub name: Cow<'a, str>,
    /// Empty when absent.
    pub tool_call_id: Cow<'a, str>,
    pub tool_calls: Vec<ToolCall<'a>>,
}

impl<'a> Message<'a> {
    /// Whether the message is a system or developer message.
    pub fn is_system(&self) -> bool {
        self.role == "system" || self.role == "developer"
    }
}

/// A compact request: the conversation, the resolved config and context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The config object, JSON (every key of the plugin's defaults is set).
    pub config: Cow<'a, str>,
    pub model: Cow<'a, str>,
    pub encoding: Cow<'a, str>,
    pub context_window: u32,
    pub total_tokens: u32,
    pub conversation_id: Cow<'a, str>,
    /// What the plugin returned as `state` last time, JSON; `None` the first time.
    pub state: Option<Cow<'a, str>>,
    /// `context.compact` (ABI 1.1): the host has decided to compact. When
    /// set, the policy compacts now, whatever its own thresholds say, to
    /// fit `target_tokens` as well as it can. On the fast path the host
    /// sends it only to a plugin whose description says `"decision": true`.
    pub decision: Option<Decision<'a>>,
    pub messages: Vec<Message<'a>>,
}

/// The host's decision to compact (`context.compact`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'a> {
    /// Why: usage, preflight, trigger_tokens, overflow, prepare or manual.
    pub reason: Cow<'a, str>,
    /// The token budget the result should fit; 0 when none is given.
    pub target_tokens: u32,
}

impl<'a> Request<'a> {
    /// The config as a JSON value (an empty object when there is none).
    pub fn config_value(&self) -> Result<serde_json::Value, Error> {
        if self.config.trim().is_empty() {
            return Ok(serde_json::Value::Object(Default::default()));
        }
        let v: serde_json::Value = serde_json::from_str(&self.config)
            .map_err(|e| Error::invalid_config(format!("config: {}", e)))?;
        if !v.is_object() {
            return Err(Error::invalid_config("config is not an object"));
        }
        Ok(v)
    }

    /// Reads the integer config key, between min and max; `default` when
    /// the key is absent.
    pub fn config_int(&self, key: &str, min: i64, max: i64, default: i64) -> Result<i64, Error> {
        let cfg = self.config_value()?;
        match cfg.get(key) {
            None | Some(serde_json::Value::Null) => Ok(default),
            Some(v) => {
                let n = json_int(v).ok_or_else(|| Error::invalid_config(format!("config: {} must be an integer", key)))?;
                if n < min || n > max {
                    return Err(Error::invalid_config(format!("config: {} must be between {} and {}", key, min, max)));
                }
                Ok(n)
            }
        }
    }

    /// How many messages at the start are system or developer messages:
    /// results keep them first, as refs.
    pub fn leading_system(&self) -> usize {
        self.messages.iter().take_while(|m| m.is_system()).count()
    }

    /// Splits messages `from..` into units: a message that is not a tool
    /// result and the tool results after it, kept or dropped together.
    pub fn units(&self, from: usize) -> Vec<std::ops::Range<usize>> {
        let mut units: Vec<std::ops::Range<usize>> = Vec::new();
        for i in from..self.messages.len() {
            if self.messages[i].role == "tool" {
                if let Some(last) = units.last_mut() {
                    last.end = i + 1;
                    continue;
                }
            }
            units.push(i..i + 1);
        }
        units
    }
}

/// An integer in JSON Schema's sense: 8, 8.0 and 0.8e1 are integers.
fn json_int(v: &serde_json::Value) -> Option<i64> {
    if let Some(n) = v.as_i64() {
        return Some(n);
    }
    let f = v.as_f64()?;
    if f.fract() == 0.0 && f >= -9.2e18 && f <= 9.2e18 {
        Some(f as i64)
    } else {
        None
    }
}

// ---- Errors ----------------------------------------------------------------

/// A failed call: its code and message become the error body the host
/// reports (abi/README.md, "Errors").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: String,
    pub message: String,
}

impl Error {
    pub fn new(code: &str, message: impl Into<String>) -> Error {
        Error { code: code.to_string(), message: message.into() }
    }
    pub fn invalid_request(message: impl Into<String>) -> Error {
        Error::new("invalid_request", message)
    }
    pub fn invalid_config(message: impl Into<String>) -> Error {
        Error::new("invalid_config", message)
    }
    pub fn llm_unavailable(message: impl Into<String>) -> Error {
        Error::new("llm_unavailable", message)
    }
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new("internal", message)
    }

    /// The JSON error body.
    pub fn to_json(&self) -> String {
        serde_json::json!({"code": self.code, "message": self.message}).to_string()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

// ---- The result ------------------------------------------------------------

/// A new message a policy writes into the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    pub role: String,
    pub content: String,
    /// Required for a tool message (its call's id); empty otherwise.
    pub tool_call_id: String,
    pub name: String,
}

/// One item of a result: an input message kept byte for byte, or a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Ref(usize),
    New(NewMessage),
}

/// The output of compact.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactResult {
    pub messages: Vec<Item>,
    pub compacted: bool,
    pub summary: String,
    pub entries_summarized: usize,
    pub rewritten: Vec<usize>,
    /// The conversation's new state (any JSON); `None` keeps the old one.
    pub state: Option<serde_json::Value>,
    pub warnings: Vec<String>,
}

impl CompactResult {
    /// A result that keeps all `n` input messages.
    pub fn unchanged(n: usize, summary: impl Into<String>) -> CompactResult {
        CompactResult { messages: (0..n).map(Item::Ref).collect(), summary: summary.into(), ..Default::default() }
    }

    /// The result as the JSON the host reads.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64 + 12 * self.messages.len());
        out.push_str("{\"messages\":[");
        for (k, item) in self.messages.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            match item {
                Item::Ref(i) => {
                    out.push_str("{\"ref\":");
                    out.push_str(&i.to_string());
                    out.push('}');
                }
                Item::New(m) => {
                    out.push_str("{\"role\":");
                    push_json_string(&mut out, &m.role);
                    out.push_str(",\"content\":");
                    push_json_string(&mut out, &m.content);
                    if !m.tool_call_id.is_empty() {
                        out.push_str(",\"tool_call_id\":");
                        push_json_string(&mut out, &m.tool_call_id);
                    }
                    if !m.name.is_empty() {
                        out.push_str(",\"name\":");
                        push_json_string(&mut out, &m.name);
                    }
                    out.push('}');
                }
            }
        }
        out.push_str("],\"compacted\":");
        out.push_str(if self.compacted { "true" } else { "false" });
        out.push_str(",\"summary\":");
        push_json_string(&mut out, &self.summary);
        out.push_str(",\"entries_summarized\":");
        out.push_str(&self.entries_summarized.to_string());
        if !self.rewritten.is_empty() {
            out.push_str(",\"rewritten\":");
            out.push_str(&serde_json::to_string(&self.rewritten).unwrap_or_else(|_| "[]".into()));
        }
        if !self.warnings.is_empty() {
            out.push_str(",\"warnings\":");
            out.push_str(&serde_json::to_string(&self.warnings).unwrap_or_else(|_| "[]".into()));
        }
        if let Some(state) = &self.state {
            out.push_str(",\"state\":");
            out.push_str(&state.to_string());
        }
        out.push('}');
        out
    }
}

fn push_json_string(out: &mut String, s: &str) {
    // serde_json escapes quotes, backslashes and control characters and
    // keeps other UTF-8 as it is.
    out.push_str(&serde_json::Value::String(s.to_string()).to_string());
}

// ---- Decoding --------------------------------------------------------------

/// Decodes the fast path's binary request (abi/fastwire.go). Strings
/// borrow from `b`.
pub fn decode_fast(b: &[u8]) -> Result<Request<'_>, Error> {
    let mut r = FastReader { b, off: 0 };
    if b.len() < 4 || &b[..4] != b"CDF1" {
        return Err(Error::invalid_request("fast request: bad magic"));
    }
    r.off = 4;
    let config = r.str()?;
    let model = r.str()?;
    let encoding = r.str()?;
    let context_window = r.u32()?;
    let total_tokens = r.u32()?;
    let conversation_id = r.str()?;
    let state = r.str()?;
    let count = r.u32()? as usize;
    if count > (b.len() - r.off) / 25 + 1 {
        return Err(Error::invalid_request("fast request: truncated"));
    }
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        let role = r.str()?;
        let tokens = r.u32()?;
        let kind = r.u8()?;
        let text = r.str()?;
        let content = match kind {
            0 => Content::Null,
            1 => Content::Text(text),
            2 => Content::Json(text),
            _ => return Err(Error::invalid_request("fast request: bad content kind")),
        };
        let name = r.str()?;
        let tool_call_id = r.str()?;
        let calls = r.u32()? as usize;
        if calls > (b.len() - r.off) / 16 + 1 {
            return Err(Error::invalid_request("fast request: truncated"));
        }
        let mut tool_calls = Vec::with_capacity(calls);
        for _ in 0..calls {
            tool_calls.push(ToolCall { id: r.str()?, kind: r.str()?, name: r.str()?, arguments: r.str()? });
        }
        messages.push(Message { role, tokens, content, name, tool_call_id, tool_calls });
    }
    // The host's decision, after the messages (ABI 1.1).
    let mut decision = None;
    if r.off < b.len() && b[r.off] == 1 {
        r.off += 1;
        decision = Some(Decision { reason: r.str()?, target_tokens: r.u32()? });
    }
    if r.off != b.len() {
        return Err(Error::invalid_request("fast request: trailing bytes"));
    }
    Ok(Request {
        config,
        model,
        encoding,
        context_window,
        total_tokens,
        conversation_id,
        state: if state.is_empty() { None } else { Some(state) },
        decision,
        messages,
    })
}

struct FastReader<'a> {
    b: &'a [u8],
    off: usize,
}

impl<'a> FastReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.b.len() - self.off < n {
            return Err(Error::invalid_request(format!("fast request: truncated at byte {}", self.off)));
        }
        let s = &self.b[self.off..self.off + n];
        self.off += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, Error> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn str(&mut self) -> Result<Cow<'a, str>, Error> {
        let n = self.u32()? as usize;
        let s = self.take(n)?;
        std::str::from_utf8(s)
            .map(Cow::Borrowed)
            .map_err(|_| Error::invalid_request("fast request: a string is not UTF-8"))
    }
}

/// Encodes a request in the fast path's binary form, as the host sends it
/// (tests use it to check that both paths give one result).
pub fn encode_fast(req: &Request) -> Vec<u8> {
    fn put_u32(out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    fn put_str(out: &mut Vec<u8>, s: &str) {
        put_u32(out, s.len() as u32);
        out.extend_from_slice(s.as_bytes());
    }
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"CDF1");
    put_str(&mut out, &req.config);
    put_str(&mut out, &req.model);
    put_str(&mut out, &req.encoding);
    put_u32(&mut out, req.context_window);
    put_u32(&mut out, req.total_tokens);
    put_str(&mut out, &req.conversation_id);
    put_str(&mut out, req.state.as_deref().unwrap_or(""));
    put_u32(&mut out, req.messages.len() as u32);
    for m in &req.messages {
        put_str(&mut out, &m.role);
        put_u32(&mut out, m.tokens);
        let (kind, text) = match &m.content {
            Content::Null => (0u8, ""),
            Content::Text(t) => (1, t.as_ref()),
            Content::Json(j) => (2, j.as_ref()),
        };
        out.push(kind);
        put_str(&mut out, text);
        put_str(&mut out, &m.name);
        put_str(&mut out, &m.tool_call_id);
        put_u32(&mut out, m.tool_calls.len() as u32);
        for c in &m.tool_calls {
            put_str(&mut out, &c.id);
            put_str(&mut out, &c.kind);
            put_str(&mut out, &c.name);
            put_str(&mut out, &c.arguments);
        }
    }
    if let Some(d) = &req.decision {
        out.push(1);
        put_str(&mut out, &d.reason);
        put_u32(&mut out, d.target_tokens);
    }
    out
}

/// Decodes the Extism path's JSON request.
pub fn decode_json(input: &[u8]) -> Result<Request<'static>, Error> {
    use serde_json::Value;
    let doc: Value = serde_json::from_slice(input).map_err(|e| Error::invalid_request(format!("decoding request: {}", e)))?;
    let s = |v: Option<&Value>| -> Cow<'static, str> { Cow::Owned(v.and_then(Value::as_str).unwrap_or("").to_string()) };
    let u = |v: Option<&Value>| -> u32 { v.and_then(Value::as_u64).unwrap_or(0).min(u32::MAX as u64) as u32 };
    let ctx = doc.get("context");
    let field = |k: &str| ctx.and_then(|c| c.get(k));
    let config = match doc.get("config") {
        None | Some(Value::Null) => Cow::Borrowed(""),
        Some(v) => Cow::Owned(v.to_string()),
    };
    let state = match field("state") {
        None | Some(Value::Null) => None,
        Some(v) => Some(Cow::Owned(v.to_string())),
    };
    let msgs = doc
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::invalid_request("the request has no messages array"))?;
    let mut messages = Vec::with_capacity(msgs.len());
    for m in msgs {
        let role = m.get("role").and_then(Value::as_str).ok_or_else(|| Error::invalid_request("a message has no role"))?;
        let content = match m.get("content") {
            None | Some(Value::Null) => Content::Null,
            Some(Value::String(t)) => Content::Text(Cow::Owned(t.clone())),
            Some(v) => Content::Json(Cow::Owned(v.to_string())),
        };
        let mut tool_calls = Vec::new();
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                let f = c.get("function");
                tool_calls.push(ToolCall {
                    id: s(c.get("id")),
                    kind: s(c.get("type")),
                    name: s(f.and_then(|f| f.get("name"))),
                    arguments: s(f.and_then(|f| f.get("arguments"))),
                });
            }
        }
        messages.push(Message {
            role: Cow::Owned(role.to_string()),
            tokens: u(m.get("tokens")),
            content,
            name: s(m.get("name")),
            tool_call_id: s(m.get("tool_call_id")),
            tool_calls,
        });
    }
    Ok(Request {
        config,
        model: s(field("model")),
        encoding: s(field("encoding")),
        context_window: u(field("context_window")),
        total_tokens: u(field("total_tokens")),
        conversation_id: s(field("conversation_id")),
        state,
        decision: match field("compact") {
            Some(d @ Value::Object(_)) => Some(Decision { reason: s(d.get("reason")), target_tokens: u(d.get("target_tokens")) }),
            _ => None,
        },
        messages,
    })
}

// ---- Hosts -----------------------------------------------------------------

/// Log levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

/// What a policy can ask of the host during a call.
pub trait Host {
    /// The token count of text with the request's tokenizer.
    fn count_tokens(&self, text: &str) -> u64;
    /// Sends an LLMRequest (JSON) through the host's LLM provider and
    /// returns the LLMResponse JSON; a failure is an answer with an
    /// `"error"` object, not an `Err`.
    fn llm_complete(&self, request_json: &str) -> String;
    /// Writes to the plugin's log on the host.
    fn log(&self, level: Level, msg: &str);
}

/// A Host for native tests. Its default counts a token per four bytes
/// (rounded up), has no LLM provider and keeps logs.
#[derive(Default)]
pub struct TestHost {
    pub tokens: Option<Box<dyn Fn(&str) -> u64>>,
    pub llm: Option<Box<dyn Fn(&str) -> String>>,
    pub logs: RefCell<Vec<String>>,
}

impl Host for TestHost {
    fn count_tokens(&self, text: &str) -> u64 {
        match &self.tokens {
            Some(f) => f(text),
            None => (text.len() as u64 + 3) / 4,
        }
    }
    fn llm_complete(&self, request_json: &str) -> String {
        match &self.llm {
            Some(f) => f(request_json),
            None => r#"{"error":{"code":"no_provider","message":"no LLM provider configured"},"usage":{"input_tokens":0,"output_tokens":0}}"#.to_string(),
        }
    }
    fn log(&self, level: Level, msg: &str) {
        self.logs.borrow_mut().push(format!("{:?} {}", level, msg));
    }
}

// ---- Calls -----------------------------------------------------------------

/// A policy's compact function.
pub type CompactFn = fn(&dyn Host, &Request) -> Result<CompactResult, Error>;

/// The functions a call can run (the fast path's numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    Ping = 0,
    Describe = 1,
    Compact = 2,
}

fn run(describe: &str, compact: CompactFn, host: &dyn Host, f: Function, input: &[u8], fast: bool) -> Result<String, Error> {
    match f {
        Function::Ping => Ok(String::new()),
        Function::Describe => Ok(describe.to_string()),
        Function::Compact => {
            let req = if fast { decode_fast(input)? } else { decode_json(input)? };
            if req.messages.is_empty() {
                return Err(Error::invalid_request("the request has no messages"));
            }
            Ok(compact(host, &req)?.to_json())
        }
    }
}

/// Runs a function on a JSON request, as the Extism path does.
pub fn call_json(describe: &str, compact: CompactFn, host: &dyn Host, f: Function, input: &[u8]) -> Result<String, Error> {
    run(describe, compact, host, f, input, false)
}

/// Runs a function on a binary fast-path request.
pub fn call_fast(describe: &str, compact: CompactFn, host: &dyn Host, f: Function, input: &[u8]) -> Result<String, Error> {
    run(describe, compact, host, f, input, true)
}

/// The Wasm side: imports and the exports' bodies. `compactd_policy!`
/// calls into it; policies do not need it directly.
#[cfg(target_arch = "wasm32")]
pub mod wasm {
    use super::*;

    #[link(wasm_import_module = "extism:host/env")]
    extern "C" {
        fn input_length() -> u64;
        fn input_load_u64(off: u64) -> u64;
        fn input_load_u8(off: u64) -> u32;
        fn alloc(n: u64) -> u64;
        fn free(off: u64);
        fn length(off: u64) -> u64;
        fn load_u64(off: u64) -> u64;
        fn load_u8(off: u64) -> u32;
        fn store_u64(off: u64, v: u64);
        fn store_u8(off: u64, v: u32);
        fn output_set(off: u64, n: u64);
        fn error_set(off: u64);
        fn log_debug(off: u64);
        fn log_info(off: u64);
        fn log_warn(off: u64);
        fn log_error(off: u64);
    }

    #[link(wasm_import_module = "extism:host/user")]
    extern "C" {
        fn count_tokens(off: u64) -> u64;
        fn llm_complete(off: u64) -> u64;
    }

    fn to_kernel(b: &[u8]) -> u64 {
        unsafe {
            let off = alloc(b.len() as u64);
            if off == 0 {
                return 0;
            }
            let mut chunks = b.chunks_exact(8);
            let mut i = 0u64;
            for c in &mut chunks {
                store_u64(off + i, u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
                i += 8;
            }
            for &x in chunks.remainder() {
                store_u8(off + i, x as u32);
                i += 1;
            }
            off
        }
    }

    fn from_kernel(off: u64) -> Vec<u8> {
        unsafe {
            let n = length(off) as usize;
            let mut v = Vec::with_capacity(n);
            let mut i = 0;
            while i + 8 <= n {
                v.extend_from_slice(&load_u64(off + i as u64).to_le_bytes());
                i += 8;
            }
            while i < n {
                v.push(load_u8(off + i as u64) as u8);
                i += 1;
            }
            v
        }
    }

    /// The host functions, through the Extism kernel.
    pub struct WasmHost;

    impl Host for WasmHost {
        fn count_tokens(&self, text: &str) -> u64 {
            if text.is_empty() {
                return 0;
            }
            let off = to_kernel(text.as_bytes());
            if off == 0 {
                return (text.len() as u64 + 3) / 4;
            }
            unsafe {
                let n = count_tokens(off);
                free(off);
                n
            }
        }
        fn llm_complete(&self, request_json: &str) -> String {
            let off = to_kernel(request_json.as_bytes());
            unsafe {
                let res = llm_complete(off);
                free(off);
                if res == 0 {
                    return r#"{"error":{"code":"provider_error","message":"llm_complete returned nothing"}}"#.to_string();
                }
                let out = from_kernel(res);
                free(res);
                String::from_utf8_lossy(&out).into_owned()
            }
        }
        fn log(&self, level: Level, msg: &str) {
            let off = to_kernel(msg.as_bytes());
            if off == 0 {
                return;
            }
            // The host frees log blocks.
            unsafe {
                match level {
                    Level::Debug => log_debug(off),
                    Level::Info => log_info(off),
                    Level::Warn => log_warn(off),
                    Level::Error => log_error(off),
                }
            }
        }
    }

    /// The body of the Extism exports.
    pub fn extism_export(describe: &str, compact: CompactFn, f: Function) -> i32 {
        let input = if f == Function::Describe {
            Vec::new()
        } else {
            unsafe {
                let n = input_length() as usize;
                let mut v = Vec::with_capacity(n);
                let mut i = 0;
                while i + 8 <= n {
                    v.extend_from_slice(&input_load_u64(i as u64).to_le_bytes());
                    i += 8;
                }
                while i < n {
                    v.push(input_load_u8(i as u64) as u8);
                    i += 1;
                }
                v
            }
        };
        match call_json(describe, compact, &WasmHost, f, &input) {
            Ok(out) => {
                let off = to_kernel(out.as_bytes());
                if off == 0 {
                    return 1;
                }
                unsafe { output_set(off, out.len() as u64) };
                0
            }
            Err(e) => {
                let off = to_kernel(e.to_json().as_bytes());
                if off != 0 {
                    unsafe { error_set(off) };
                }
                1
            }
        }
    }

    // The fast path's buffers live until the next call: the host writes
    // the request into the input and reads the output after we return.
    thread_local! {
        static FAST_IN: RefCell<Vec<u8>> = RefCell::new(Vec::new());
        static FAST_OUT: RefCell<Vec<u8>> = RefCell::new(Vec::new());
    }

    /// The body of compactd_fast_v1_alloc.
    pub fn fast_alloc(size: u32) -> u32 {
        FAST_IN.with(|b| {
            let mut b = b.borrow_mut();
            let need = (size as usize).max(1);
            if b.capacity() < need || (b.capacity() > 4 << 20 && need < b.capacity() / 4) {
                *b = Vec::with_capacity(need);
            }
            b.as_mut_ptr() as u32
        })
    }

    /// The body of compactd_fast_v1_call.
    pub fn fast_call(describe: &str, compact: CompactFn, f: u32, ptr: u32, size: u32) -> u64 {
        let result = FAST_IN.with(|b| {
            let b = b.borrow();
            let f = match f {
                0 => Function::Ping,
                1 => Function::Describe,
                2 => Function::Compact,
                _ => return Err(Error::invalid_request("unknown fast-path function")),
            };
            if f == Function::Compact && (ptr != b.as_ptr() as u32 || size as usize > b.capacity()) {
                return Err(Error::invalid_request("fast-path input is not the buffer compactd_fast_v1_alloc returned"));
            }
            // The host wrote `size` bytes into the buffer's spare capacity.
            let input = unsafe { std::slice::from_raw_parts(b.as_ptr(), size as usize) };
            call_fast(describe, compact, &WasmHost, f, input)
        });
        FAST_OUT.with(|o| {
            let mut o = o.borrow_mut();
            o.clear();
            if o.capacity() > 4 << 20 {
                o.shrink_to(1 << 16);
            }
            match result {
                Ok(out) => {
                    o.push(0);
                    o.extend_from_slice(out.as_bytes());
                }
                Err(e) => {
                    o.push(1);
                    o.extend_from_slice(e.to_json().as_bytes());
                }
            }
            (o.as_ptr() as u64) << 32 | o.len() as u64
        })
    }
}

/// Defines the plugin's exports for a description (JSON text) and a
/// compact function. Use it once, at the crate root.
#[macro_export]
macro_rules! compactd_policy {
    ($describe:expr, $compact:path) => {
        /// The policy's description and compact function (natively, where
        /// there are no exports: tests may call it).
        #[cfg(not(target_arch = "wasm32"))]
        pub fn __compactd_policy() -> (&'static str, $crate::CompactFn) {
            ($describe, $compact)
        }
        #[cfg(target_arch = "wasm32")]
        #[export_name = "describe"]
        pub extern "C" fn __compactd_describe() -> i32 {
            $crate::wasm::extism_export($describe, $compact, $crate::Function::Describe)
        }
        #[cfg(target_arch = "wasm32")]
        #[export_name = "compact"]
        pub extern "C" fn __compactd_compact() -> i32 {
            $crate::wasm::extism_export($describe, $compact, $crate::Function::Compact)
        }
        #[cfg(target_arch = "wasm32")]
        #[export_name = "compactd_fast_v1_alloc"]
        pub extern "C" fn __compactd_fast_alloc(size: u32) -> u32 {
            $crate::wasm::fast_alloc(size)
        }
        #[cfg(target_arch = "wasm32")]
        #[export_name = "compactd_fast_v1_call"]
        pub extern "C" fn __compactd_fast_call(f: u32, ptr: u32, size: u32) -> u64 {
            $crate::wasm::fast_call($describe, $compact, f, ptr, size)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQ: &str = r#"{"abi":"1.0","config":{"n":8.0},"context":{"model":"gpt-4o","total_tokens":7,"state":{"k":[1]}},
      "messages":[{"tokens":3,"role":"system","content":"h\u00e9llo","extra":{"x":1}},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
      {"tokens":4,"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"x"}]}]}"#;

    #[test]
    fn fast_round_trip() {
        let req = decode_json(REQ.as_bytes()).unwrap();
        assert_eq!(req.messages.len(), 3);
        assert_eq!(req.messages[0].content.text(), Some("héllo"));
        assert_eq!(req.config_int("n", 1, 10, 3).unwrap(), 8);
        assert_eq!(req.units(1), vec![1..3]);
        let bin = encode_fast(&req);
        let back = decode_fast(&bin).unwrap();
        assert_eq!(back, req);
        for cut in 0..bin.len() {
            assert!(decode_fast(&bin[..cut]).is_err(), "truncated at {} accepted", cut);
        }
    }

    #[test]
    fn decision_both_paths() {
        let json = br#"{"config":{},"context":{"compact":{"reason":"usage","target_tokens":900}},"messages":[{"role":"user","content":"hi"}]}"#;
        let req = decode_json(json).unwrap();
        assert_eq!(req.decision, Some(Decision { reason: "usage".into(), target_tokens: 900 }));
        let bin = encode_fast(&req);
        let back = decode_fast(&bin).unwrap();
        assert_eq!(back, req);
        for cut in 0..bin.len() {
            assert!(decode_fast(&bin[..cut]).is_err() || cut < bin.len() && decode_fast(&bin[..cut]).unwrap().decision.is_none(), "truncated at {} decoded a decision", cut);
        }
        assert_eq!(decode_json(br#"{"messages":[]}"#).unwrap().decision, None);
    }

    #[test]
    fn result_json_escapes() {
        let mut r = CompactResult::unchanged(1, "a \"quote\"\n");
        r.messages.push(Item::New(NewMessage { role: "tool".into(), content: "é\u{1}".into(), tool_call_id: "c".into(), name: String::new() }));
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["summary"], "a \"quote\"\n");
        assert_eq!(v["messages"][1]["content"], "é\u{1}");
    }

    #[test]
    fn config_errors() {
        let req = decode_json(br#"{"config":{"n":"x"},"messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(req.config_int("n", 1, 10, 3).unwrap_err().code, "invalid_config");
        assert_eq!(req.config_int("m", 1, 10, 3).unwrap(), 3);
    }
}
