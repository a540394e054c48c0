// What every client script shares: the settings internal/proxy/clienttest
// passes, the agent's one tool (read a file, by path and record id) and
// its outputs, and the end of a run.
//
// Environment: COMPACTD_URL (the daemon's TCP listener, http://host:port),
// COMPACTD_TOKEN, CONVERSATION (sent as X-Compactd-Conversation, so the
// test finds the session in /v1/status), PROVIDER_KEY, TURNS,
// TOOL_OUTPUT_WORDS.
const env = process.env;

export const compactdURL = env.COMPACTD_URL;
export const providerKey = env.PROVIDER_KEY || 'sk-local';
export const turns = Number(env.TURNS || 60);
export const headers = { 'X-Compactd-Token': env.COMPACTD_TOKEN, 'X-Compactd-Conversation': env.CONVERSATION };

export const toolDescription = 'Reads a file of the repository; record_id names the record it belongs to.';
// The tool's parameters, as JSON schema (the scripts that take a zod
// schema build the same one).
export const toolSchema = {
  type: 'object',
  properties: { path: { type: 'string' }, record_id: { type: 'string' } },
  required: ['path', 'record_id'],
  additionalProperties: false,
};

// readFile is the tool: a long output naming the file and the record, so
// the conversation grows past compactd's trigger.
export function readFile({ path, record_id }) {
  return `${path} (${record_id}):\n` + `func handle${record_id.replace(/\W/g, '')}() {}\n`.repeat(Number(env.TOOL_OUTPUT_WORDS || 40) / 4);
}

export function question(turn) {
  return `Turn ${turn}: read the next file and tell me what it holds.`;
}

let requests = 0;
let calls = 0;

// count notes a request the client made (and the tool calls it got).
export function count(n = 0) {
  requests++;
  calls += n;
}

// check ends the run when an answer is not what the provider's script says.
export function check(ok, what) {
  if (!ok) fail(what);
}

export function fail(msg) {
  console.error(typeof msg === 'string' ? msg : (msg?.stack || String(msg)));
  process.exit(1);
}

// done prints the run's summary line, read by the Go test.
export function done() {
  console.log(JSON.stringify({ requests, tool_calls: calls }));
}

process.on('unhandledRejection', fail);
