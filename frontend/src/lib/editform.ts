// The edit-and-approve form: the inputs of a held step (a tool call's arguments, a message's
// text) as fields of their JSON type, the params they make, and what changed, field by field.

import { diffJson, join, type Change } from './diff';

type Obj = Record<string, unknown>;
type Path = (string | number)[];
const obj = (v: unknown): Obj => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : {});

/**
 * How a field is edited: string (one line), text (a textarea), number, boolean (a checkbox),
 * json (an object, array or null, as JSON text).
 */
export type FieldType = 'string' | 'text' | 'number' | 'boolean' | 'json';

export interface EditField {
  /** Unique within the step: the path as text. */
  key: string;
  label: string;
  path: Path;
  type: FieldType;
  original: unknown;
}

/** A draft of a field: text for everything but a boolean. */
export type Draft = string | boolean;

function typeOf(v: unknown): FieldType {
  if (typeof v === 'string') return v.includes('\n') || v.length > 80 ? 'text' : 'string';
  if (typeof v === 'number') return 'number';
  if (typeof v === 'boolean') return 'boolean';
  return 'json';
}

const pathKey = (p: Path) => p.reduce<string>((s, k) => join(s, k), '');

function field(label: string, path: Path, value: unknown, type: FieldType = typeOf(value)): EditField {
  return { key: pathKey(path), label, path, type, original: value };
}

/** Named arguments, as AOS's [{name, value}] list or a plain object. */
function argFields(inputs: unknown, at: Path): EditField[] {
  if (Array.isArray(inputs))
    return inputs.flatMap((i, n) => {
      const o = obj(i);
      const name = typeof o.name === 'string' ? o.name : typeof o.id === 'string' ? o.id : '';
      return name && 'value' in o ? [field(name, [...at, n, 'value'], o.value)] : [];
    });
  return Object.entries(obj(inputs)).map(([name, v]) => field(name, [...at, name], v));
}

/** Text parts of AOS content, each a textarea. */
function textFields(parts: unknown, at: Path, label: string): EditField[] {
  if (!Array.isArray(parts)) return [];
  const texts = parts.flatMap((p, n) => (typeof obj(p).text === 'string' ? [n] : []));
  return texts.map((n, i) => field(texts.length > 1 ? `${label} ${i + 1}` : label, [...at, n, 'text'], obj(parts[n]).text, 'text'));
}

/** The fields the form offers for a step; empty when only raw JSON can edit it. */
export function editFields(method: string, params: unknown): EditField[] {
  const p = obj(params);
  switch (method) {
    case 'steps/toolCallRequest':
      return argFields(obj(p.toolCallRequest).inputs, ['toolCallRequest', 'inputs']);
    case 'steps/message':
      return textFields(obj(p.message).content, ['message', 'content'], 'Message text');
    case 'steps/agentTrigger':
      return textFields(obj(p.trigger).content, ['trigger', 'content'], 'Trigger text');
    case 'protocols/MCP': {
      const inline = p.jsonrpc === '2.0';
      const msg = inline ? p : obj(p.message);
      if (msg.method !== 'tools/call') return [];
      return argFields(obj(msg.params).arguments, [...(inline ? [] : ['message']), 'params', 'arguments']);
    }
  }
  return [];
}

export function initialDraft(f: EditField): Draft {
  switch (f.type) {
    case 'boolean':
      return f.original === true;
    case 'string':
    case 'text':
      return String(f.original);
    case 'number':
      return String(f.original);
    default:
      return JSON.stringify(f.original, null, 2) ?? 'null';
  }
}

export type Result<T> = { ok: true; value: T } | { ok: false; message: string; field?: string };

/** The JSON value of a field's draft. */
export function draftValue(f: EditField, d: Draft): Result<unknown> {
  switch (f.type) {
    case 'boolean':
      return { ok: true, value: d === true };
    case 'string':
    case 'text':
      return { ok: true, value: String(d) };
    case 'number': {
      const s = String(d).trim();
      const n = Number(s);
      if (s === '' || !Number.isFinite(n)) return { ok: false, field: f.key, message: `${f.label}: a number is needed` };
      return { ok: true, value: n };
    }
    default:
      try {
        return { ok: true, value: JSON.parse(String(d)) };
      } catch {
        return { ok: false, field: f.key, message: `${f.label}: not valid JSON` };
      }
  }
}

/** The params with every field's draft in place; the original is left as it is. */
export function applyDrafts(params: unknown, fields: EditField[], drafts: Record<string, Draft>): Result<Obj> {
  const out = structuredClone(obj(params));
  for (const f of fields) {
    const v = draftValue(f, drafts[f.key] ?? initialDraft(f));
    if (!v.ok) return v;
    let at: unknown = out;
    for (const k of f.path.slice(0, -1)) at = (at as Obj)[k as string];
    (at as Obj)[f.path.at(-1) as string] = v.value;
  }
  return { ok: true, value: out };
}

export interface FieldChange {
  kind: Change['kind'];
  /** The form's label for a field, else the JSON path. */
  label: string;
  before?: unknown;
  after?: unknown;
}

/** What an edit changes, labelled by the form's fields where it can be. */
export function editChanges(before: unknown, after: unknown, fields: EditField[]): FieldChange[] {
  return diffJson(before, after).map((c) => {
    const f = fields.find((x) => c.path === x.key || c.path.startsWith(x.key + '.') || c.path.startsWith(x.key + '['));
    const label = f ? f.label + c.path.slice(f.key.length) : c.path;
    return { kind: c.kind, label, ...(c.kind !== 'added' ? { before: c.before } : {}), ...(c.kind !== 'removed' ? { after: c.after } : {}) };
  });
}
