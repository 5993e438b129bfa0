// A typed client for the guardian's /api. Every call resolves with the decoded JSON body or
// rejects with an ApiError carrying the server's code and message, so the UI can show the
// server's own words (e.g. a 400 from /api/holds/{id}/modify).

import type {
  AuditEntry,
  BacktestResult,
  Comment,
  Hold,
  HoldStatus,
  Info,
  Rule,
  RuleVersion,
  SearchPage,
  Session,
  Stats,
  WebhookTarget,
  Step,
  StepHold,
  TestResult,
  ValidateResult,
} from './types';
import { parseJsonExact } from './exactjson';
import { stringifyExact } from './jsonnumber';

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export interface Remember {
  scope: 'tool' | 'inputs';
  expiresIn: string;
}

export interface DecisionBody {
  operator: string;
  note?: string;
  params?: unknown;
  /** Sends an edit the rules would deny (modify only). */
  override?: boolean;
  remember?: Remember;
}

/** Builds a query string from the defined, non-empty values only. */
export function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '') continue;
    q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

const enc = encodeURIComponent;
/** Answers that carry what agents sent, shown with their numbers as sent. */
const EXACT = { exact: true } as const;

/** Who is signed in (team mode), from GET /api/auth/me. */
export interface Me {
  name: string;
  role: 'viewer' | 'reviewer' | 'admin' | string;
  csrfToken?: string;
  authRequired: boolean;
}

/** A header value must be Latin-1; other names travel percent-encoded. */
export function headerSafe(v: string): string {
  return /^[\x20-\x7e]*$/.test(v) ? v : encodeURIComponent(v);
}

/** An API key as GET /api/keys shows it (guardian/auth Key): never the key itself. */
export interface ApiKey {
  id: string;
  name: string;
  /** The agent id the key may speak for; '' for any agent. */
  agentId: string;
  /** The key's first characters, to tell keys apart. */
  prefix: string;
  createdAt: string;
  createdBy: string;
  expiresAt: string | null;
  revokedAt: string | null;
  lastUsedAt: string | null;
  status: 'active' | 'revoked' | 'expired' | string;
}

/** An operator account (guardian/auth User). */
export interface Account {
  name: string;
  role: 'viewer' | 'reviewer' | 'admin' | string;
  createdAt: string;
  updatedAt: string;
}

export class Api {
  readonly base: string;
  private readonly fetch: FetchLike;
  /** Sent as X-CSRF-Token on state-changing requests (team mode). */
  csrfToken = '';
  /** Sent as X-Vigil-Operator so rule edits are attributed to the operator. */
  operator = '';
  /** Called when the guardian answers 401: the sign-in expired or is needed. */
  onUnauthenticated: (() => void) | null = null;

  constructor(base = '', fetchImpl?: FetchLike) {
    this.base = base.replace(/\/+$/, '');
    this.fetch = fetchImpl ?? ((input, init) => globalThis.fetch(input, init));
  }

  url(path: string): string {
    return this.base + path;
  }

  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    opts: {
      raw?: { text: string; type: string };
      signal?: AbortSignal;
      text?: boolean;
      /** The answer carries an agent's JSON (steps, holds, audit entries): read its numbers exactly. */
      exact?: boolean;
    } = {},
  ): Promise<T> {
    const { raw, signal } = opts;
    const headers: Record<string, string> = { Accept: 'application/json' };
    if (this.operator) headers['X-Vigil-Operator'] = headerSafe(this.operator);
    if (this.csrfToken && method !== 'GET') headers['X-CSRF-Token'] = this.csrfToken;
    // The desktop window loads the UI from another origin and needs the session cookie too.
    const init: RequestInit = { method, headers, credentials: this.base ? 'include' : 'same-origin' };
    if (signal) init.signal = signal;
    if (raw) {
      init.body = raw.text;
      headers['Content-Type'] = raw.type;
    } else if (body !== undefined) {
      // As JSON.stringify, but exact JSON (a held step's edited params) goes as it is.
      init.body = stringifyExact(body);
      headers['Content-Type'] = 'application/json';
    }
    let res: Response;
    try {
      res = await this.fetch(this.url(path), init);
    } catch (err) {
      if (signal?.aborted) throw err;
      throw new ApiError(0, 'network', `Cannot reach the guardian (${err instanceof Error ? err.message : String(err)})`);
    }
    const text = await res.text();
    if (opts.text && res.ok) return text as T;
    let data: unknown = undefined;
    if (text) {
      try {
        // An agent's 12345678901234567891 would read as 12345678901234567000 (see exactjson).
        data = opts.exact ? parseJsonExact(text) : JSON.parse(text);
      } catch {
        if (!res.ok) throw new ApiError(res.status, 'http_' + res.status, text.trim().slice(0, 300) || res.statusText);
        throw new ApiError(res.status, 'bad_json', 'The guardian sent a response that is not JSON');
      }
    }
    if (!res.ok) {
      const e = (data as { error?: { code?: string; message?: string } } | undefined)?.error;
      if (res.status === 401 && !path.startsWith('/api/auth/')) this.onUnauthenticated?.();
      throw new ApiError(res.status, e?.code ?? 'http_' + res.status, e?.message ?? (res.statusText || `HTTP ${res.status}`));
    }
    return data as T;
  }

  info() {
    return this.request<Info>('GET', '/api/info');
  }

  me() {
    return this.request<Me>('GET', '/api/auth/me');
  }
  login(name: string, password: string) {
    return this.request<Me>('POST', '/api/auth/login', { name, password });
  }
  logout() {
    return this.request<unknown>('POST', '/api/auth/logout');
  }

  sessions(p: { limit?: number; before?: string; q?: string } = {}) {
    return this.request<{ sessions: Session[] | null; next?: string | null }>('GET', '/api/sessions' + query(p));
  }
  session(id: string) {
    return this.request<Session>('GET', `/api/sessions/${enc(id)}`);
  }
  sessionSteps(id: string, p: { after?: number; limit?: number } = {}) {
    return this.request<{ steps: Step[] | null; next: number | null }>('GET', `/api/sessions/${enc(id)}/steps` + query(p), undefined, EXACT);
  }
  step(seq: number) {
    return this.request<Step>('GET', `/api/steps/${seq}`, undefined, EXACT);
  }
  /** The hold of a held step: who decided, when, the note and the audited diff. */
  stepHold(seq: number) {
    return this.request<StepHold>('GET', `/api/steps/${seq}/hold`, undefined, EXACT);
  }
  control(id: string, action: 'pause' | 'resume' | 'block', operator: string, note?: string) {
    return this.request<unknown>('POST', `/api/sessions/${enc(id)}/${action}`, { operator, note: note ?? '' });
  }

  search(p: Record<string, string | number | undefined>, signal?: AbortSignal) {
    return this.request<SearchPage>('GET', '/api/search' + query(p), undefined, signal ? { signal } : {});
  }

  comments(sessionId: string) {
    return this.request<{ comments: Comment[] | null }>('GET', `/api/sessions/${enc(sessionId)}/comments`);
  }
  addComment(sessionId: string, body: { operator: string; text: string; stepSeq?: number }) {
    return this.request<Comment>('POST', `/api/sessions/${enc(sessionId)}/comments`, body);
  }

  stats() {
    return this.request<Stats>('GET', '/api/stats');
  }

  webhooks() {
    return this.request<{ targets: WebhookTarget[] | null }>('GET', '/api/webhooks');
  }

  holds(status: HoldStatus | 'all' = 'pending') {
    return this.request<{ holds: Hold[] | null; now?: string }>('GET', '/api/holds' + query({ status }), undefined, EXACT);
  }
  /**
   * One hold as the guardian's JSON text: its request has the agent's numbers as written, which
   * JSON.parse would round (see exactjson).
   */
  holdText(id: string) {
    return this.request<string>('GET', `/api/holds/${enc(id)}`, undefined, { text: true });
  }
  decide(id: string, action: 'approve' | 'deny' | 'modify', body: DecisionBody) {
    return this.request<Hold>('POST', `/api/holds/${enc(id)}/${action}`, body, EXACT);
  }

  rules() {
    return this.request<{ rules: Rule[] | null }>('GET', '/api/rules');
  }
  rule(id: string) {
    return this.request<Rule>('GET', `/api/rules/${enc(id)}`);
  }
  createRule(rule: Rule) {
    return this.request<Rule>('POST', '/api/rules', rule);
  }
  updateRule(id: string, rule: Rule) {
    return this.request<Rule>('PUT', `/api/rules/${enc(id)}`, rule);
  }
  deleteRule(id: string) {
    return this.request<unknown>('DELETE', `/api/rules/${enc(id)}`);
  }
  setEnabled(id: string, enabled: boolean) {
    return this.request<Rule>('POST', `/api/rules/${enc(id)}/${enabled ? 'enable' : 'disable'}`);
  }
  versions(id: string) {
    return this.request<{ versions: RuleVersion[] | null }>('GET', `/api/rules/${enc(id)}/versions`);
  }
  restore(id: string, version: number) {
    return this.request<Rule>('POST', `/api/rules/${enc(id)}/versions/${version}/restore`);
  }
  validate(body: { rule: Rule } | { when: string }, signal?: AbortSignal) {
    return this.request<ValidateResult>('POST', '/api/rules/validate', body, signal ? { signal } : {});
  }
  test(body: { rules: Rule[]; step: { method: string; params: unknown } } | { rules: Rule[]; seq: number }) {
    return this.request<TestResult>('POST', '/api/rules/test', body, EXACT);
  }
  backtest(rules: Rule[], limit: number) {
    return this.request<BacktestResult>('POST', '/api/rules/backtest', { rules, limit });
  }
  exportUrl(format: 'yaml' | 'json') {
    return this.url('/api/rules/export' + query({ format }));
  }
  importRules(text: string, type: string, mode: 'merge' | 'replace') {
    return this.request<unknown>('POST', '/api/rules/import' + query({ mode: mode === 'merge' ? 'merge' : undefined }), undefined, {
      raw: { text, type },
    });
  }

  keys() {
    return this.request<{ keys: ApiKey[] | null }>('GET', '/api/keys');
  }
  /** The secret is in this answer only: it is never shown again. */
  createKey(body: { name: string; agentId: string; expiresIn: string }) {
    return this.request<{ key: ApiKey; secret: string }>('POST', '/api/keys', body);
  }
  revokeKey(id: string) {
    return this.request<ApiKey>('POST', `/api/keys/${enc(id)}/revoke`);
  }
  users() {
    return this.request<{ users: Account[] | null }>('GET', '/api/users');
  }
  addUser(body: { name: string; role: string; password: string }) {
    return this.request<Account>('POST', '/api/users', body);
  }
  removeUser(name: string) {
    return this.request<Account>('DELETE', `/api/users/${enc(name)}`);
  }

  audit(p: { limit?: number; before?: number | string; type?: string; sessionId?: string; operator?: string } = {}) {
    return this.request<{ entries: AuditEntry[] | null; next?: number | string | null }>('GET', '/api/audit' + query(p), undefined, EXACT);
  }
}

/**
 * Where the API lives. In a browser served by `vigil serve` it is the page's own origin. The
 * desktop window may load the UI from elsewhere and name the guardian's loopback address with
 * `?api=http://127.0.0.1:7878` or by defining `window.__VIGIL_API__` before the app starts.
 */
export function resolveApiBase(loc: { search: string }, global: { __VIGIL_API__?: unknown }): string {
  if (typeof global.__VIGIL_API__ === 'string') return global.__VIGIL_API__;
  const fromQuery = new URLSearchParams(loc.search).get('api');
  if (fromQuery && /^https?:\/\//.test(fromQuery)) return fromQuery;
  return '';
}

/** The websocket URL of the live stream for an API base ('' = the page's origin). */
export function liveUrl(base: string, loc: { protocol: string; host: string }): string {
  if (base) return base.replace(/^http/, 'ws').replace(/\/+$/, '') + '/api/live';
  return (loc.protocol === 'https:' ? 'wss://' : 'ws://') + loc.host + '/api/live';
}
