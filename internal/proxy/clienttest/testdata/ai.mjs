// The Vercel AI SDK through compactd's proxy: MODEL=responses is
// @ai-sdk/openai's default model (the Responses API), MODEL=chat its
// .chat() model (Chat Completions), MODEL=anthropic @ai-sdk/anthropic.
// Each turn lets the SDK run its tool loop (call, execute, answer); odd
// turns with streamText, even turns with generateText.
import { generateText, streamText, tool, jsonSchema, stepCountIs } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { compactdURL, providerKey, turns, headers, toolDescription, toolSchema, readFile, question, count, check, fail, done } from './session.mjs';

const which = process.env.MODEL;
let model;
if (which === 'anthropic') {
  model = createAnthropic({ baseURL: `${compactdURL}/v1`, apiKey: providerKey, headers })('claude-sonnet-4-5');
} else {
  const openai = createOpenAI({ baseURL: `${compactdURL}/v1`, apiKey: providerKey, headers });
  model = which === 'chat' ? openai.chat('gpt-4o') : openai('gpt-4o');
}
const tools = { read_file: tool({ description: toolDescription, inputSchema: jsonSchema(toolSchema), execute: async (input) => readFile(input) }) };
const messages = [];
const system = 'You are a coding agent. Read files with read_file.';

for (let turn = 1; turn <= turns; turn++) {
  messages.push({ role: 'user', content: question(turn) });
  const req = { model, system, messages, tools, stopWhen: stepCountIs(4), maxRetries: 0 };
  let steps, response, text;
  if (turn % 2 === 1) {
    const r = streamText({ ...req, onError: ({ error }) => fail(error) });
    text = await r.text;
    steps = await r.steps;
    response = await r.response;
  } else {
    const r = await generateText(req);
    ({ steps, response, text } = r);
  }
  for (const s of steps) count(s.toolCalls.length);
  check(steps.length === 2 && steps[0].toolCalls.length > 0, `turn ${turn}: ${steps.length} steps, calls ${JSON.stringify(steps[0]?.toolCalls)}`);
  check(text.startsWith('result: '), `turn ${turn}: answer ${JSON.stringify(text)}`);
  messages.push(...response.messages);
}
done();
