// The official Anthropic SDK on Messages, through compactd's proxy: a
// tool-using session, odd turns streamed, even turns JSON.
import Anthropic from '@anthropic-ai/sdk';
import { compactdURL, providerKey, turns, headers, toolDescription, toolSchema, readFile, question, count, check, done } from './session.mjs';

const client = new Anthropic({ baseURL: compactdURL, apiKey: providerKey, defaultHeaders: headers, maxRetries: 0 });
const tools = [{ name: 'read_file', description: toolDescription, input_schema: toolSchema }];
const messages = [];

async function ask(stream) {
  const req = { model: 'claude-sonnet-4-5', max_tokens: 1024, system: 'You are a coding agent. Read files with read_file.', messages, tools };
  return stream ? client.messages.stream(req).finalMessage() : client.messages.create(req);
}

for (let turn = 1; turn <= turns; turn++) {
  messages.push({ role: 'user', content: question(turn) });
  const stream = turn % 2 === 1;
  const m = await ask(stream);
  const uses = m.content.filter((b) => b.type === 'tool_use');
  count(uses.length);
  check(uses.length > 0 && m.stop_reason === 'tool_use', `turn ${turn}: no tool_use: ${JSON.stringify(m)}`);
  messages.push({ role: 'assistant', content: m.content });
  messages.push({ role: 'user', content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: readFile(u.input) })) });
  const a = await ask(stream);
  count();
  check(a.content[0]?.text?.startsWith('result: '), `turn ${turn}: answer ${JSON.stringify(a.content)}`);
  messages.push({ role: 'assistant', content: a.content });
}
done();
