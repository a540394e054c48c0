// Clients on compactd's Unix socket, as docs/quickstarts.md shows: undici's
// fetch with an Agent whose connect.socketPath is the socket, handed to
// each client as its fetch; the base URL's host is then any name
// (localhost). No compactd token: the socket is owner-only.
//
// Environment: COMPACTD_SOCKET, CONVERSATION (a prefix), OPENAI_KEY,
// ANTHROPIC_KEY.
import { Agent, fetch as undiciFetch } from 'undici';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { generateText } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';

const env = process.env;
const dispatcher = new Agent({ connect: { socketPath: env.COMPACTD_SOCKET } });
const fetch = (url, init) => undiciFetch(url, { ...init, dispatcher });
const conv = (name) => ({ 'X-Compactd-Conversation': `${env.CONVERSATION}-${name}` });
const out = {};

const openai = new OpenAI({ baseURL: 'http://localhost/v1', apiKey: env.OPENAI_KEY, fetch, defaultHeaders: conv('openai'), maxRetries: 0 });
const c = await openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hello over the socket' }] });
out.openai = c.choices[0].message.content;

const anthropic = new Anthropic({ baseURL: 'http://localhost', apiKey: env.ANTHROPIC_KEY, fetch, defaultHeaders: conv('anthropic'), maxRetries: 0 });
const m = await anthropic.messages.stream({ model: 'claude-sonnet-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'hello over the socket' }] }).finalMessage();
out.anthropic = m.content[0].text;

const ai = createOpenAI({ baseURL: 'http://localhost/v1', apiKey: env.OPENAI_KEY, fetch, headers: conv('ai-sdk') });
const g = await generateText({ model: ai.chat('gpt-4o'), prompt: 'hello over the socket', maxRetries: 0 });
out['ai-sdk'] = g.text;

console.log(JSON.stringify(out));
