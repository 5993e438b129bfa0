// JSON documents read without losing anything: numbers a JS number cannot hold stay JsonNumbers,
// and every value's place in the text is known, so an edit can replace one value and leave every
// other byte of the document as it was (see editform.ts).

import { join } from './diff';
import { JsonNumber } from './jsonnumber';

/** Where a value's text is: [from, to) in the document. */
export type Span = readonly [number, number];

/** A JSON document: its text, its value (JsonNumber where a number would change) and its values' places. */
export interface ExactDoc {
  text: string;
  value: unknown;
  /** Each value's span, keyed by its path as diff.join writes it ('' for the whole document). */
  spans: Map<string, Span>;
}

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/**
 * Parses JSON text (which JSON.parse would accept) keeping each number's text where a JS number
 * would not give it back, and each value's span. Throws a SyntaxError for text that is not JSON.
 */
export function parseExact(text: string): ExactDoc {
  const spans = new Map<string, Span>();
  return { text, value: read(text, spans), spans };
}

/**
 * JSON.parse, except that a number a JS number would not give back stays a JsonNumber with the
 * text the server sent (9007199254740993, 1.0): what the console shows of an agent's JSON (a
 * step, a hold, an audit entry) shows its digits. Throws a SyntaxError as JSON.parse does.
 */
export function parseJsonExact(text: string): unknown {
  return read(text, null);
}

/** The value of the JSON text; each value's span in spans, unless null (reading only). */
function read(text: string, spans: Map<string, Span> | null): unknown {
  const at = (path: string, key: string | number) => (spans ? join(path, key) : '');
  let i = 0;
  const fail = (what: string): never => {
    throw new SyntaxError(`${what} at position ${i}`);
  };
  const ws = () => {
    for (;;) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
      else return;
    }
  };
  const str = (): string => {
    const from = i;
    let escaped = false;
    i++; // the opening quote
    for (;;) {
      const c = text.charCodeAt(i);
      if (Number.isNaN(c)) fail('Unterminated string');
      if (c === 0x22) break;
      if (c === 0x5c) {
        escaped = true;
        i++;
      } else if (c < 0x20) fail('Bad control character in string');
      i++;
    }
    i++;
    // A literal with escapes is checked and decoded by the platform's own parser.
    return escaped ? (JSON.parse(text.slice(from, i)) as string) : text.slice(from + 1, i - 1);
  };
  const value = (path: string): unknown => {
    ws();
    const from = i;
    const c = text[i];
    let v: unknown;
    if (c === '{') {
      i++;
      const o: Record<string, unknown> = {};
      ws();
      if (text[i] === '}') i++;
      else
        for (;;) {
          ws();
          if (text[i] !== '"') fail('Expected a property name');
          const k = str();
          ws();
          if (text[i] !== ':') fail("Expected ':'");
          i++;
          // defineProperty: a key "__proto__" is an own property, as JSON.parse makes it.
          Object.defineProperty(o, k, { value: value(at(path, k)), writable: true, enumerable: true, configurable: true });
          ws();
          if (text[i] === ',') {
            i++;
            continue;
          }
          if (text[i] === '}') {
            i++;
            break;
          }
          fail("Expected ',' or '}'");
        }
      v = o;
    } else if (c === '[') {
      i++;
      const a: unknown[] = [];
      ws();
      if (text[i] === ']') i++;
      else
        for (;;) {
          a.push(value(at(path, a.length)));
          ws();
          if (text[i] === ',') {
            i++;
            continue;
          }
          if (text[i] === ']') {
            i++;
            break;
          }
          fail("Expected ',' or ']'");
        }
      v = a;
    } else if (c === '"') {
      v = str();
    } else if (text.startsWith('true', i)) {
      i += 4;
      v = true;
    } else if (text.startsWith('false', i)) {
      i += 5;
      v = false;
    } else if (text.startsWith('null', i)) {
      i += 4;
      v = null;
    } else {
      NUMBER.lastIndex = i;
      const m = NUMBER.exec(text);
      if (!m) fail(c === undefined ? 'Unexpected end of JSON' : `Unexpected token ${JSON.stringify(c)}`);
      const t = m![0];
      i += t.length;
      const n = Number(t);
      v = String(n) === t ? n : new JsonNumber(t);
    }
    spans?.set(path, [from, i]);
    return v;
  };
  const v = value('');
  ws();
  if (i < text.length) fail('Unexpected non-whitespace character after JSON');
  return v;
}

/**
 * The JSON text indented (2 spaces; '' writes it on one line without spaces), every token as
 * it was: strings keep their escapes and numbers their digits. The text must be JSON.
 */
export function reindent(text: string, step = '  '): string {
  const nl = step ? '\n' : '';
  let out = '';
  let pad = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    switch (c) {
      case '"': {
        const from = i;
        for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === '\\') i++;
        out += text.slice(from, i + 1);
        break;
      }
      case ' ':
      case '\n':
      case '\r':
      case '\t':
        break;
      case '{':
      case '[': {
        let j = i + 1;
        while (j < text.length && ' \n\r\t'.includes(text[j]!)) j++;
        if (text[j] === (c === '{' ? '}' : ']')) {
          out += c + text[j];
          i = j;
        } else {
          pad += step;
          out += `${c}${nl}${pad}`;
        }
        break;
      }
      case '}':
      case ']':
        pad = pad.slice(step.length);
        out += `${nl}${pad}${c}`;
        break;
      case ',':
        out += `,${nl}${pad}`;
        break;
      case ':':
        out += step ? ': ' : ':';
        break;
      default:
        out += c;
    }
  }
  return out;
}

/** The JSON text without whitespace between tokens, every token as it was. */
export const compactJson = (text: string): string => reindent(text, '');

/** The document's text with the values at some paths replaced by JSON texts; the rest as it was. */
export function spliceValues(doc: ExactDoc, edits: ReadonlyMap<string, string>): string | { missing: string } {
  const at: [number, number, string][] = [];
  for (const [path, json] of edits) {
    const s = doc.spans.get(path);
    if (!s) return { missing: path };
    at.push([s[0], s[1], json]);
  }
  at.sort((a, b) => b[0] - a[0]);
  let text = doc.text;
  for (const [from, to, json] of at) text = text.slice(0, from) + json + text.slice(to);
  return text;
}
