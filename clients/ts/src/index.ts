/**
 * A client for the compactd daemon's HTTP/JSON API, over its Unix socket or
 * its loopback TCP listener (with a bearer token). No runtime dependencies:
 * node's `http` module only.
 *
 *     import { Client, compact } from "compactd";
 *
 *     const messages = await compact(history, { policy: "sliding", model: "gpt-4o" });
 *
 *     const c = new Client();   // $COMPACTD_SOCKET, else the default socket
 *     const resp = await c.compact(history, { policy: "sliding", config: { window_size: 8 } });
 */

import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";

import type {
  CompactRequest,
  CompactResponse,
  ConfigDocument,
  Conversation,
  ErrorBody,
  ErrorCode,
  Health,
  Message,
  ResponsesItem,
  Policy,
  PolicyList,
  RequestsPage,
  Status,
} from "./types.js";
import { ERROR_CODE_STATUS } from "./types.js";

export * from "./types.js";

/** The default request timeout: the daemon's default request_timeout (2m) plus a margin. */
export const DEFAULT_TIMEOUT_MS = 150_000;

/**
 * The daemon's socket, found the way the compactd command finds it:
 * $COMPACTD_SOCKET, else $XDG_RUNTIME_DIR/compactd.sock, else
 * $XDG_STATE_HOME/compactd/compactd.sock (~/.local/state/compactd/compactd.sock).
 */
export function defaultSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.COMPACTD_SOCKET) return env.COMPACTD_SOCKET;
  if (env.XDG_RUNTIME_DIR) return path.join(env.XDG_RUNTIME_DIR, "compactd.sock");
  const state = env.XDG_STATE_HOME || path.join(env.HOME || os.tmpdir(), ".local", "state");
  return path.join(state, "compactd", "compactd.sock");
}

/** The base class of every error this package throws. */
export class CompactdError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The daemon could not be reached (no socket, connection refused, timeout). */
export class DaemonUnavailable extends CompactdError {
  constructor(readonly address: string, cause: unknown) {
    super(`compactd: cannot reach the daemon at ${address}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

/**
 * An error answer from the daemon: `code` is the API's stable error code
 * (see ErrorCode), `status` the HTTP status.
 */
export class APIError extends CompactdError {
  constructor(readonly status: number, readonly code: ErrorCode | `http_${number}`, readonly detail: string) {
    super(`compactd: ${code} (HTTP ${status}): ${detail}`);
  }

  /** Reports whether err is an APIError with this code. */
  static is(err: unknown, code: ErrorCode): err is APIError {
    return err instanceof APIError && err.code === code;
  }
}

/**
 * Options of Client.compact: the request's fields besides its messages.
 * With `format: "anthropic"` the messages are an Anthropic Messages
 * conversation and `system` its top-level system prompt; the answer comes
 * back in that form.
 */
export type CompactOptions = Omit<CompactRequest, "messages">;

/** Options of Client.compactProxied: what runs, and its settings. */
export type CompactProxiedOptions = Pick<CompactRequest, "policy" | "pipeline" | "config">;

/**
 * Options of Client.status: at most `limit` conversations (the daemon's
 * default is 100) of those matching `q` (found in the id, title, user,
 * model, tags or pipeline, case-insensitively), carrying every tag in
 * `tag`, and of `user`.
 */
export interface StatusOptions {
  limit?: number;
  q?: string;
  tag?: string | string[];
  user?: string;
}

/** Throws a TypeError unless value is a string (non-empty unless allowEmpty). */
function wantString(what: string, value: unknown, allowEmpty = false): asserts value is string {
  if (typeof value !== "string" || (!allowEmpty && value === "")) {
    throw new TypeError(`compactd: ${what} must be a ${allowEmpty ? "" : "non-empty "}string, not ${describe(value)}`);
  }
}

function wantObject(what: string, value: unknown): asserts value is Record<string, unknown> | undefined {
  if (value !== undefined && (typeof value !== "object" || value === null || Array.isArray(value))) {
    throw new TypeError(`compactd: ${what} must be an options object, not ${describe(value)}`);
  }
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? value.slice(0, 40) + "…" : value);
  if (typeof value === "number" || typeof value === "boolean") return `${typeof value} ${String(value)}`;
  return typeof value;
}

/** The query string of Client.status's options (validated). */
function statusQuery(options: StatusOptions | undefined): string {
  wantObject("status()'s argument ({limit, q, tag, user})", options as unknown);
  const o: StatusOptions = options ?? {};
  const known = new Set(["limit", "q", "tag", "user"]);
  for (const k of Object.keys(o)) {
    if (!known.has(k)) throw new TypeError(`compactd: status() has no option ${JSON.stringify(k)} (options: limit, q, tag, user)`);
  }
  const params = new URLSearchParams();
  if (o.limit !== undefined) {
    if (typeof o.limit !== "number" || !Number.isInteger(o.limit)) throw new TypeError(`compactd: status()'s limit must be an integer, not ${describe(o.limit)}`);
    params.set("limit", String(o.limit));
  }
  if (o.q !== undefined) {
    wantString("status()'s q", o.q, true);
    if (o.q !== "") params.set("q", o.q);
  }
  if (o.tag !== undefined) {
    const tags = Array.isArray(o.tag) ? o.tag : [o.tag];
    for (const t of tags) {
      wantString("status()'s tag", t);
      params.append("tag", t);
    }
  }
  if (o.user !== undefined) {
    wantString("status()'s user", o.user, true);
    if (o.user !== "") params.set("user", o.user);
  }
  const q = params.toString();
  return q === "" ? "" : "?" + q;
}

export interface ClientOptions {
  /** The Unix socket (default: defaultSocketPath()). */
  socketPath?: string;
  /** The loopback TCP listener, "127.0.0.1:7077", instead of the socket. */
  tcp?: string;
  /** The TCP listener's bearer token. */
  token?: string;
  /** How long a request may take, in milliseconds (default DEFAULT_TIMEOUT_MS). */
  timeoutMs?: number;
}

/**
 * Calls a compactd daemon. Safe to share: requests are independent and
 * connections are kept alive for reuse.
 */
export class Client {
  readonly socketPath?: string;
  readonly tcp?: string;
  private readonly token?: string;
  private readonly timeoutMs: number;
  private readonly agent: http.Agent;

  constructor(options: ClientOptions = {}) {
    if (options.tcp && options.socketPath) throw new TypeError("give socketPath or tcp, not both");
    this.tcp = options.tcp;
    this.socketPath = options.tcp ? undefined : options.socketPath || defaultSocketPath();
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.agent = new http.Agent({ keepAlive: true });
  }

  /** Where the daemon is: the socket path, or the TCP host:port. */
  get address(): string {
    return this.tcp ?? this.socketPath ?? "";
  }

  /** Closes idle connections (a process with a Client open exits anyway). */
  close(): void {
    this.agent.destroy();
  }

  /**
   * Sends a request and returns the decoded JSON answer (or the text of a
   * non-JSON answer). An error answer throws an APIError.
   */
  request<T = unknown>(method: string, urlPath: string, body?: unknown): Promise<T> {
    // Checked here, so a bad path is our TypeError, not node's
    // ERR_UNESCAPED_CHARACTERS or ERR_INVALID_CHAR.
    if (typeof method !== "string" || !/^[A-Z]+$/.test(method)) {
      return Promise.reject(new TypeError(`compactd: request()'s method must be an HTTP method such as "GET", not ${describe(method)}`));
    }
    if (typeof urlPath !== "string" || !urlPath.startsWith("/") || /[^\x21-\x7e]/.test(urlPath)) {
      return Promise.reject(new TypeError(`compactd: request()'s path must start with "/" and be URL-encoded (no spaces or other characters to escape), not ${describe(urlPath)}`));
    }
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body), "utf8");
    const headers: http.OutgoingHttpHeaders = { Accept: "application/json" };
    if (data) {
      headers["Content-Type"] = "application/json";
      headers["Content-Length"] = data.length;
    }
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const target: http.RequestOptions = this.tcp
      ? { host: hostOf(this.tcp), port: Number(this.tcp.slice(this.tcp.lastIndexOf(":") + 1)) }
      : { socketPath: this.socketPath, host: "localhost" };
    return new Promise<T>((resolve, reject) => {
      const req = http.request({ ...target, method, path: urlPath, headers, agent: this.agent, timeout: this.timeoutMs }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", (e) => reject(new DaemonUnavailable(this.address, e)));
        res.on("end", () => {
          const raw = Buffer.concat(chunks).toString("utf8");
          const json = (res.headers["content-type"] ?? "").startsWith("application/json");
          const status = res.statusCode ?? 0;
          if (status >= 300) {
            reject(errorFor(status, json ? raw : "", raw));
            return;
          }
          try {
            resolve((json ? JSON.parse(raw) : raw) as T);
          } catch (e) {
            reject(new CompactdError(`compactd: the answer to ${method} ${urlPath} is not JSON: ${String(e)}`));
          }
        });
      });
      req.on("timeout", () => req.destroy(new Error(`no answer within ${this.timeoutMs} ms`)));
      req.on("error", (e) => reject(new DaemonUnavailable(this.address, e)));
      req.end(data);
    });
  }

  /**
   * Compacts a conversation (POST /v1/compact). `policy` or `pipeline`
   * names what runs (neither: the daemon's default); `config` overrides its
   * settings. When a plugin fails, the answer holds the input unchanged
   * and the failure in `warnings`: messages are never lost.
   */
  async compact(messages: (Message | ResponsesItem)[], options: CompactOptions = {}): Promise<CompactResponse> {
    if (!Array.isArray(messages)) throw new TypeError(`compactd: compact()'s messages must be an array, not ${describe(messages)}`);
    wantObject("compact()'s options", options);
    const body: CompactRequest = { ...options, messages };
    return this.request<CompactResponse>("POST", "/v1/compact", body);
  }

  /**
   * Compacts the last request the daemon's proxy forwarded for this
   * conversation (POST /v1/compact with only `conversation_id`). The
   * answer is in that request's format (`format` says which), and the
   * conversation is flagged `needs_compaction`, so the agent's next
   * request through the proxy is compacted on its way. Rejects with a
   * `not_found` APIError when the proxy holds no request of it.
   */
  async compactProxied(conversationId: string, options: CompactProxiedOptions = {}): Promise<CompactResponse> {
    wantString("compactProxied()'s conversationId", conversationId);
    wantObject("compactProxied()'s options", options);
    const body: CompactRequest = { ...options, conversation_id: conversationId };
    return this.request<CompactResponse>("POST", "/v1/compact", body);
  }

  /** Every plugin file and the policy it serves (GET /v1/policies). */
  async policies(): Promise<Policy[]> {
    return (await this.request<PolicyList>("GET", "/v1/policies")).policies;
  }

  /** One policy (GET /v1/policies/{name}). */
  async policy(name: string): Promise<Policy> {
    wantString("policy()'s name", name);
    return this.request<Policy>("GET", `/v1/policies/${encodeURIComponent(name)}`);
  }

  /**
   * Loads a plugin file again now (POST /v1/policies/{name}/retry),
   * lifting its quarantine or the failure of its bytes the daemon
   * remembers; `name` is the policy, or the file's name. Resolves to the
   * file's state once the load is over.
   */
  async retryPolicy(name: string): Promise<Policy> {
    wantString("retryPolicy()'s name", name);
    return this.request<Policy>("POST", `/v1/policies/${encodeURIComponent(name)}/retry`);
  }

  /**
   * Uptime, totals and the most recently seen conversations (GET
   * /v1/status), searched by `options` (see StatusOptions):
   *
   *     await c.status({ limit: 20, tag: "nightly", q: "parser" });
   */
  async status(options: StatusOptions = {}): Promise<Status> {
    return this.request<Status>("GET", "/v1/status" + statusQuery(options));
  }

  /** One conversation, with last_compaction: what its last compaction did. */
  async conversation(id: string): Promise<Conversation> {
    wantString("conversation()'s id", id);
    return this.request<Conversation>("GET", `/v1/status?conversation_id=${encodeURIComponent(id)}`);
  }

  /**
   * The request log, newest first (GET /v1/requests): one conversation's
   * records with `conversation`, else every record the daemon holds;
   * `limit` per page (the daemon's default is 50), `cursor` the previous
   * page's `next_cursor`.
   */
  requests(options: { conversation?: string; limit?: number; cursor?: string } = {}): Promise<RequestsPage> {
    const query = new URLSearchParams();
    for (const key of ["conversation", "limit", "cursor"] as const) {
      const value = options[key];
      if (value !== undefined) query.set(key, String(value));
    }
    const qs = query.toString();
    return this.request<RequestsPage>("GET", qs ? `/v1/requests?${qs}` : "/v1/requests");
  }

  /** The running config and its problems (GET /v1/config). */
  config(): Promise<ConfigDocument> {
    return this.request<ConfigDocument>("GET", "/v1/config");
  }

  /**
   * Changes settings (PUT /v1/config): a JSON merge patch (objects merge,
   * null deletes a key), validated and written to the daemon's config
   * file; an invalid one changes nothing.
   */
  async updateConfig(patch: Record<string, unknown>): Promise<ConfigDocument> {
    if (typeof patch !== "object" || patch === null || Array.isArray(patch)) {
      throw new TypeError(`compactd: updateConfig()'s patch must be an object, not ${describe(patch)}`);
    }
    return this.request<ConfigDocument>("PUT", "/v1/config", patch);
  }

  /** Liveness (GET /healthz). */
  health(): Promise<Health> {
    return this.request<Health>("GET", "/healthz");
  }

  /** The Prometheus metrics, as text (GET /metrics). */
  metrics(): Promise<string> {
    return this.request<string>("GET", "/metrics");
  }

  /** The API's OpenAPI document (GET /v1/openapi.json). */
  openapi(): Promise<Record<string, unknown>> {
    return this.request<Record<string, unknown>>("GET", "/v1/openapi.json");
  }
}

function hostOf(addr: string): string {
  const host = addr.slice(0, addr.lastIndexOf(":"));
  return host.replace(/^\[|\]$/g, "") || "127.0.0.1";
}

function errorFor(status: number, json: string, raw: string): APIError {
  if (json) {
    try {
      const body = JSON.parse(json) as ErrorBody;
      if (body.error && typeof body.error.code === "string") {
        return new APIError(status, body.error.code, body.error.message);
      }
    } catch {
      // not the error shape: fall through
    }
  }
  return new APIError(status, `http_${status}`, raw.trim());
}

/** Every error code the API defines, with its HTTP status. */
export const ERROR_CODES = ERROR_CODE_STATUS;

/**
 * Compacts `messages` and returns the list to send to the model: the
 * one-call helper for agent loops. It talks to the daemon on the default
 * socket unless `client` is given. A policy that fails returns the
 * messages unchanged, as the daemon does. An Anthropic conversation keeps
 * its form (`format: "anthropic"`, with its `system` prompt, which stays
 * as it is), and so does an OpenAI Responses input (`format: "responses"`,
 * its `instructions` as `system`).
 *
 *     messages = await compact(messages, { policy: "sliding", model: "gpt-4o" });
 *     messages = await compact(messages, { policy: "sliding", format: "anthropic", system });
 */
export async function compact<M extends Message | ResponsesItem = Message>(messages: M[], options: CompactOptions & { client?: Client } = {}): Promise<M[]> {
  const { client, ...request } = options;
  const c = client ?? new Client();
  try {
    return (await c.compact(messages, request)).messages as M[];
  } finally {
    if (!client) c.close();
  }
}
