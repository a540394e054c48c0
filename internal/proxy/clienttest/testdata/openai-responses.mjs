// The official OpenAI SDK on the Responses API, through compactd's proxy:
// a tool-using session that keeps its own history (input items, no
// previous_response_id), odd turns streamed, even turns JSON.
import OpenAI from 'openai';
import { compactdURL, providerKey, turns, headers, toolDescription, toolSchema, readFile, question, count, check, done } from './session.mjs';

const client = new OpenAI({ baseURL: `${compactdURL}/v1`, apiKey: providerKey, defaultHeaders: headers, maxRetries: 0 });
const tools = [{ type: 'function', name: 'read_file', description: toolDescription, parameters: toolSchema, strict: true }];
const input = [];

async function ask(stream) {
  const req = { model: 'gpt-4o', instructions: 'You are a coding agent. Read files with read_file.', input, tools };
  if (!stream) return client.responses.create(req);
  let final = null;
  let deltas = '';
  for await (const ev of await client.responses.create({ ...req, stream: true })) {
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    if (ev.type === 'response.completed') final = ev.response;
  }
  check(final, 'the stream ended without response.completed');
  check(deltas === final.output.filter((o) => o.type === 'message').map((o) => o.content[0].text).join(''), 'deltas and the final text differ');
  return final;
}

for (let turn = 1; turn <= turns; turn++) {
  input.push({ role: 'user', content: question(turn) });
  const stream = turn % 2 === 1;
  const r = await ask(stream);
  check(r.usage, `no usage: ${JSON.stringify(r)}`);
  const calls = r.output.filter((o) => o.type === 'function_call');
  count(calls.length);
  check(calls.length > 0, `turn ${turn}: no function call: ${JSON.stringify(r.output)}`);
  input.push(...r.output);
  for (const c of calls) input.push({ type: 'function_call_output', call_id: c.call_id, output: readFile(JSON.parse(c.arguments)) });
  const a = await ask(stream);
  count();
  const text = a.output.filter((o) => o.type === 'message').map((o) => o.content.map((c) => c.text ?? '').join('')).join('');
  check(text.startsWith('result: '), `turn ${turn}: answer ${JSON.stringify(a.output)}`);
  input.push(...a.output);
}
done();
