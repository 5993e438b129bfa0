// Turns a stored AOS request into something an operator can read at a glance: a title, the
// text, the tool and its inputs, the reasoning. Accepts the spec's variants (see ERRATA).

import { bidiBalanced as bidi } from './bidi';
import { diffJson } from './diff';
import { JsonNumber, stringifyExact } from './jsonnumber';

export interface Section {
  label: string;
  text: string;
}

export interface Readable {
  title: string;
  subtitle?: string;
  role?: string;
  tool?: string;
  inputs?: { name: string; value: unknown }[];
  sections: Section[];
  reasoning?: string;
  isError?: boolean;
  agent?: string;
  user?: string;
  turnId?: string;
  stepId?: string;
  /** The sender and receiver of an A2A message, when the step names them. */
  peers?: { from?: string; to?: string };
}

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : {});
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/** Names an A2A peer: a string, or the name, id or url of an object (as the guardian does). */
export function peerName(v: unknown): string | undefined {
  if (typeof v === 'string') return v || undefined;
  const o = obj(v);
  return str(o.name) ?? str(o.id) ?? str(o.url);
}

/** Text of AOS parts: text as is, files by name or URI, data as JSON. */
export function partsText(parts: unknown): string {
  return arr(parts)
    .map((p) => {
      const o = obj(p);
      if (o.kind === 'text' || typeof o.text === 'string') return String(o.text ?? '');
      if (o.kind === 'file') {
        const f = obj(o.file);
        return `[file ${str(f.name) ?? str(f.uri) ?? ''}${str(f.mimeType) ? ` (${f.mimeType})` : ''}]`;
      }
      if (o.kind === 'data') return stringifyExact(o.data, 2);
      return '';
    })
    .filter((s) => s !== '')
    .join('\n');
}

export const KIND_LABEL: Record<string, string> = {
  trigger: 'Trigger',
  message: 'Message',
  knowledge: 'Knowledge',
  memoryStore: 'Memory store',
  memoryRetrieval: 'Memory retrieval',
  toolCall: 'Tool call',
  toolResult: 'Tool result',
  mcp: 'MCP',
  a2a: 'A2A',
  ping: 'Ping',
};

export function kindOf(method: string): string {
  switch (method) {
    case 'steps/agentTrigger':
      return 'trigger';
    case 'steps/message':
      return 'message';
    case 'steps/knowledgeRetrieval':
      return 'knowledge';
    case 'steps/memoryStore':
      return 'memoryStore';
    case 'steps/memoryContextRetrieval':
      return 'memoryRetrieval';
    case 'steps/toolCallRequest':
      return 'toolCall';
    case 'steps/toolCallResult':
      return 'toolResult';
    case 'protocols/MCP':
      return 'mcp';
    case 'ping':
      return 'ping';
    default:
      return method === 'protocols/A2A' || method.startsWith('message/') || method.startsWith('tasks/') ? 'a2a' : 'unknown';
  }
}

/** Accepts either a whole JSON-RPC request or a bare {method, params}. */
export function readable(request: unknown, fallbackMethod = ''): Readable {
  const req = obj(request);
  const method = str(req.method) ?? fallbackMethod;
  const p = obj(req.params);
  const ctx = obj(p.context);
  const agent = obj(ctx.agent);
  const user = obj(ctx.user);
  const kind = kindOf(method);
  const r: Readable = {
    title: KIND_LABEL[kind] ?? method,
    sections: [],
    agent: str(agent.name) ?? str(agent.id),
    user: str(user.name) ?? str(user.email) ?? str(user.id),
    turnId: str(ctx.turnId),
    stepId: str(ctx.stepId),
    reasoning: str(p.reasoning),
  };
  switch (kind) {
    case 'trigger': {
      const t = obj(p.trigger);
      const ev = obj(t.event);
      r.subtitle = [str(t.type), str(ev.type)].filter(Boolean).map((x) => bidi(x!)).join(' · ') || undefined;
      const text = partsText(t.content);
      if (text) r.sections.push({ label: 'Trigger', text });
      break;
    }
    case 'message': {
      const m = obj(p.message);
      r.role = str(m.role);
      r.title = r.role ? `Message from ${bidi(r.role)}` : 'Message';
      const text = partsText(m.content);
      if (text) r.sections.push({ label: 'Text', text });
      const cites = arr(p.citations ?? p.citation)
        .map((c) => {
          const o = obj(c);
          return str(o.url) ?? str(o.name) ?? str(o.id) ?? '';
        })
        .filter(Boolean);
      if (cites.length) r.sections.push({ label: 'Citations', text: cites.join('\n') });
      break;
    }
    case 'knowledge': {
      const k = obj(p.knowledgeStep);
      if (str(k.query)) r.sections.push({ label: 'Query', text: String(k.query) });
      const kw = arr(k.keywords).map(String);
      if (kw.length) r.sections.push({ label: 'Keywords', text: kw.join(', ') });
      arr(k.results).forEach((res, i) => {
        const o = obj(res);
        r.sections.push({ label: `Result ${i + 1}${str(o.id) ? ` · ${o.id}` : ''}`, text: String(o.content ?? '') });
      });
      break;
    }
    case 'memoryStore':
    case 'memoryRetrieval': {
      arr(p.memory).forEach((m, i) => r.sections.push({ label: `Memory ${i + 1}`, text: String(m) }));
      break;
    }
    case 'toolCall': {
      const t = obj(p.toolCallRequest);
      r.tool = str(t.toolId);
      r.title = r.tool ? `Tool call · ${bidi(r.tool)}` : 'Tool call';
      r.subtitle = str(t.executionId) ? `execution ${bidi(String(t.executionId))}` : undefined;
      r.inputs = arr(t.inputs).map((i) => {
        const o = obj(i);
        return { name: str(o.name) ?? str(o.id) ?? '?', value: o.value };
      });
      break;
    }
    case 'toolResult': {
      const nested = obj(p.toolCallResult);
      const exec = str(p.executionId) ?? str(nested.executionId);
      const result = obj(p.result ?? nested.result);
      r.subtitle = exec ? `execution ${bidi(exec)}` : undefined;
      r.isError = result.isError === true;
      const text = partsText(result.outputs);
      if (text) r.sections.push({ label: r.isError ? 'Error output' : 'Output', text });
      break;
    }
    case 'mcp': {
      const msg = p.jsonrpc === '2.0' ? p : obj(p.message);
      const mp = obj(msg.params);
      const mm = str(msg.method);
      if (mm === 'tools/call') {
        r.tool = str(mp.name);
        r.inputs = Object.entries(obj(mp.arguments)).map(([name, value]) => ({ name, value }));
      } else if (msg.result !== undefined || msg.error !== undefined) {
        const res = obj(msg.result);
        const text = partsText(res.content);
        if (text) r.sections.push({ label: res.isError === true ? 'Error output' : 'Result', text });
        r.isError = res.isError === true || msg.error !== undefined;
        const err = obj(msg.error);
        if (str(err.message)) r.sections.push({ label: 'Error', text: String(err.message) });
      } else if (mm && Object.keys(mp).length) {
        r.inputs = Object.entries(mp).map(([name, value]) => ({ name, value }));
      }
      // "MCP tools/call · read_file": the method says what kind of message it is, the tool
      // which one; a response has no method and is named by its id.
      const what = mm ?? (msg.result !== undefined || msg.error !== undefined ? `response${msg.id !== undefined ? ` to #${String(msg.id)}` : ''}` : undefined);
      r.title = ['MCP' + (what ? ` ${bidi(what)}` : ''), r.tool && bidi(r.tool)].filter(Boolean).join(' · ');
      r.subtitle = str(msg.id) || typeof msg.id === 'number' || msg.id instanceof JsonNumber ? `id ${bidi(String(msg.id))}` : undefined;
      break;
    }
    case 'a2a': {
      // Native layout: params.payload with params.context.{from,to}; older: params.message;
      // inline: params is the A2A request itself (ERRATA 7).
      const inline = p.jsonrpc === '2.0';
      const inner = inline ? p : obj(p.payload ?? p.message ?? (method !== 'protocols/A2A' ? p : undefined));
      const m = inner.parts ? inner : obj(obj(inner.params).message ?? inner.message ?? obj(obj(inner.result).status).message);
      const a2aMethod = method !== 'protocols/A2A' ? method : str(inner.method);
      const from = peerName(ctx.from);
      const to = peerName(ctx.to);
      r.role = str(m.role);
      r.peers = from || to ? { from, to } : undefined;
      const who = from || to ? `${bidi(from ?? '?')} → ${bidi(to ?? '?')}` : undefined;
      r.title = ['A2A', [a2aMethod && bidi(a2aMethod), who].filter(Boolean).join(' · ')].filter(Boolean).join(' ');
      r.subtitle = a2aMethod;
      const text = partsText(m.parts);
      if (text) r.sections.push({ label: 'Message', text });
      break;
    }
  }
  return r;
}

/** The params of a JSON-RPC request (what edit-and-approve edits). */
export function paramsOf(request: unknown): unknown {
  return obj(request).params ?? {};
}

/** Formats an input value for display: strings raw, everything else as compact JSON. */
export function valueText(v: unknown): string {
  if (typeof v === 'string') return v;
  // A number read exactly (exactjson) keeps its digits.
  return stringifyExact(v, 2);
}

/** What Vigil answered for a step, read from the stored JSON-RPC response. */
export interface Answer {
  decision?: string;
  message?: string;
  reasoning?: string;
  reasonCodes: string[];
  /** The deciding rule (result.data.ruleId), also the session controls' pseudo-rules. */
  ruleId?: string;
  /** The request the agent was told to use instead (decision modify). */
  modifiedRequest?: unknown;
  /** The code as the guardian stored it (a JsonNumber when a JS number would change it). */
  error?: { code: number | JsonNumber; message: string };
}

export function answerOf(response: unknown): Answer {
  const res = obj(response);
  const result = obj(res.result);
  const err = obj(res.error);
  return {
    decision: str(result.decision),
    message: str(result.message),
    reasoning: str(result.reasoning),
    reasonCodes: arr(result.reasonCode).map(String),
    ruleId: str(obj(result.data).ruleId),
    modifiedRequest: result.modifiedRequest && typeof result.modifiedRequest === 'object' ? result.modifiedRequest : undefined,
    error: typeof err.code === 'number' || err.code instanceof JsonNumber ? { code: err.code, message: String(err.message ?? '') } : undefined,
  };
}

/** heldOutcome of a step denied because its hold's end could not be stored (HOLD_NOT_RECORDED). */
export const NOT_RECORDED = 'outcome not recorded';

/**
 * How a held step ended, as its decision chip says it: 'after review' when an operator
 * decided, else what happened instead ('timed out', 'agent disconnected', 'interrupted',
 * NOT_RECORDED). From the hold's status when known (GET /api/steps/{seq}/hold), otherwise from
 * the answer the guardian stored (guardian/holds outcomeOf); 'not reviewed' for a step stored
 * without an answer (its guardian stopped while it waited), and 'held for review' when the
 * step carries neither (a search hit, a step cut short on the live stream).
 */
export function heldOutcome(response: unknown, status?: string): string {
  // The hold ended (timed out, its agent left, the guardian stopped) but that end could not be
  // stored, so the agent was denied whatever it decided: the answer says so, whatever status
  // the hold was stored with in the end ('interrupted', or the lost end written late).
  if (response && answerOf(response).reasonCodes.includes('HOLD_NOT_RECORDED')) return NOT_RECORDED;
  switch (status) {
    case 'approved':
    case 'denied':
    case 'modified':
      return 'after review';
    case 'timedOut':
      return 'timed out';
    case 'abandoned':
      return 'agent disconnected';
    case 'interrupted':
      return 'interrupted';
  }
  if (response === null) return 'not reviewed';
  if (response === undefined) return 'held for review';
  const a = answerOf(response);
  if (a.reasonCodes.includes('GUARDIAN_RESTARTING')) return 'interrupted';
  const m = a.message ?? '';
  if (m.startsWith('Held for review and timed out')) return 'timed out';
  if (m.startsWith('The agent disconnected')) return 'agent disconnected';
  if (/^(Approved|Denied|Modified) by /.test(m)) return 'after review';
  return 'held for review';
}

/** Rule ids the guardian uses for an operator's session controls (guardian/holds). */
export const SESSION_BLOCKED = 'session-blocked';
export const SESSION_PAUSED = 'session-paused';

/** Says why a step was decided by a session control rather than a rule; undefined otherwise. */
export function controlReason(ruleId: string | undefined): string | undefined {
  if (ruleId === SESSION_BLOCKED) return 'An operator blocked this session: every step is denied until it is resumed.';
  if (ruleId === SESSION_PAUSED) return 'An operator paused this session: every step waits for review until it is resumed.';
  return undefined;
}

/** One difference between what the agent sent and what it received. */
export interface FieldChange {
  /** "inputs.amount", "Text", or a JSON path for anything else. */
  field: string;
  before?: unknown;
  after?: unknown;
  kind: 'changed' | 'added' | 'removed';
}

function sameJson(a: unknown, b: unknown): boolean {
  // Exact: two numbers that differ past a JS number's digits differ.
  return stringifyExact(a) === stringifyExact(b);
}

/**
 * The field-level differences between a request and the modified request the agent got:
 * tool inputs by name, text sections by label and the reasoning, as a person reads them;
 * a JSON path diff of the params when the change is anywhere else.
 */
export function changesOf(request: unknown, modified: unknown, method = ''): FieldChange[] {
  const a = readable(request, method);
  const b = readable(modified, method);
  const out: FieldChange[] = [];
  const ai = new Map((a.inputs ?? []).map((i) => [i.name, i.value]));
  const bi = new Map((b.inputs ?? []).map((i) => [i.name, i.value]));
  for (const [name, before] of ai) {
    if (!bi.has(name)) out.push({ field: `inputs.${name}`, before, kind: 'removed' });
    else if (!sameJson(before, bi.get(name))) out.push({ field: `inputs.${name}`, before, after: bi.get(name), kind: 'changed' });
  }
  for (const [name, after] of bi) if (!ai.has(name)) out.push({ field: `inputs.${name}`, after, kind: 'added' });
  const as = new Map(a.sections.map((s) => [s.label, s.text]));
  const bs = new Map(b.sections.map((s) => [s.label, s.text]));
  for (const [label, before] of as) {
    const after = bs.get(label);
    if (after === undefined) out.push({ field: label, before, kind: 'removed' });
    else if (after !== before) out.push({ field: label, before, after, kind: 'changed' });
  }
  for (const [label, after] of bs) if (!as.has(label)) out.push({ field: label, after, kind: 'added' });
  if (a.reasoning !== b.reasoning) out.push({ field: 'reasoning', before: a.reasoning, after: b.reasoning, kind: 'changed' });
  if (out.length === 0 && !sameJson(paramsOf(request), paramsOf(modified))) {
    for (const c of diffJson(paramsOf(request), paramsOf(modified), ['context']))
      out.push({ field: c.path, kind: c.kind, ...(c.kind !== 'added' ? { before: c.before } : {}), ...(c.kind !== 'removed' ? { after: c.after } : {}) });
  }
  return out;
}

const REDACTED = /\[REDACTED(?::([A-Za-z]+))?\]/g;

function redactionCounts(v: unknown): Map<string, number> {
  const m = new Map<string, number>();
  for (const x of JSON.stringify(v ?? null).matchAll(REDACTED)) {
    const k = x[1] ?? 'pattern';
    m.set(k, (m.get(k) ?? 0) + 1);
  }
  return m;
}

/**
 * What was actually redacted: the [REDACTED:kind] markers in the modified params that the
 * original did not carry, by kind ("pattern" for a regular expression), in order of
 * appearance. Computed from the two requests, never from the rule's message.
 */
export function redactionsOf(request: unknown, modified: unknown): { kind: string; count: number }[] {
  const before = redactionCounts(paramsOf(request));
  const out: { kind: string; count: number }[] = [];
  for (const [kind, n] of redactionCounts(paramsOf(modified))) {
    const added = n - (before.get(kind) ?? 0);
    if (added > 0) out.push({ kind, count: added });
  }
  return out;
}
