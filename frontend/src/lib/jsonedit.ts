// Parsing for the edit-and-approve params editor: a JSON object, with the error's position.

import { parseExact, type ExactDoc } from './exactjson';
import { lineCol } from './expr';

/** Parsed params: their value (numbers exact: see exactjson) and the document, text as typed. */
export type Parsed =
  | { ok: true; value: Record<string, unknown>; text: string; doc: ExactDoc }
  | { ok: false; message: string; line?: number; column?: number };

export function parseParams(text: string): Parsed {
  if (text.trim() === '') return { ok: false, message: 'Params are empty: an AOS step needs a params object.' };
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    const m = /position (\d+)/.exec(msg);
    if (m) {
      const { line, column } = lineCol(text, Number(m[1]));
      return { ok: false, message: cleanMessage(msg), line, column };
    }
    const lc = /line (\d+) column (\d+)/.exec(msg);
    if (lc) return { ok: false, message: cleanMessage(msg), line: Number(lc[1]), column: Number(lc[2]) };
    if (/Unexpected end/i.test(msg)) {
      const { line, column } = lineCol(text, text.length);
      return { ok: false, message: 'Unexpected end of JSON', line, column };
    }
    return { ok: false, message: cleanMessage(msg) };
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) return { ok: false, message: 'Params must be a JSON object.' };
  // Read again keeping every number's digits (JSON.parse checked it and placed the errors).
  const doc = parseExact(text);
  return { ok: true, value: doc.value as Record<string, unknown>, text, doc };
}

function cleanMessage(msg: string): string {
  return msg
    .replace(/\s*\(line \d+ column \d+\)/, '')
    .replace(/ in JSON at position \d+/, '')
    .replace(/, "[^"]*" is not valid JSON$/, '')
    .trim();
}

/** Pretty JSON for an editor. */
export function pretty(v: unknown): string {
  return JSON.stringify(v, null, 2) ?? '';
}
