// Pure helpers for the rule editor: mapping the server's compile errors onto the editor, the
// draft of a new rule, and the rule set a backtest runs with.

import { jsonEqual } from './diff';
import { offsetOf, tokenize } from './expr';
import type { Rule, ValidationError } from './types';

export interface Diag {
  from: number;
  to: number;
  message: string;
  line: number;
  column: number;
}

/** Errors about the condition become editor diagnostics covering the token at the position. */
export function whenDiagnostics(errors: ValidationError[] | null | undefined, doc: string): Diag[] {
  const out: Diag[] = [];
  for (const e of errors ?? []) {
    if (e.field && e.field !== 'when') continue;
    const line = e.line && e.line > 0 ? e.line : 1;
    const column = e.column && e.column > 0 ? e.column : 1;
    if (!e.line) {
      out.push({ from: 0, to: doc.length, message: e.message, line, column });
      continue;
    }
    let from = offsetOf(doc, line, column);
    let to = from;
    const tok = tokenize(doc).find((t) => t.type !== 'space' && t.from <= from && from < t.to);
    if (tok) {
      from = tok.from;
      to = tok.to;
    }
    out.push({ from, to, message: e.message, line, column });
  }
  return out;
}

/** Errors about other fields, keyed by field name (without position). */
export function fieldErrors(errors: ValidationError[] | null | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of errors ?? []) {
    if (!e.field || e.field === 'when') continue;
    const pos = e.line ? ` (${e.line}:${e.column ?? 1})` : '';
    out[e.field] = out[e.field] ? `${out[e.field]}; ${e.message}${pos}` : `${e.message}${pos}`;
  }
  return out;
}

/**
 * The example condition a new rule shows as a placeholder (greyed, like the other fields'
 * examples), never as its text: typed text must not be merged into an example that then never
 * matches.
 */
export const WHEN_EXAMPLE = 'tool == "send_email" && !(string(inputs.to) endsWith "@corp.example")';

/** A new rule's draft: an empty condition (saving it gets the guardian's "expression is empty"). */
export function newRule(): Rule {
  return {
    id: '',
    name: '',
    description: '',
    when: '',
    action: 'deny',
    message: '',
    reasonCode: '',
    priority: 0,
    mode: 'enforce',
    enabled: true,
  };
}

/** A rule id from a name: lower-case words joined by dashes. */
export function slug(name: string): string {
  return name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 60);
}

/**
 * The draft as the API wants it: server-owned fields dropped, sub-objects only for the actions
 * that use them, empty strings omitted.
 */
export function cleanRule(r: Rule): Rule {
  const out: Rule = { id: r.id.trim(), when: r.when, action: r.action };
  if (r.name?.trim()) out.name = r.name.trim();
  if (r.description?.trim()) out.description = r.description.trim();
  if (r.message?.trim()) out.message = r.message;
  if (r.reasonCode?.trim()) out.reasonCode = r.reasonCode.trim();
  out.priority = Number.isFinite(r.priority) ? Number(r.priority) : 0;
  out.mode = r.mode ?? 'enforce';
  out.enabled = r.enabled ?? true;
  if (r.action === 'hold' && r.hold) {
    const h: NonNullable<Rule['hold']> = {};
    if (r.hold.timeout?.trim()) h.timeout = r.hold.timeout.trim();
    if (r.hold.onTimeout) h.onTimeout = r.hold.onTimeout;
    out.hold = h;
  }
  if (r.action === 'modify' && r.modify) {
    const m: NonNullable<Rule['modify']> = {};
    const redact = (r.modify.redact ?? []).map((s) => s.trim()).filter(Boolean);
    if (redact.length) m.redact = redact;
    const set = Object.fromEntries(Object.entries(r.modify.set ?? {}).filter(([k, v]) => k.trim() && v.trim()));
    if (Object.keys(set).length) m.set = set;
    out.modify = m;
  }
  if (r.expiresAt) out.expiresAt = r.expiresAt;
  return out;
}

/** The current rules with the draft in place of the rule of the same id (or added). */
export function ruleSetWith(rules: Rule[], draft: Rule, originalId?: string): Rule[] {
  const replaced = originalId ?? draft.id;
  const out = rules.filter((r) => r.id !== replaced && r.id !== draft.id).map(cleanRule);
  out.push(cleanRule(draft));
  return out;
}

/** "key = expr" lines for modify.set, and back. */
export function parseSetLines(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const i = line.indexOf('=');
    if (i <= 0) continue;
    const k = line.slice(0, i).trim();
    const v = line.slice(i + 1).trim();
    if (k && v) out[k] = v;
  }
  return out;
}

export function setLines(set: Record<string, string> | undefined): string {
  return Object.entries(set ?? {})
    .map(([k, v]) => `${k} = ${v}`)
    .join('\n');
}

/** modify.redact from the Redact field's text: comma separated. */
export function parseRedact(text: string): string[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

export function redactText(redact: string[] | null | undefined): string {
  return (redact ?? []).join(', ');
}

/**
 * The text a field of the form shows for a draft's value: the text as it is while it still
 * reads as that value (what is being typed, "email, " say, stays as typed), else the value's own
 * text (the draft was replaced: loaded again after a change elsewhere, a restored version).
 */
export function syncedRedactText(text: string, redact: string[] | null | undefined): string {
  return jsonEqual(parseRedact(text), redact ?? []) ? text : redactText(redact);
}

/** The same for the Set inputs field's "name = expr" lines. */
export function syncedSetText(text: string, set: Record<string, string> | null | undefined): string {
  return jsonEqual(parseSetLines(text), set ?? {}) ? text : setLines(set ?? undefined);
}

/** A step to test against, parsed from pasted JSON: a whole JSON-RPC request or {method, params}. */
export function parseTestStep(text: string): { method: string; params: unknown } | string {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return `Not valid JSON: ${e instanceof Error ? e.message : String(e)}`;
  }
  const o = v as { method?: unknown; params?: unknown };
  if (!o || typeof o !== 'object' || typeof o.method !== 'string') return 'The step needs a "method" and "params" (or paste a whole JSON-RPC request).';
  return { method: o.method, params: o.params ?? {} };
}
