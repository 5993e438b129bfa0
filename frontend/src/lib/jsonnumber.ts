// JSON whose numbers (and, for a whole document, bytes) must come back exactly as they went
// in: a held step's params hold what an agent sent, and an operator who edits one field must
// not change the others. A JS number keeps 15-17 significant digits, so 9007199254740993
// would come back as 9007199254740992; these types carry the text instead.

/** A JSON number whose text a JS number would not give back (9007199254740993, 1.0, 1e3). */
export class JsonNumber {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
  /** What plain JSON.stringify writes (lossy): use stringifyExact to keep the text. */
  toJSON(): number {
    return Number(this.text);
  }
  toString(): string {
    return this.text;
  }
}

/** JSON text written as it is where a value goes (a whole edited params object, say). */
export class RawJson {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

const NUMBER = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;

/** A number's decimal value as a canonical string ("1.0", "10e-1" and "1" are all "1e0"). */
export function canonicalNumber(text: string): string | null {
  const m = NUMBER.exec(text.trim());
  if (!m) return null;
  let digits = (m[2] ?? '') + (m[3] ?? '');
  let exp = BigInt(m[4] ?? '0') - BigInt((m[3] ?? '').length);
  digits = digits.replace(/^0+/, '');
  if (digits === '') return '0';
  const trailing = /0*$/.exec(digits)![0].length;
  if (trailing) {
    digits = digits.slice(0, -trailing);
    exp += BigInt(trailing);
  }
  return `${m[1]}${digits}e${exp}`;
}

/** The text of a number as JSON holds it: a JsonNumber's own, a JS number's shortest. */
export function numberText(v: number | JsonNumber): string {
  return v instanceof JsonNumber ? v.text : String(v);
}

/** Whether two numbers (JS numbers or JsonNumbers) have the same decimal value. */
export function numberEqual(a: number | JsonNumber, b: number | JsonNumber): boolean {
  if (typeof a === 'number' && typeof b === 'number') return a === b;
  const x = numberText(a),
    y = numberText(b);
  return x === y || (canonicalNumber(x) ?? x) === (canonicalNumber(y) ?? y);
}

export const isJsonNumber = (v: unknown): v is JsonNumber => v instanceof JsonNumber;

/**
 * JSON.stringify, except that a JsonNumber is written as its own text and a RawJson as its JSON
 * text as they are. Otherwise the same output as JSON.stringify(v, null, indent).
 */
export function stringifyExact(v: unknown, indent = 0): string {
  return write(v, indent > 0 ? ' '.repeat(indent) : '', '') ?? 'null';
}

function write(v: unknown, step: string, pad: string): string | undefined {
  if (v instanceof JsonNumber) return v.text;
  if (v instanceof RawJson) return v.text;
  if (v !== null && typeof v === 'object' && typeof (v as { toJSON?: unknown }).toJSON === 'function') v = (v as { toJSON(): unknown }).toJSON();
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v);
    case 'number':
      return Number.isFinite(v) ? String(v) : 'null';
    case 'boolean':
      return v ? 'true' : 'false';
    case 'bigint':
      throw new TypeError('Do not know how to serialize a BigInt');
    case 'undefined':
    case 'function':
    case 'symbol':
      return undefined;
  }
  if (v === null) return 'null';
  const inner = pad + step;
  const open = step ? `\n${inner}` : '';
  const close = step ? `\n${pad}` : '';
  const sep = step ? `,\n${inner}` : ',';
  if (Array.isArray(v)) {
    if (v.length === 0) return '[]';
    const items = v.map((x) => write(x, step, inner) ?? 'null');
    return `[${open}${items.join(sep)}${close}]`;
  }
  const parts: string[] = [];
  for (const k of Object.keys(v as object)) {
    const s = write((v as Record<string, unknown>)[k], step, inner);
    if (s !== undefined) parts.push(`${JSON.stringify(k)}:${step ? ' ' : ''}${s}`);
  }
  if (parts.length === 0) return '{}';
  return `{${open}${parts.join(sep)}${close}}`;
}
