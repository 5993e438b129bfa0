// A small parser and evaluator for the subset of expr the mock guardian needs: enough to
// compile rules with line:column errors and to decide steps. Development only; the real
// guardian uses github.com/expr-lang/expr.

const WORD_OPS = new Set(['and', 'or', 'not', 'in', 'contains', 'startsWith', 'endsWith', 'matches']);

export class ExprError extends Error {
  /** @param {string} message @param {number} line @param {number} column */
  constructor(message, line, column) {
    super(`${message} (${line}:${column})`);
    this.bare = message;
    this.line = line;
    this.column = column;
  }
}

/** @param {string} src */
function lex(src) {
  /** @type {{t: string, v: any, pos: number}[]} */
  const out = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    if (src.startsWith('//', i)) {
      while (i < src.length && src[i] !== '\n') i++;
      continue;
    }
    if (src.startsWith('/*', i)) {
      const e = src.indexOf('*/', i + 2);
      i = e < 0 ? src.length : e + 2;
      continue;
    }
    const start = i;
    if (c === '"' || c === "'" || c === '`') {
      let j = i + 1;
      let s = '';
      while (j < src.length && src[j] !== c) {
        if (src[j] === '\\' && c !== '`') {
          j++;
          s += { n: '\n', t: '\t', '\\': '\\', '"': '"', "'": "'" }[src[j]] ?? src[j];
        } else s += src[j];
        j++;
      }
      if (j >= src.length) throw posErr(src, start, 'literal not terminated');
      out.push({ t: 'str', v: s, pos: start });
      i = j + 1;
      continue;
    }
    if (/[0-9]/.test(c)) {
      const m = /^(0x[0-9a-fA-F_]+|[0-9_]+(\.[0-9_]+)?([eE][+-]?[0-9]+)?)/.exec(src.slice(i));
      if (!m) throw posErr(src, i, 'bad number');
      out.push({ t: 'num', v: Number(m[0].replace(/_/g, '')), pos: start });
      i += m[0].length;
      continue;
    }
    if (/[A-Za-z_$]/.test(c)) {
      const m = /^[A-Za-z_$][\w$]*/.exec(src.slice(i));
      if (!m) throw posErr(src, i, 'bad name');
      const w = m[0];
      if (w === 'true' || w === 'false') out.push({ t: 'lit', v: w === 'true', pos: start });
      else if (w === 'nil') out.push({ t: 'lit', v: null, pos: start });
      else if (WORD_OPS.has(w)) out.push({ t: 'op', v: w, pos: start });
      else out.push({ t: 'id', v: w, pos: start });
      i += w.length;
      continue;
    }
    const ops = ['**', '==', '!=', '<=', '>=', '&&', '||', '??', '?.', '+', '-', '*', '/', '%', '<', '>', '!', '?', ':', '.', '(', ')', '[', ']', ',', '{', '}'];
    const op = ops.find((o) => src.startsWith(o, i));
    if (!op) throw posErr(src, i, `unexpected token ${JSON.stringify(c)}`);
    out.push({ t: 'op', v: op, pos: start });
    i += op.length;
  }
  out.push({ t: 'eof', v: null, pos: src.length });
  return out;
}

/** @param {string} src @param {number} pos @param {string} msg */
function posErr(src, pos, msg) {
  let line = 1,
    col = 1;
  for (let k = 0; k < pos && k < src.length; k++) {
    if (src[k] === '\n') {
      line++;
      col = 1;
    } else col++;
  }
  return new ExprError(msg, line, col);
}

const BINARY = [
  ['??'],
  ['||', 'or'],
  ['&&', 'and'],
  ['==', '!=', '<', '>', '<=', '>=', 'in', 'contains', 'startsWith', 'endsWith', 'matches', 'not in'],
  ['+', '-'],
  ['*', '/', '%'],
  ['**'],
];

/** Parses src into an AST; throws ExprError with a 1-based line:column. @param {string} src */
export function parse(src) {
  const toks = lex(src);
  let p = 0;
  const peek = () => toks[p];
  const next = () => toks[p++];
  const is = (v) => peek().t === 'op' && peek().v === v;
  const expect = (v) => {
    if (!is(v)) throw posErr(src, peek().pos, peek().t === 'eof' ? `unexpected end of expression, expected ${v}` : `unexpected token ${fmt(peek())}, expected ${v}`);
    return next();
  };
  const fmt = (t) => (t.t === 'op' ? `Operator(${JSON.stringify(t.v)})` : t.t === 'id' ? `Identifier(${JSON.stringify(t.v)})` : `${t.t}(${JSON.stringify(t.v)})`);

  function expression() {
    const cond = binary(0);
    if (is('?')) {
      next();
      const a = expression();
      expect(':');
      const b = expression();
      return { k: 'cond', cond, a, b };
    }
    return cond;
  }
  function binary(level) {
    if (level >= BINARY.length) return unary();
    let left = binary(level + 1);
    for (;;) {
      const t = peek();
      if (t.t === 'op' && t.v === 'not' && level === 3 && toks[p + 1]?.v === 'in') {
        next();
        next();
        const right = binary(level + 1);
        left = { k: 'bin', op: 'not in', l: left, r: right, pos: t.pos };
        continue;
      }
      if (t.t !== 'op' || !BINARY[level].includes(t.v)) return left;
      next();
      const right = binary(level + 1);
      left = { k: 'bin', op: t.v, l: left, r: right, pos: t.pos };
    }
  }
  function unary() {
    if (is('!') || is('not')) {
      next();
      return { k: 'not', e: unary() };
    }
    if (is('-')) {
      next();
      return { k: 'neg', e: unary() };
    }
    return postfix(primary());
  }
  function primary() {
    const t = next();
    if (t.t === 'str' || t.t === 'num' || t.t === 'lit') return { k: 'lit', v: t.v };
    if (t.t === 'id') {
      if (is('(')) {
        next();
        const args = [];
        if (!is(')')) {
          do args.push(expression());
          while (is(',') && next());
        }
        expect(')');
        return { k: 'call', name: t.v, args, pos: t.pos };
      }
      return { k: 'id', name: t.v, pos: t.pos };
    }
    if (t.t === 'op' && t.v === '(') {
      const e = expression();
      expect(')');
      return e;
    }
    if (t.t === 'op' && t.v === '[') {
      const items = [];
      if (!is(']')) {
        do items.push(expression());
        while (is(',') && next());
      }
      expect(']');
      return { k: 'arr', items };
    }
    if (t.t === 'eof') throw posErr(src, t.pos, 'unexpected end of expression');
    throw posErr(src, t.pos, `unexpected token ${fmt(t)}`);
  }
  function postfix(e) {
    for (;;) {
      if (is('.') || is('?.')) {
        next();
        const t = next();
        if (t.t !== 'id' && !(t.t === 'op' && WORD_OPS.has(t.v))) throw posErr(src, t.pos, `expected name after "."`);
        e = { k: 'member', obj: e, name: t.v };
      } else if (is('[')) {
        next();
        const idx = expression();
        expect(']');
        e = { k: 'index', obj: e, idx };
      } else return e;
    }
  }
  const ast = expression();
  if (peek().t !== 'eof') throw posErr(src, peek().pos, `unexpected token ${fmt(peek())}`);
  return ast;
}

const EMAIL = /[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}/g;
const CARD = /\b(?:\d[ -]?){13,19}\b/g;
const SECRET = /\b(AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{36}|sk-[A-Za-z0-9]{20,})\b|-----BEGIN [A-Z ]*PRIVATE KEY-----/g;
const URL_RE = /https?:\/\/[^\s"'<>]+/g;

function str(v) {
  if (v === null || v === undefined) return '';
  return typeof v === 'string' ? v : typeof v === 'object' ? JSON.stringify(v) : String(v);
}

export const FUNCS = {
  len: (v) => (typeof v === 'string' || Array.isArray(v) ? v.length : v && typeof v === 'object' ? Object.keys(v).length : 0),
  string: str,
  lower: (s) => str(s).toLowerCase(),
  upper: (s) => str(s).toUpperCase(),
  trim: (s) => str(s).trim(),
  int: (v) => Math.trunc(Number(v)),
  float: (v) => Number(v),
  abs: (v) => Math.abs(Number(v)),
  any: (arr) => (arr ?? []).some(Boolean),
  pii: (s) => [...(str(s).match(EMAIL) ?? []), ...(str(s).match(CARD) ?? [])],
  emails: (s) => str(s).match(EMAIL) ?? [],
  secrets: (s) => str(s).match(SECRET) ?? [],
  urls: (s) => str(s).match(URL_RE) ?? [],
  domain: (s) => {
    const v = str(s);
    const at = v.lastIndexOf('@');
    if (at >= 0) return v.slice(at + 1).toLowerCase();
    try {
      return new URL(v).hostname;
    } catch {
      return '';
    }
  },
  glob: (pat, s) => new RegExp('^' + str(pat).replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.') + '$').test(str(s)),
  regexMatch: (s, re) => new RegExp(str(re)).test(str(s)),
  icontains: (s, sub) => str(s).toLowerCase().includes(str(sub).toLowerCase()),
  containsAny: (s, list) => (list ?? []).some((x) => str(s).toLowerCase().includes(str(x).toLowerCase())),
  countTool: (session, tool) => (session?.steps ?? []).filter((h) => h.tool === tool || FUNCS.glob(tool, h.tool)).length,
  lastTool: (session) => [...(session?.steps ?? [])].reverse().find((h) => h.tool)?.tool ?? '',
};

/** @param {any} ast @param {Record<string, any>} env */
export function evaluate(ast, env) {
  const ev = (n) => evaluate(n, env);
  switch (ast.k) {
    case 'lit':
      return ast.v;
    case 'arr':
      return ast.items.map(ev);
    case 'id':
      return env[ast.name];
    case 'member': {
      const o = ev(ast.obj);
      return o === null || o === undefined ? undefined : o[ast.name];
    }
    case 'index': {
      const o = ev(ast.obj);
      return o === null || o === undefined ? undefined : o[ev(ast.idx)];
    }
    case 'call': {
      const f = FUNCS[ast.name];
      if (!f) throw new Error(`unknown function ${ast.name}`);
      return f(...ast.args.map(ev));
    }
    case 'not':
      return !ev(ast.e);
    case 'neg':
      return -ev(ast.e);
    case 'cond':
      return ev(ast.cond) ? ev(ast.a) : ev(ast.b);
    case 'bin': {
      if (ast.op === '&&' || ast.op === 'and') return Boolean(ev(ast.l)) && Boolean(ev(ast.r));
      if (ast.op === '||' || ast.op === 'or') return Boolean(ev(ast.l)) || Boolean(ev(ast.r));
      if (ast.op === '??') return ev(ast.l) ?? ev(ast.r);
      const l = ev(ast.l),
        r = ev(ast.r);
      switch (ast.op) {
        case '==':
          return l === r || (l == null && r == null);
        case '!=':
          return !(l === r || (l == null && r == null));
        case '<':
          return l < r;
        case '>':
          return l > r;
        case '<=':
          return l <= r;
        case '>=':
          return l >= r;
        case '+':
          return l + r;
        case '-':
          return l - r;
        case '*':
          return l * r;
        case '/':
          return l / r;
        case '%':
          return l % r;
        case '**':
          return l ** r;
        case 'in':
          return Array.isArray(r) ? r.includes(l) : r && typeof r === 'object' ? l in r : false;
        case 'not in':
          return !(Array.isArray(r) ? r.includes(l) : r && typeof r === 'object' ? l in r : false);
        case 'contains':
          return str(l).includes(str(r));
        case 'startsWith':
          return str(l).startsWith(str(r));
        case 'endsWith':
          return str(l).endsWith(str(r));
        case 'matches':
          return new RegExp(str(r)).test(str(l));
      }
    }
  }
  throw new Error(`cannot evaluate ${ast.k}`);
}

/** Known names, so a typo is a compile error as with the real typed environment. */
export const ENV_NAMES = new Set(['method', 'kind', 'agent', 'user', 'session', 'turnId', 'stepId', 'role', 'text', 'tool', 'toolDef', 'inputs', 'isError', 'reasoning', 'mcp', 'a2a', 'params', 'now']);

/** Compiles a condition: syntax, unknown names and unknown functions are errors. @param {string} src */
export function compile(src) {
  if (!src || !src.trim()) throw new ExprError('the condition is empty', 1, 1);
  const ast = parse(src);
  const check = (n) => {
    if (!n || typeof n !== 'object') return;
    if (n.k === 'id' && !ENV_NAMES.has(n.name)) throw posErr(src, n.pos, `unknown name ${n.name}`);
    if (n.k === 'call' && !FUNCS[n.name]) throw posErr(src, n.pos, `unknown func ${n.name}`);
    for (const v of Object.values(n)) {
      if (Array.isArray(v)) v.forEach(check);
      else if (v && typeof v === 'object') check(v);
    }
  };
  check(ast);
  return ast;
}
