// An agent on the official OpenAI SDK, pointed at compactd's proxy: only
// its baseURL and one header (compactd's token on the TCP listener)
// differ from talking to OpenAI. It runs a tool loop over a long recorded
// conversation, JSON and streamed, and prints one JSON line per request
// (the transcript internal/proxy/sdktest checks). Any SDK error ends it
// with exit status 1.
//
// Environment: COMPACTD_URL, COMPACTD_TOKEN, PROVIDER_KEY, HISTORY (a
// JSON file of chat messages), TURNS, TOOL_OUTPUT_WORDS, CONVERSATION.
import fs from 'node:fs';
import { record, fail } from './transcript.mjs';
import OpenAI from 'openai';

const env = process.env;
const client = new OpenAI({
  baseURL: `${env.COMPACTD_URL}/v1`,
  apiKey: env.PROVIDER_KEY,
  defaultHeaders: { 'X-Compactd-Token': env.COMPACTD_TOKEN, 'X-Compactd-Conversation': env.CONVERSATION },
  maxRetries: 0,
});
const tools = [{
  type: 'function',
  function: { name: 'lookup', description: 'Looks a record up.', parameters: { type: 'object', properties: { query: { type: 'string' } } } },
}];
const messages = JSON.parse(fs.readFileSync(env.HISTORY, 'utf8'));
const bigOutput = 'record '.repeat(Number(env.TOOL_OUTPUT_WORDS || 50));

const models = await client.models.list();
if (!models.data.some((m) => m.id === 'gpt-4o')) fail('models list (a forwarded path) lacks gpt-4o');

for (let turn = 0; turn < Number(env.TURNS); turn++) {
  messages.push({ role: 'user', content: `Question ${turn}: what does record ${turn} say?` });

  // 1. JSON, with tools: the model calls lookup.
  const { data: call, response: r1 } = await client.chat.completions.create({ model: 'gpt-4o', messages, tools }).withResponse();
  const tc = call.choices[0].message.tool_calls?.[0];
  if (!tc || tc.function.name !== 'lookup' || !JSON.parse(tc.function.arguments).query.startsWith(`Question ${turn}`)) {
    fail(`turn ${turn}: no lookup call: ${JSON.stringify(call)}`);
  }
  record('json+tool_call', messages.length, r1, { usage: call.usage });
  messages.push(call.choices[0].message);
  messages.push({ role: 'tool', tool_call_id: tc.id, content: `${turn}: ${bigOutput}` });

  // 2. Streamed, no include_usage asked: text arrives in chunks; no
  // usage chunk may reach the SDK.
  const { data: stream, response: r2 } = await client.chat.completions.create({ model: 'gpt-4o', messages, stream: true }).withResponse();
  let text = '';
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) fail(`turn ${turn}: a usage chunk reached the client: ${JSON.stringify(chunk)}`);
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  if (!text.startsWith(`result: ${turn}: record`)) fail(`turn ${turn}: streamed text ${JSON.stringify(text)}`);
  record('stream', messages.length, r2, { chunks, text: text.slice(0, 40) });
  messages.push({ role: 'assistant', content: text });
}

// 3. The SDK's streaming helper assembling a streamed tool call, with
// usage asked for by the client (so it must arrive).
messages.push({ role: 'user', content: 'One more lookup, streamed.' });
const runner = client.chat.completions.stream({ model: 'gpt-4o', messages, tools, stream_options: { include_usage: true } });
const final = await runner.finalChatCompletion();
const call = final.choices[0].message.tool_calls?.[0];
if (!call || call.function.name !== 'lookup' || !final.usage) fail(`stream helper: ${JSON.stringify(final)}`);
record('stream+tool_call', messages.length, null, { usage: final.usage });
