//! __NAME__: a compactd policy in Rust.
//!
//! Keeps the task (the first user message), the last `keep_units` units
//! verbatim, and before them `mask_units` units whose tool outputs are
//! masked to their first line; older units are dropped. The boundaries move
//! in steps of `step` units, so the conversation's prefix (and the
//! provider's prompt cache) changes once per step, not on every turn.
//!
//! Build: `make` (wasm32-wasi). Test: `make test` (cargo test, natively).

use compactd_pdk::{compactd_policy, CompactResult, Content, Error, Host, Item, NewMessage, Request};

const DESCRIPTION: &str = concat!(
    r#"{"abi":"1.0","name":"__NAME__","version":"0.1.0","#,
    r#""description":"Keeps the task and the last units; masks older tool outputs to their first line and drops the oldest.","#,
    r#""config_schema":{"type":"object","properties":{"#,
    r#""keep_units":{"type":"integer","minimum":1,"maximum":100000,"description":"newest units kept verbatim"},"#,
    r#""mask_units":{"type":"integer","minimum":0,"maximum":100000,"description":"units before those, kept with tool outputs masked"},"#,
    r#""step":{"type":"integer","minimum":1,"maximum":1000,"description":"boundaries move in steps of this many units"}},"#,
    r#""additionalProperties":false},"#,
    r#""defaults":{"keep_units":8,"mask_units":24,"step":4}}"#
);

const MAX_LINE_CHARS: usize = 200;

/// The masked form of a tool output, or None when masking would not make
/// it shorter.
fn mask(content: &str) -> Option<String> {
    let line = content.split('\n').next().unwrap_or("");
    let line = line.strip_suffix('\r').unwrap_or(line);
    let head = match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((i, _)) => &line[..i],
        None => line,
    };
    let masked = content.len() - head.len();
    if masked == 0 {
        return None;
    }
    let out = format!("{} [\u{2026} {} bytes masked]", head, masked);
    if out.len() < content.len() {
        Some(out)
    } else {
        None
    }
}

fn compact(_host: &dyn Host, req: &Request) -> Result<CompactResult, Error> {
    let keep = req.config_int("keep_units", 1, 100_000, 8)? as usize;
    let mask_units = req.config_int("mask_units", 0, 100_000, 24)? as usize;
    let step = req.config_int("step", 1, 1000, 4)? as usize;

    let lead = req.leading_system();
    let units = req.units(lead);
    // Units [0, drop) go, [drop, verbatim) are masked, the rest stay.
    let older = units.len().saturating_sub(keep);
    let verbatim = older - older % step;
    let drop = verbatim.saturating_sub(mask_units);
    let task = (lead..req.messages.len()).find(|&i| req.messages[i].role == "user");

    let mut res = CompactResult::default();
    res.messages.extend((0..lead).map(Item::Ref));
    let (mut dropped, mut masked) = (0, 0);
    for (u, unit) in units.iter().enumerate() {
        for i in unit.clone() {
            let m = &req.messages[i];
            if u < drop && Some(i) != task {
                dropped += 1;
                continue;
            }
            if u < verbatim && m.role == "tool" {
                if let Content::Text(text) = &m.content {
                    if let Some(content) = mask(text) {
                        res.messages.push(Item::New(NewMessage {
                            role: "tool".into(),
                            content,
                            tool_call_id: m.tool_call_id.to_string(),
                            name: m.name.to_string(),
                        }));
                        res.rewritten.push(i);
                        masked += 1;
                        continue;
                    }
                }
            }
            res.messages.push(Item::Ref(i));
        }
    }
    if dropped == 0 && masked == 0 {
        return Ok(CompactResult::unchanged(req.messages.len(), format!("nothing to compact ({} units)", units.len())));
    }
    res.compacted = true;
    res.entries_summarized = dropped + masked;
    res.summary = format!(
        "dropped {} messages, masked {} tool outputs, kept the last {} units verbatim",
        dropped,
        masked,
        units.len() - verbatim
    );
    Ok(res)
}

compactd_policy!(DESCRIPTION, compact);

#[cfg(test)]
mod tests {
    use super::*;
    use compactd_pdk::{call_fast, call_json, decode_json, encode_fast, serde_json, Function, TestHost};

    /// A system prompt, the task, then n tool-call units whose outputs
    /// have three lines each.
    fn conversation(n: usize, config: &str) -> String {
        let mut msgs = vec![
            r#"{"role":"system","content":"You are an agent."}"#.to_string(),
            r#"{"role":"user","content":"Fix the bug in parse.go"}"#.to_string(),
        ];
        for i in 0..n {
            msgs.push(format!(
                r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{i}","type":"function","function":{{"name":"bash","arguments":"{{}}"}}}}]}}"#,
                i = i
            ));
            msgs.push(format!(
                r#"{{"role":"tool","tool_call_id":"c{i}","content":"line one of {i} \u00e9\nline two, long enough to be worth masking\nline three"}}"#,
                i = i
            ));
        }
        format!(r#"{{"abi":"1.0","config":{},"context":{{"total_tokens":0}},"messages":[{}]}}"#, config, msgs.join(","))
    }

    /// Runs compact on both paths, checks they agree, returns the JSON.
    fn run(request: &str) -> Result<serde_json::Value, compactd_pdk::Error> {
        let host = TestHost::default();
        let json = call_json(DESCRIPTION, compact, &host, Function::Compact, request.as_bytes());
        let fast = call_fast(DESCRIPTION, compact, &host, Function::Compact, &encode_fast(&decode_json(request.as_bytes()).unwrap()));
        assert_eq!(json, fast, "the fast path disagrees");
        json.map(|s| serde_json::from_str(&s).unwrap())
    }

    #[test]
    fn describe_is_json() {
        let d: serde_json::Value = serde_json::from_str(DESCRIPTION).unwrap();
        assert_eq!(d["name"], "__NAME__");
    }

    #[test]
    fn short_conversations_are_unchanged() {
        let out = run(&conversation(3, r#"{"keep_units":8,"mask_units":24,"step":4}"#)).unwrap();
        assert_eq!(out["compacted"], false);
        assert_eq!(out["messages"].as_array().unwrap().len(), 8);
    }

    #[test]
    fn masks_and_drops() {
        // The task and 20 units with keep 4, mask 8, step 4: 17 units are
        // older, 16 leave the verbatim tail; the newest 8 of those are
        // masked, the other 8 dropped but for the task.
        let out = run(&conversation(20, r#"{"keep_units":4,"mask_units":8,"step":4}"#)).unwrap();
        assert_eq!(out["compacted"], true);
        let msgs = out["messages"].as_array().unwrap();
        assert_eq!(msgs[0]["ref"], 0);
        assert_eq!(msgs[1]["ref"], 1);
        assert_eq!(msgs[2]["ref"], 16);
        assert_eq!(msgs[5]["content"], "line one of 8 \u{e9} [\u{2026} 53 bytes masked]");
        assert_eq!(out["summary"], "dropped 14 messages, masked 8 tool outputs, kept the last 5 units verbatim");
        assert_eq!(out["entries_summarized"], 22);
    }

    #[test]
    fn bad_config_is_an_error() {
        let err = run(&conversation(2, r#"{"keep_units":0}"#)).unwrap_err();
        assert_eq!(err.code, "invalid_config");
    }

    #[test]
    fn malformed_requests_are_errors() {
        let host = TestHost::default();
        assert!(call_json(DESCRIPTION, compact, &host, Function::Compact, br#"{"messages":[{"role":"#).is_err());
        assert!(call_fast(DESCRIPTION, compact, &host, Function::Compact, b"CDF1\x05\x00\x00\x00{}").is_err());
    }
}
