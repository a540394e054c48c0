// Regenerates reference.json: token counts from js-tiktoken, an independent
// port of OpenAI's tiktoken, for TestReference. Run from this directory:
//
//	npm install --prefix /tmp/jstt js-tiktoken@1.0.21
//	NODE_PATH=/tmp/jstt/node_modules node reference.mjs ../../../testdata/conversations > reference.json
import { createRequire } from "module";
import fs from "fs";
import path from "path";

const require = createRequire(import.meta.url);
const { Tiktoken } = require("js-tiktoken/lite");
const encs = {
  o200k: new Tiktoken(require("js-tiktoken/ranks/o200k_base")),
  cl100k: new Tiktoken(require("js-tiktoken/ranks/cl100k_base")),
};
// Special tokens count as ordinary text, as tiktoken's encode_ordinary does.
const count = (e, s) => (s ? encs[e].encode(s, [], []).length : 0);

// The message formula of CountMessage, with abi.Content.Text's joining.
function text(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((p) => ["text", "input_text", "output_text"].includes(p.type))
    .map((p) => p.text ?? "")
    .join("\n");
}
function message(e, m) {
  let n = 3 + count(e, m.role) + count(e, text(m.content));
  if (m.name) n += 1 + count(e, m.name);
  for (const tc of m.tool_calls ?? []) n += count(e, tc.function.name) + count(e, tc.function.arguments) + 3;
  return n;
}

const strings = [
  "hello world",
  "tiktoken is great!",
  "お誕生日おめでとう",
  "\x7f",
  "a\x7fb\x7f\x7f",
  "<|endoftext|> is plain text here",
  "    if x:\n        return y\n",
  "{\"reservation_id\": \"ZFA04Y\", \"cabin\": \"economy\"}",
  "a\n  \nb",
  "x\n    \n    y",
];
const dir = process.argv[2];
const lines = fs.readFileSync(path.join(dir, "tau_bench_gpt4o_airline.jsonl"), "utf8").split("\n").slice(0, 3);
const out = {
  generator: "js-tiktoken@1.0.21",
  strings: strings.map((s) => ({ text: s, o200k: count("o200k", s), cl100k: count("cl100k", s) })),
  conversations: lines.map((l) => {
    const cv = JSON.parse(l);
    return { id: cv.id, o200k: cv.messages.map((m) => message("o200k", m)), cl100k: cv.messages.map((m) => message("cl100k", m)) };
  }),
};
console.log(JSON.stringify(out, null, 1));
