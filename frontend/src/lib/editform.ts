// The edit-and-approve form: the inputs of a held step (a tool call's arguments, a message's
// text) as fields of their JSON type, the params they make, and what changed, field by field.
// The params are edited as the agent's JSON text: a field the reviewer changed has its value
// replaced in that text, and everything else goes back byte for byte as the agent sent it (a
// JS number would turn 9007199254740993 into 9007199254740992).

import { diffJson, join, jsonEqual, type Change } from './diff';
import { parseExact, spliceValues, type ExactDoc } from './exactjson';
import { JsonNumber, stringifyExact } from './jsonnumber';

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
  if (typeof v === 'number' || v instanceof JsonNumber) return 'number';
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
      // The digits as the agent sent them.
      return f.original instanceof JsonNumber ? f.original.text : String(f.original);
    default:
      return stringifyExact(f.original, 2);
  }
}

export type Result<T> = { ok: true; value: T } | { ok: false; message: string; field?: string };

/** A JSON number as JSON writes it: "-1.5e3" yes, "+1", ".5" and "0x10" no. */
const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

/**
 * The JSON text a field's draft puts in the params, or null when the draft leaves the field as
 * the agent sent it (then its bytes stay). A number keeps the digits typed (no JS number in
 * between); JSON text of the same value (re-spaced, say) leaves it too.
 */
export function draftText(f: EditField, d: Draft): Result<string | null> {
  if (d === initialDraft(f)) return { ok: true, value: null };
  switch (f.type) {
    case 'boolean':
      return { ok: true, value: d === true ? 'true' : 'false' };
    case 'string':
    case 'text':
      return { ok: true, value: JSON.stringify(String(d)) };
    case 'number': {
      const s = String(d).trim();
      if (s === initialDraft(f)) return { ok: true, value: null };
      if (JSON_NUMBER.test(s)) return { ok: true, value: s };
      const n = Number(s);
      if (s === '' || !Number.isFinite(n)) return { ok: false, field: f.key, message: `${f.label}: a number is needed` };
      return { ok: true, value: String(n) };
    }
    default: {
      const s = String(d).trim();
      let doc: ExactDoc;
      try {
        doc = parseExact(s);
      } catch {
        return { ok: false, field: f.key, message: `${f.label}: not valid JSON` };
      }
      // The same value re-spaced (or 1.50 written 1.5): the agent's text stays.
      if (jsonEqual(doc.value, f.original)) return { ok: true, value: null };
      return { ok: true, value: s };
    }
  }
}

/** The JSON value of a field's draft. */
export function draftValue(f: EditField, d: Draft): Result<unknown> {
  const t = draftText(f, d);
  if (!t.ok) return t;
  return { ok: true, value: t.value === null ? f.original : parseExact(t.value).value };
}

/** Edited params: their value, and their JSON text (what is sent). */
export type Edited = { ok: true; value: Obj; text: string; doc: ExactDoc } | { ok: false; message: string; field?: string };

/**
 * The params of a hold's request, from the hold as the guardian's JSON text (GET /api/holds/{id}):
 * their text exactly as the agent sent them, not as JSON.parse would round them.
 */
export function sentParams(holdText: string): ExactDoc {
  return sentHold(holdText).params;
}

/** The same, with the whole request as read exactly (to show the agent's digits). */
export function sentHold(holdText: string): { request: unknown; params: ExactDoc } {
  const hold = parseExact(holdText);
  const span = hold.spans.get('request.params');
  return { request: obj(hold.value).request, params: parseExact(span ? holdText.slice(span[0], span[1]) : '{}') };
}

/** The params (a value: an object, else {}) as a document. */
export function paramsDoc(params: unknown): ExactDoc {
  return parseExact(stringifyExact(obj(params)));
}

/**
 * The params with the drafts of the fields the reviewer changed in place of their values, in
 * the params' own JSON text: every other byte as it was. The original is left as it is.
 */
export function applyDrafts(params: ExactDoc | unknown, fields: EditField[], drafts: Record<string, Draft>): Edited {
  const doc = isDoc(params) ? params : paramsDoc(params);
  const edits = new Map<string, string>();
  for (const f of fields) {
    const t = draftText(f, drafts[f.key] ?? initialDraft(f));
    if (!t.ok) return t;
    if (t.value !== null) edits.set(f.key, t.value);
  }
  if (edits.size === 0) return { ok: true, value: obj(doc.value), text: doc.text, doc };
  const text = spliceValues(doc, edits);
  if (typeof text !== 'string') return { ok: false, field: text.missing, message: `${text.missing}: not in the params` };
  const out = parseExact(text);
  return { ok: true, value: obj(out.value), text, doc: out };
}

function isDoc(v: unknown): v is ExactDoc {
  return !!v && typeof v === 'object' && typeof (v as ExactDoc).text === 'string' && (v as ExactDoc).spans instanceof Map;
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
