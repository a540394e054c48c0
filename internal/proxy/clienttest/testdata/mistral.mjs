// The official Mistral SDK (@mistralai/mistralai), streamed, through
// compactd's proxy in front of an OpenAI-format provider: a tool-using
// session whose every request is a stream.
import { Mistral } from '@mistralai/mistralai';
import { compactdURL, providerKey, turns, headers, toolDescription, toolSchema, readFile, question, count, check, done } from './session.mjs';

const client = new Mistral({ apiKey: providerKey, serverURL: compactdURL, retryConfig: { strategy: 'none' } });
const tools = [{ type: 'function', function: { name: 'read_file', description: toolDescription, parameters: toolSchema } }];
const messages = [{ role: 'system', content: 'You are a coding agent. Read files with read_file.' }];

// ask streams one answer and assembles it: its text and its tool calls.
async function ask() {
  const stream = await client.chat.stream({ model: 'mistral-large-latest', messages, tools }, { headers });
  let text = '';
  const calls = [];
  for await (const ev of stream) {
    const delta = ev.data.choices[0]?.delta;
    if (!delta) continue;
    if (typeof delta.content === 'string') text += delta.content;
    for (const tc of delta.toolCalls ?? []) {
      const i = tc.index ?? 0;
      calls[i] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
      if (tc.id && tc.id !== 'null') calls[i].id = tc.id;
      if (tc.function?.name) calls[i].function.name = tc.function.name;
      const args = tc.function?.arguments;
      calls[i].function.arguments += typeof args === 'string' ? args : JSON.stringify(args ?? '');
    }
  }
  return { text, calls };
}

for (let turn = 1; turn <= turns; turn++) {
  messages.push({ role: 'user', content: question(turn) });
  const call = await ask();
  count(call.calls.length);
  check(call.calls.length > 0, `turn ${turn}: no tool call: ${JSON.stringify(call)}`);
  messages.push({ role: 'assistant', content: call.text, toolCalls: call.calls });
  for (const tc of call.calls) {
    messages.push({ role: 'tool', toolCallId: tc.id, name: tc.function.name, content: readFile(JSON.parse(tc.function.arguments)) });
  }
  const answer = await ask();
  count();
  check(answer.text.startsWith('result: '), `turn ${turn}: answer ${JSON.stringify(answer)}`);
  messages.push({ role: 'assistant', content: answer.text });
}
done();
