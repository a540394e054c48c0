// The official OpenAI and Anthropic SDKs, streaming through compactd's
// proxy from an upstream that misbehaves (FAULTS: a comma-separated list
// of the upstream's X-Hostile modes). For each SDK and fault it prints
// one JSON line: what the SDK raised while reading the stream (its error
// class, status, code and message), and the text it had read before. Nothing
// raised is reported as error "none".
//
// Environment: COMPACTD_URL, COMPACTD_TOKEN, OPENAI_KEY, ANTHROPIC_KEY,
// FAULTS.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const env = process.env;
const headers = (fault) => ({ 'X-Compactd-Token': env.COMPACTD_TOKEN, 'X-Hostile': fault });
const openai = (fault) => new OpenAI({ baseURL: `${env.COMPACTD_URL}/v1`, apiKey: env.OPENAI_KEY, defaultHeaders: headers(fault), maxRetries: 0 });
const anthropic = (fault) => new Anthropic({ baseURL: env.COMPACTD_URL, apiKey: env.ANTHROPIC_KEY, defaultHeaders: headers(fault), maxRetries: 0 });

// Each run appends the text it reads to got.text as it reads it.
const runs = {
  async openai(fault, got) {
    const stream = await openai(fault).chat.completions.create({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    for await (const chunk of stream) got.text += chunk.choices?.[0]?.delta?.content ?? '';
  },
  async anthropic(fault, got) {
    const stream = await anthropic(fault).messages.create({ model: 'claude-sonnet-4-5', max_tokens: 10, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    for await (const ev of stream) if (ev.type === 'content_block_delta') got.text += ev.delta.text ?? '';
  },
};

for (const fault of env.FAULTS.split(',')) {
  for (const [sdk, run] of Object.entries(runs)) {
    const got = { text: '' };
    let error = 'none', status = null, message = '', code = null;
    try {
      await run(fault, got);
    } catch (e) {
      error = e.constructor.name;
      status = e.status ?? null;
      message = String(e.message);
      code = e.code ?? null;
    }
    console.log(JSON.stringify({ sdk, fault, error, status, code, message, text: got.text }));
  }
}
