// Diffs for rule versions: a structural diff of two JSON values (what fields changed) and a
// line diff for multi-line text such as a rule's condition.

import { JsonNumber, numberEqual, stringifyExact } from './jsonnumber';

export type Change =
  | { kind: 'added'; path: string; after: unknown }
  | { kind: 'removed'; path: string; before: unknown }
  | { kind: 'changed'; path: string; before: unknown; after: unknown };

/** An object of JSON (a JsonNumber is a number, not an object). */
function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof JsonNumber);
}

const isNumber = (v: unknown): v is number | JsonNumber => typeof v === 'number' || v instanceof JsonNumber;

export function join(path: string, key: string | number): string {
  if (typeof key === 'number') return `${path}[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? (path ? `${path}.${key}` : key) : `${path}[${JSON.stringify(key)}]`;
}

/** True when two JSON values are equal (object key order ignored). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (isNumber(a) && isNumber(b)) return numberEqual(a, b);
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((v, i) => jsonEqual(v, b[i]));
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a).filter((k) => a[k] !== undefined);
    const kb = Object.keys(b).filter((k) => b[k] !== undefined);
    return ka.length === kb.length && ka.every((k) => k in b && jsonEqual(a[k], b[k]));
  }
  return false;
}

/**
 * Lists the leaf changes from a to b, in key order. Arrays are compared by index; absent and
 * undefined are the same thing. Keys in `ignore` (at the top level) are skipped.
 */
export function diffJson(a: unknown, b: unknown, ignore: string[] = [], path = ''): Change[] {
  const out: Change[] = [];
  const walk = (x: unknown, y: unknown, p: string, top: boolean) => {
    if (jsonEqual(x, y)) return;
    if (isObject(x) && isObject(y)) {
      const keys = [...new Set([...Object.keys(x), ...Object.keys(y)])].sort();
      for (const k of keys) {
        if (top && ignore.includes(k)) continue;
        const xv = x[k],
          yv = y[k];
        if (xv === undefined && yv === undefined) continue;
        if (xv === undefined) out.push({ kind: 'added', path: join(p, k), after: yv });
        else if (yv === undefined) out.push({ kind: 'removed', path: join(p, k), before: xv });
        else walk(xv, yv, join(p, k), false);
      }
      return;
    }
    if (Array.isArray(x) && Array.isArray(y)) {
      const n = Math.max(x.length, y.length);
      for (let i = 0; i < n; i++) {
        if (i >= x.length) out.push({ kind: 'added', path: join(p, i), after: y[i] });
        else if (i >= y.length) out.push({ kind: 'removed', path: join(p, i), before: x[i] });
        else walk(x[i], y[i], join(p, i), false);
      }
      return;
    }
    if (x === undefined) out.push({ kind: 'added', path: p, after: y });
    else if (y === undefined) out.push({ kind: 'removed', path: p, before: x });
    else out.push({ kind: 'changed', path: p, before: x, after: y });
  };
  walk(a, b, path, true);
  return out;
}

export interface LineOp {
  op: 'same' | 'add' | 'del';
  text: string;
  /** 1-based line numbers in the old and new text (absent for the side it is not on). */
  a?: number;
  b?: number;
}

/** A line diff by longest common subsequence; fine for rule-sized texts (hundreds of lines). */
export function lineDiff(before: string, after: string): LineOp[] {
  const x = before === '' ? [] : before.split('\n');
  const y = after === '' ? [] : after.split('\n');
  const n = x.length,
    m = y.length;
  // lcs[i][j] = LCS length of x[i:] and y[j:], in one flat array.
  const lcs = new Uint32Array((n + 1) * (m + 1));
  const at = (i: number, j: number) => i * (m + 1) + j;
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      lcs[at(i, j)] = x[i] === y[j] ? lcs[at(i + 1, j + 1)]! + 1 : Math.max(lcs[at(i + 1, j)]!, lcs[at(i, j + 1)]!);
  const out: LineOp[] = [];
  let i = 0,
    j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      out.push({ op: 'same', text: x[i]!, a: i + 1, b: j + 1 });
      i++;
      j++;
    } else if (lcs[at(i + 1, j)]! >= lcs[at(i, j + 1)]!) {
      out.push({ op: 'del', text: x[i]!, a: i + 1 });
      i++;
    } else {
      out.push({ op: 'add', text: y[j]!, b: j + 1 });
      j++;
    }
  }
  while (i < n) {
    out.push({ op: 'del', text: x[i]!, a: i + 1 });
    i++;
  }
  while (j < m) {
    out.push({ op: 'add', text: y[j]!, b: j + 1 });
    j++;
  }
  return out;
}

/** Fields of a rule that change on every save and say nothing about the policy. */
export const RULE_META = ['version', 'updatedAt', 'stats'];

/** Short text for a JSON value in a diff row. */
export function preview(v: unknown, max = 120): string {
  const s = v === undefined ? 'undefined' : stringifyExact(v);
  return s.length > max ? s.slice(0, max - 1) + '…' : s;
}
