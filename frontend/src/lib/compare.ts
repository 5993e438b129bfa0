// GET /api/compare: two sessions' steps aligned by turn and by (kind, tool).
import { bidiBalanced } from './bidi';
import type { Api } from './api';
import { stringifyExact } from './jsonnumber';
import type { Session } from './types';

export interface CompareStep {
  seq: number;
  turnId?: string;
  stepId?: string;
  method: string;
  kind: string;
  tool?: string;
  decision: string;
  held?: boolean;
  text?: string;
  textTruncated?: boolean;
  /** Matched rules as "id:action", sorted. */
  rules: string[] | null;
}

export type CompareField = 'decision' | 'tool' | 'inputs' | 'text' | 'rules';
export type RowStatus = 'same' | 'differ' | 'onlyA' | 'onlyB';

export interface PatchOp {
  op: string;
  path: string;
  value?: unknown;
  old?: unknown;
}

export interface CompareRow {
  turn: number;
  a: CompareStep | null;
  b: CompareStep | null;
  status: RowStatus;
  diff?: CompareField[] | null;
  inputs?: PatchOp[] | null;
  inputsTruncated?: boolean;
}

export interface CompareSide {
  session: Session;
  steps: number;
  truncated: boolean;
}

export interface CompareResult {
  a: CompareSide;
  b: CompareSide;
  rows: CompareRow[] | null;
  summary: { same: number; differ: number; onlyA: number; onlyB: number };
  maxSteps: number;
  elapsedMicros: number;
}

export function compareSessions(api: Api, a: string, b: string, signal?: AbortSignal): Promise<CompareResult> {
  const q = new URLSearchParams({ a, b });
  return api.request<CompareResult>('GET', `/api/compare?${q}`, undefined, { signal, exact: true });
}

const FIELD_LABEL: Record<CompareField, string> = {
  decision: 'decision',
  tool: 'tool',
  inputs: 'inputs',
  text: 'text',
  rules: 'matched rules',
};

/** The marker a row carries in words, so a difference never relies on colour alone. */
export function rowLabel(r: CompareRow): string {
  switch (r.status) {
    case 'same':
      return 'same';
    case 'onlyA':
      return 'only in A';
    case 'onlyB':
      return 'only in B';
    case 'differ':
      return 'differs: ' + (r.diff ?? []).map((f) => FIELD_LABEL[f] ?? f).join(', ');
  }
}

function short(v: unknown): string {
  const s = v === undefined ? '' : stringifyExact(v);
  return s.length > 80 ? s.slice(0, 79) + '…' : s;
}

/** One JSON Patch operation as a line: "/to: "bob@x" → "ann@x"". */
export function opText(op: PatchOp): string {
  // Each piece from the agent is balanced on its own (lib/bidi): an RLO in the old value
  // must not draw the arrow and the new value after it backwards.
  const path = bidiBalanced(op.path || '(whole)');
  switch (op.op) {
    case 'add':
      return `${path}: added ${bidiBalanced(short(op.value))}`;
    case 'remove':
      return `${path}: removed ${bidiBalanced(short(op.old))}`;
    case 'replace':
      return `${path}: ${bidiBalanced(short(op.old))} → ${bidiBalanced(short(op.value))}`;
    default:
      return `${op.op} ${path}`;
  }
}

/** Rows grouped by turn, optionally only those that differ. */
export function turnGroups(rows: CompareRow[], onlyDiff: boolean): { turn: number; rows: CompareRow[] }[] {
  const out: { turn: number; rows: CompareRow[] }[] = [];
  for (const r of rows) {
    if (onlyDiff && r.status === 'same') continue;
    const last = out[out.length - 1];
    if (last && last.turn === r.turn) last.rows.push(r);
    else out.push({ turn: r.turn, rows: [r] });
  }
  return out;
}
