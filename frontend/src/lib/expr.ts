// A tokenizer for expr (github.com/expr-lang/expr) conditions, used to highlight the rule
// editor and to offer completions. It never throws: anything it does not know becomes an
// 'invalid' token, and the server's compiler remains the judge of validity.

export type TokenType =
  | 'keyword'
  | 'operator'
  | 'string'
  | 'number'
  | 'helper'
  | 'builtin'
  | 'field'
  | 'ident'
  | 'punct'
  | 'comment'
  | 'space'
  | 'invalid';

export interface Token {
  type: TokenType;
  from: number;
  to: number;
  text: string;
}

/** Word operators and literals. */
export const KEYWORDS = new Set([
  'and',
  'or',
  'not',
  'in',
  'matches',
  'contains',
  'startsWith',
  'endsWith',
  'let',
  'if',
  'else',
  'true',
  'false',
  'nil',
]);

/** expr's built-in functions. */
export const BUILTINS = new Set([
  'all', 'any', 'one', 'none', 'filter', 'map', 'count', 'sum', 'find', 'findIndex', 'findLast',
  'findLastIndex', 'groupBy', 'sortBy', 'reduce', 'len', 'abs', 'ceil', 'floor', 'round', 'int',
  'float', 'string', 'trim', 'trimPrefix', 'trimSuffix', 'upper', 'lower', 'split', 'splitAfter',
  'replace', 'repeat', 'indexOf', 'lastIndexOf', 'hasPrefix', 'hasSuffix', 'max', 'min', 'mean',
  'median', 'toJSON', 'fromJSON', 'toBase64', 'fromBase64', 'now', 'duration', 'date', 'timezone',
  'first', 'last', 'get', 'take', 'keys', 'values', 'toPairs', 'fromPairs', 'type', 'join', 'sort',
  'concat', 'flatten', 'uniq', 'reverse', 'bitand', 'bitor', 'bitxor', 'bitnand', 'bitnot',
  'bitshl', 'bitshr', 'bitushr',
]);

/** Vigil's helper functions (rules/ package), with a one-line signature for completions. */
export const HELPERS: Record<string, string> = {
  pii: 'pii(s) → PII found: e-mails, phones, cards (Luhn), IBANs, SSNs',
  piiKinds: 'piiKinds(s) → kinds of PII found, e.g. ["email", "iban"]',
  emails: 'emails(s) → e-mail addresses found',
  secrets: 'secrets(s) → cloud keys, tokens, private key blocks found',
  secretKinds: 'secretKinds(s) → kinds of secrets found',
  urls: 'urls(s) → URLs found',
  domain: 'domain(urlOrEmail) → host name',
  glob: 'glob(pattern, s) → bool',
  regexMatch: 'regexMatch(s, re) → bool',
  regexFind: 'regexFind(s, re) → matches',
  icontains: 'icontains(s, sub) → case-insensitive contains',
  containsAny: 'containsAny(s, ["a", "b"]) → any substring, case-insensitive',
  countTool: 'countTool(session, tool) → earlier calls of a tool (glob ok)',
  countMethod: 'countMethod(session, method) → earlier steps with this method',
  countKind: 'countKind(session, kind) → earlier steps of this kind',
  countDecision: 'countDecision(session, decision) → earlier steps so decided',
  countToolWithin: 'countToolWithin(session, tool, "10m") → calls in a time window',
  toolStreak: 'toolStreak(session, tool) → consecutive latest calls of a tool',
  lastTool: 'lastTool(session) → the previous tool called',
  sessionText: 'sessionText(session) → text of the earlier steps',
  sessionHas: 'sessionHas(session, selector, substr) → an earlier step has the text',
};

/** Fields of the rule environment, with a short description for completions. */
export const FIELDS: Record<string, string> = {
  method: 'the JSON-RPC method, e.g. "steps/toolCallRequest"',
  kind: 'trigger, message, knowledge, memoryStore, memoryRetrieval, toolCall, toolResult, mcp, a2a',
  agent: 'the agent (id, name, version, tools…)',
  user: 'the user, when the agent acts for one',
  session: 'id, step count and the earlier steps of this session',
  turnId: 'the turn id',
  stepId: 'the step id',
  role: 'message role: user, agent or system',
  text: 'all human-readable text of the step, joined',
  tool: 'the tool id of a tool call',
  toolDef: "the tool's definition from the agent's tool list",
  inputs: 'tool inputs: argument name → value',
  isError: 'a tool result reported an error',
  reasoning: "the agent's reasoning",
  mcp: 'the MCP method, tool and arguments',
  a2a: 'the A2A message',
  params: 'the raw params',
  now: 'the time of the step (the clock rules see)',
};

// Longest first, so '**' wins over '*', '?.' over '?', and so on.
const OPERATORS = [
  '...', '**', '==', '!=', '<=', '>=', '&&', '||', '??', '?.', '..', '|', '+', '-', '*', '/', '%', '^',
  '<', '>', '!', '?', ':', '=', '.', '#',
];
const PUNCT = new Set(['(', ')', '[', ']', '{', '}', ',', ';']);

const isDigit = (c: string) => c >= '0' && c <= '9';
const isIdentStart = (c: string) => /[A-Za-z_$]/.test(c);
const isIdent = (c: string) => /[A-Za-z0-9_$]/.test(c);

function readString(src: string, i: number): number {
  const q = src[i]!;
  let j = i + 1;
  while (j < src.length) {
    const c = src[j]!;
    if (q !== '`' && c === '\\') {
      j += 2;
      continue;
    }
    if (c === q) return j + 1;
    if (c === '\n' && q !== '`') return j; // unterminated: stop at the line end
    j++;
  }
  return src.length;
}

function readNumber(src: string, i: number): number {
  let j = i;
  if (src[j] === '0' && (src[j + 1] === 'x' || src[j + 1] === 'X')) {
    j += 2;
    while (j < src.length && /[0-9a-fA-F_]/.test(src[j]!)) j++;
    return j;
  }
  while (j < src.length && (isDigit(src[j]!) || src[j] === '_')) j++;
  // A fraction, but not the range operator in 1..5.
  if (src[j] === '.' && src[j + 1] !== '.' && j + 1 < src.length && isDigit(src[j + 1]!)) {
    j++;
    while (j < src.length && (isDigit(src[j]!) || src[j] === '_')) j++;
  }
  if (src[j] === 'e' || src[j] === 'E') {
    let k = j + 1;
    if (src[k] === '+' || src[k] === '-') k++;
    if (k < src.length && isDigit(src[k]!)) {
      j = k;
      while (j < src.length && isDigit(src[j]!)) j++;
    }
  }
  return j;
}

/** Splits src into tokens that cover it exactly (concatenated texts equal src). */
export function tokenize(src: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  let prevSignificant: Token | null = null;
  const push = (type: TokenType, to: number) => {
    const t: Token = { type, from: i, to, text: src.slice(i, to) };
    out.push(t);
    if (type !== 'space' && type !== 'comment') prevSignificant = t;
    i = to;
  };
  while (i < src.length) {
    const c = src[i]!;
    if (/\s/.test(c)) {
      let j = i + 1;
      while (j < src.length && /\s/.test(src[j]!)) j++;
      push('space', j);
      continue;
    }
    if (c === '/' && src[i + 1] === '/') {
      const nl = src.indexOf('\n', i);
      push('comment', nl < 0 ? src.length : nl);
      continue;
    }
    if (c === '/' && src[i + 1] === '*') {
      const end = src.indexOf('*/', i + 2);
      push('comment', end < 0 ? src.length : end + 2);
      continue;
    }
    if (c === '"' || c === "'" || c === '`') {
      push('string', readString(src, i));
      continue;
    }
    if (isDigit(c) || (c === '.' && isDigit(src[i + 1] ?? '') && src[i - 1] !== '.')) {
      push('number', readNumber(src, i));
      continue;
    }
    if (isIdentStart(c)) {
      let j = i + 1;
      while (j < src.length && isIdent(src[j]!)) j++;
      const word = src.slice(i, j);
      const prev = prevSignificant as Token | null;
      const afterDot = prev !== null && (prev.text === '.' || prev.text === '?.');
      // Whether a call follows, allowing spaces: helper names are only helpers when called.
      let k = j;
      while (k < src.length && (src[k] === ' ' || src[k] === '\t')) k++;
      const called = src[k] === '(';
      let type: TokenType = 'ident';
      if (afterDot) type = 'ident';
      else if (KEYWORDS.has(word)) type = 'keyword';
      else if (called && word in HELPERS) type = 'helper';
      else if (called && BUILTINS.has(word)) type = 'builtin';
      else if (word in FIELDS) type = 'field';
      push(type, j);
      continue;
    }
    if (PUNCT.has(c)) {
      push('punct', i + 1);
      continue;
    }
    const op = OPERATORS.find((o) => src.startsWith(o, i));
    if (op) {
      push('operator', i + op.length);
      continue;
    }
    push('invalid', i + 1);
  }
  return out;
}

/** 1-based line and column of an offset; columns count UTF-16 code units, like the editor. */
export function lineCol(src: string, offset: number): { line: number; column: number } {
  let line = 1,
    start = 0;
  for (let i = 0; i < offset && i < src.length; i++) {
    if (src[i] === '\n') {
      line++;
      start = i + 1;
    }
  }
  return { line, column: offset - start + 1 };
}

/**
 * Offset (UTF-16, as the editor counts) of a line:column the server reports, clamped to the
 * text. The server counts columns in code points (Go runes) from `columnBase`.
 */
export function offsetOf(src: string, line: number, column: number, columnBase: 0 | 1 = 1): number {
  const lines = src.split('\n');
  const l = Math.min(Math.max(1, line), lines.length);
  let off = 0;
  for (let i = 0; i < l - 1; i++) off += lines[i]!.length + 1;
  const text = lines[l - 1]!;
  let runes = Math.max(0, column - columnBase);
  let i = 0;
  while (runes > 0 && i < text.length) {
    const cp = text.codePointAt(i)!;
    i += cp > 0xffff ? 2 : 1;
    runes--;
  }
  return off + i;
}
