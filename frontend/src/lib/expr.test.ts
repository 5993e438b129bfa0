import { describe, expect, it } from 'vitest';
import { lineCol, offsetOf, tokenize, type TokenType } from './expr';

const sig = (src: string) =>
  tokenize(src)
    .filter((t) => t.type !== 'space')
    .map((t) => `${t.type}:${t.text}`);

describe('tokenize', () => {
  it('covers the source exactly', () => {
    const src = 'tool == "send_email" && !(string(inputs.to) endsWith "@corp.example") /* c */ // end';
    expect(tokenize(src).map((t) => t.text).join('')).toBe(src);
  });

  it('classifies a typical rule', () => {
    expect(sig('tool == "send_email" && !(string(inputs.to) endsWith "@corp.example")')).toEqual([
      'field:tool',
      'operator:==',
      'string:"send_email"',
      'operator:&&',
      'operator:!',
      'punct:(',
      'builtin:string',
      'punct:(',
      'field:inputs',
      'operator:.',
      'ident:to',
      'punct:)',
      'keyword:endsWith',
      'string:"@corp.example"',
      'punct:)',
    ]);
  });

  it.each<[string, TokenType[]]>([
    ['len(pii(text)) > 0 && countTool(session, "send_*") < 3', ['builtin', 'punct', 'helper', 'punct', 'field', 'punct', 'punct', 'operator', 'number', 'operator', 'helper', 'punct', 'field', 'punct', 'string', 'punct', 'operator', 'number']],
    ['len(pii(text)) > 0', ['builtin', 'punct', 'helper', 'punct', 'field', 'punct', 'punct', 'operator', 'number']],
    ['inputs.amount > 1_000.5e3', ['field', 'operator', 'ident', 'operator', 'number']],
    ['1..5', ['number', 'operator', 'number']],
    ['0xFF ?? nil', ['number', 'operator', 'keyword']],
    ["'single' + `raw\nline`", ['string', 'operator', 'string']],
    ['user?.name', ['field', 'operator', 'ident']],
    ['a.text', ['ident', 'operator', 'ident']],
    ['pii', ['ident']], // a helper name only counts when called
    ['not (x in ["a", "b"])', ['keyword', 'punct', 'ident', 'keyword', 'punct', 'string', 'punct', 'string', 'punct', 'punct']],
    ['let x = 1; x ** 2', ['keyword', 'ident', 'operator', 'number', 'punct', 'ident', 'operator', 'number']],
    ['a @ b', ['ident', 'invalid', 'ident']],
    ['"unterminated\nnext', ['string', 'ident']],
  ])('%s', (src, types) => {
    expect(
      tokenize(src)
        .filter((t) => t.type !== 'space')
        .map((t) => t.type),
    ).toEqual(types);
  });

  it('keeps comments whole', () => {
    expect(sig('a // one\n/* two\nthree */ b')).toEqual(['ident:a', 'comment:// one', 'comment:/* two\nthree */', 'ident:b']);
  });
});

describe('positions', () => {
  const src = 'tool == "x"\n  && inputs.y >';
  it('lineCol is 1-based', () => {
    expect(lineCol(src, 0)).toEqual({ line: 1, column: 1 });
    expect(lineCol(src, 14)).toEqual({ line: 2, column: 3 });
  });
  it('offsetOf inverts lineCol and clamps', () => {
    expect(offsetOf(src, 2, 3)).toBe(14);
    expect(offsetOf(src, 2, 2, 0)).toBe(14);
    expect(offsetOf(src, 9, 99)).toBe(src.length);
    expect(offsetOf(src, 0, 0)).toBe(0);
  });
  it('offsetOf counts server columns in code points', () => {
    const s = 'text == "😀" && x';
    // column 13 (1-based, runes) is the first & after the emoji string
    expect(s.slice(offsetOf(s, 1, 13))).toBe('&& x');
  });
});
