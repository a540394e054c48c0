// __NAME__: a compactd policy in AssemblyScript.
//
// Keeps the task (the first user message), the last keep_units units
// verbatim, and before them mask_units units whose tool outputs are masked
// to their first line; older units are dropped. The boundaries move in
// steps of `step` units, so the conversation's prefix (and the provider's
// prompt cache) changes once per step, not on every turn.
//
// Build: make (asc). Test: make test (node --test, on the built module).

import { register, CompactResult, Request, utf8Length } from "../compactd";
export * from "../compactd/exports";

const DESCRIPTION =
  '{"abi":"1.0","name":"__NAME__","version":"0.1.0",' +
  '"description":"Keeps the task and the last units; masks older tool outputs to their first line and drops the oldest.",' +
  '"config_schema":{"type":"object","properties":{' +
  '"keep_units":{"type":"integer","minimum":1,"maximum":100000,"description":"newest units kept verbatim"},' +
  '"mask_units":{"type":"integer","minimum":0,"maximum":100000,"description":"units before those, kept with tool outputs masked"},' +
  '"step":{"type":"integer","minimum":1,"maximum":1000,"description":"boundaries move in steps of this many units"}},' +
  '"additionalProperties":false},' +
  '"defaults":{"keep_units":8,"mask_units":24,"step":4}}';

const MAX_LINE_CHARS = 200;

/** mask returns the masked form of a tool output, or null when masking
 * would not make it shorter. */
function mask(content: string): string | null {
  let line = content;
  const nl = content.indexOf("\n");
  if (nl >= 0) line = content.substring(0, nl);
  if (line.endsWith("\r")) line = line.substring(0, line.length - 1);
  // Cut at MAX_LINE_CHARS code points (a surrogate pair is one).
  let end = 0;
  for (let chars = 0; end < line.length && chars < MAX_LINE_CHARS; chars++) {
    const c = line.charCodeAt(end);
    end += c >= 0xd800 && c < 0xdc00 && end + 1 < line.length ? 2 : 1;
  }
  const head = line.substring(0, end);
  const total = utf8Length(content);
  const masked = total - utf8Length(head);
  if (masked == 0) return null;
  const out = head + " [\u2026 " + masked.toString() + " bytes masked]";
  return utf8Length(out) < total ? out : null;
}

function compact(req: Request): CompactResult {
  const keep = <i32>req.configInt("keep_units", 1, 100000, 8);
  const maskUnits = <i32>req.configInt("mask_units", 0, 100000, 24);
  const step = <i32>req.configInt("step", 1, 1000, 4);
  if (req.error != null) return CompactResult.failed(req.error!);

  const lead = req.leadingSystem();
  const units = req.units(lead);
  // Units [0, drop) go, [drop, verbatim) are masked, the rest stay.
  const older = max(units.length - keep, 0);
  const verbatim = older - (older % step);
  const drop = max(verbatim - maskUnits, 0);
  let task = -1;
  for (let i = lead; i < req.messages.length; i++) {
    if (req.messages[i].role == "user") {
      task = i;
      break;
    }
  }

  const res = new CompactResult();
  for (let i = 0; i < lead; i++) res.keep(i);
  let dropped = 0;
  let masked = 0;
  for (let u = 0; u < units.length; u++) {
    for (let i = units[u].start; i < units[u].end; i++) {
      const m = req.messages[i];
      if (u < drop && i != task) {
        dropped++;
        continue;
      }
      if (u < verbatim && m.role == "tool") {
        const text = m.text;
        if (text != null) {
          const content = mask(text);
          if (content != null) {
            res.add("tool", content, m.toolCallId, m.name);
            res.rewritten.push(i);
            masked++;
            continue;
          }
        }
      }
      res.keep(i);
    }
  }
  if (dropped == 0 && masked == 0) {
    return CompactResult.unchanged(req.messages.length, "nothing to compact (" + units.length.toString() + " units)");
  }
  res.compacted = true;
  res.entriesSummarized = dropped + masked;
  res.summary =
    "dropped " + dropped.toString() + " messages, masked " + masked.toString() +
    " tool outputs, kept the last " + (units.length - verbatim).toString() + " units verbatim";
  return res;
}

register(DESCRIPTION, compact);
