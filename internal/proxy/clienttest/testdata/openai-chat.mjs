// The official OpenAI SDK on Chat Completions, through compactd's proxy:
// a tool-using session, odd turns streamed (with include_usage), even
// turns JSON. Every tool call is answered, parallel ones included.
import OpenAI from 'openai';
import { compactdURL, providerKey, turns, headers, toolDescription, toolSchema, readFile, question, count, check, done } from './session.mjs';

const client = new OpenAI({ baseURL: `${compactdURL}/v1`, apiKey: providerKey, defaultHeaders: headers, maxRetries: 0 });
const tools = [{ type: 'function', function: { name: 'read_file', description: toolDescription, parameters: toolSchema } }];
const messages = [{ role: 'system', content: 'You are a coding agent. Read files with read_file.' }];

async function ask(stream) {
  if (!stream) {
    const r = await client.chat.completions.create({ model: 'gpt-4o', messages, tools });
    check(r.usage, `no usage: ${JSON.stringify(r)}`);
    return r.choices[0].message;
  }
  const runner = client.chat.completions.stream({ model: 'gpt-4o', messages, tools, stream_options: { include_usage: true } });
  const final = await runner.finalChatCompletion();
  check(final.usage, 'a streamed answer asked for usage and got none');
  return final.choices[0].message;
}

for (let turn = 1; turn <= turns; turn++) {
  messages.push({ role: 'user', content: question(turn) });
  const stream = turn % 2 === 1;
  const call = await ask(stream);
  count(call.tool_calls?.length ?? 0);
  check(call.tool_calls?.length > 0, `turn ${turn}: no tool call: ${JSON.stringify(call)}`);
  messages.push({ role: 'assistant', content: call.content ?? null, tool_calls: call.tool_calls });
  for (const tc of call.tool_calls) {
    messages.push({ role: 'tool', tool_call_id: tc.id, content: readFile(JSON.parse(tc.function.arguments)) });
  }
  const answer = await ask(stream);
  count();
  check(answer.content?.startsWith('result: '), `turn ${turn}: answer ${JSON.stringify(answer)}`);
  messages.push({ role: 'assistant', content: answer.content });
}
done();
