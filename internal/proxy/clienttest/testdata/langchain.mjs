// LangChain JS through compactd's proxy: MODEL=chat is @langchain/openai's
// ChatOpenAI on Chat Completions, MODEL=responses the same with
// useResponsesApi, MODEL=anthropic @langchain/anthropic's ChatAnthropic.
// The agent loop is the usual one (bindTools, invoke, ToolMessage for
// each call); odd turns stream, even turns invoke.
import { ChatOpenAI } from '@langchain/openai';
import { ChatAnthropic } from '@langchain/anthropic';
import { HumanMessage, SystemMessage, ToolMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { compactdURL, providerKey, turns, headers, toolDescription, toolSchema, readFile, question, count, check, done } from './session.mjs';

const which = process.env.MODEL;
const chatModel = which === 'anthropic'
  ? new ChatAnthropic({ model: 'claude-sonnet-4-5', apiKey: providerKey, anthropicApiUrl: compactdURL, clientOptions: { defaultHeaders: headers }, maxRetries: 0, maxTokens: 1024 })
  : new ChatOpenAI({ model: 'gpt-4o', apiKey: providerKey, configuration: { baseURL: `${compactdURL}/v1`, defaultHeaders: headers }, maxRetries: 0, useResponsesApi: which === 'responses' });
const readTool = tool(async (input) => readFile(input), { name: 'read_file', description: toolDescription, schema: toolSchema });
const model = chatModel.bindTools([readTool]);
const messages = [new SystemMessage('You are a coding agent. Read files with read_file.')];

async function ask(stream) {
  if (!stream) return model.invoke(messages);
  let acc;
  for await (const chunk of await model.stream(messages)) acc = acc ? acc.concat(chunk) : chunk;
  return acc;
}

for (let turn = 1; turn <= turns; turn++) {
  messages.push(new HumanMessage(question(turn)));
  const stream = turn % 2 === 1;
  const ai = await ask(stream);
  count(ai.tool_calls?.length ?? 0);
  check(ai.tool_calls?.length > 0, `turn ${turn}: no tool call: ${JSON.stringify(ai)}`);
  messages.push(ai);
  for (const tc of ai.tool_calls) messages.push(new ToolMessage({ content: await readTool.invoke(tc.args), tool_call_id: tc.id }));
  const answer = await ask(stream);
  count();
  check(answer.text.startsWith('result: '), `turn ${turn}: answer ${JSON.stringify(answer.content)}`);
  messages.push(answer);
}
done();
