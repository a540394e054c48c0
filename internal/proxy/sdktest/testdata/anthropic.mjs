// An agent on the official Anthropic SDK, pointed at compactd's proxy:
// only its baseURL and one header (compactd's token on the TCP listener)
// differ from talking to Anthropic. It runs a tool loop (tool_use, then
// tool_result in the next user message) over a long recorded conversation,
// JSON and streamed, and prints one JSON line per request (the transcript
// internal/proxy/sdktest checks). Any SDK error ends it with exit status 1.
//
// Environment: COMPACTD_URL, COMPACTD_TOKEN, PROVIDER_KEY, HISTORY (a JSON
// file {system, messages}), TURNS, TOOL_OUTPUT_WORDS, CONVERSATION.
import fs from 'node:fs';
import { record, fail } from './transcript.mjs';
import Anthropic from '@anthropic-ai/sdk';

const env = process.env;
const client = new Anthropic({
  baseURL: env.COMPACTD_URL,
  apiKey: env.PROVIDER_KEY,
  defaultHeaders: { 'X-Compactd-Token': env.COMPACTD_TOKEN, 'X-Compactd-Conversation': env.CONVERSATION },
  maxRetries: 0,
});
const tools = [{ name: 'lookup', description: 'Looks a record up.', input_schema: { type: 'object', properties: { query: { type: 'string' } } } }];
const { system, messages } = JSON.parse(fs.readFileSync(env.HISTORY, 'utf8'));
const bigOutput = 'record '.repeat(Number(env.TOOL_OUTPUT_WORDS || 50));

const models = await client.models.list();
if (!models.data.some((m) => m.id === 'claude-sonnet-4-5')) fail('models list (a forwarded path) lacks claude-sonnet-4-5');

for (let turn = 0; turn < Number(env.TURNS); turn++) {
  // The question goes with the previous turn's answer's user message when
  // there is one (Anthropic wants turns to alternate).
  messages.push({ role: 'user', content: [{ type: 'text', text: `Question ${turn}: what does record ${turn} say?` }] });

  // 1. JSON, with tools: the model answers with a tool_use block.
  const { data: msg, response: r1 } = await client.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 1024, system, messages, tools }).withResponse();
  const use = msg.content.find((b) => b.type === 'tool_use');
  if (msg.stop_reason !== 'tool_use' || !use || use.name !== 'lookup' || !use.input.query.startsWith(`Question ${turn}`)) {
    fail(`turn ${turn}: no lookup call: ${JSON.stringify(msg)}`);
  }
  record('json+tool_use', messages.length, r1, { usage: msg.usage });
  messages.push({ role: 'assistant', content: msg.content });
  messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: `${turn}: ${bigOutput}` }] });

  // 2. Streamed, through the SDK's stream helper.
  const stream = client.messages.stream({ model: 'claude-sonnet-4-5', max_tokens: 1024, system, messages });
  const { response: r2 } = await stream.withResponse();
  let deltas = 0;
  stream.on('text', () => deltas++);
  const final = await stream.finalMessage();
  const text = final.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  if (!text.startsWith(`result: ${turn}: record`) || final.usage.output_tokens < 1) fail(`turn ${turn}: streamed ${JSON.stringify(final)}`);
  record('stream', messages.length, r2, { deltas, text: text.slice(0, 40), usage: final.usage });
  messages.push({ role: 'assistant', content: final.content });
}

// 3. A streamed tool call, assembled by the SDK from input_json_delta events.
messages.push({ role: 'user', content: 'One more lookup, streamed.' });
const final = await client.messages.stream({ model: 'claude-sonnet-4-5', max_tokens: 1024, system, messages, tools }).finalMessage();
const use = final.content.find((b) => b.type === 'tool_use');
if (!use || use.input.query !== 'One more lookup, streamed.') fail(`stream tool_use: ${JSON.stringify(final)}`);
record('stream+tool_use', messages.length, null, { usage: final.usage });
