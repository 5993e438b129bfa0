import { describe, expect, it } from 'vitest';
import { bidiBalanced, bidiBalancedWords, jsonStringShown } from './bidi';

const RLO = '\u202e';
const LRE = '\u202a';
const PDF = '\u202c';
const RLI = '\u2067';
const PDI = '\u2069';

describe('bidi controls in untrusted text', () => {
  it('leaves text without controls alone', () => {
    expect(bidiBalanced('note=ok עברית')).toBe('note=ok עברית');
  });
  it('closes an override left open', () => {
    expect(bidiBalanced(`ok${RLO}`)).toBe(`ok${RLO}${PDF}`);
    expect(bidiBalanced(`${LRE}a${RLO}b`)).toBe(`${LRE}a${RLO}b${PDF}${PDF}`);
  });
  it('closes isolates, and embeddings inside them, in order', () => {
    expect(bidiBalanced(`${RLO}a${RLI}b${LRE}c`)).toBe(`${RLO}a${RLI}b${LRE}c${PDF}${PDI}${PDF}`);
  });
  it('drops a PDI or PDF that closes nothing the text opened', () => {
    // A stray PDI would close the isolate around the text and let the RLO after it out.
    expect(bidiBalanced(`ok${PDI}${RLO}x`)).toBe(`ok${RLO}x${PDF}`);
    expect(bidiBalanced(`ok${PDF}`)).toBe('ok');
    // Inside an isolate a PDF cannot close an embedding opened outside it.
    expect(bidiBalanced(`${RLO}${RLI}${PDF}x`)).toBe(`${RLO}${RLI}x${PDI}${PDF}`);
  });
  it('keeps balanced controls as they are', () => {
    expect(bidiBalanced(`a${RLI}b${PDI}c${LRE}d${PDF}`)).toBe(`a${RLI}b${PDI}c${LRE}d${PDF}`);
  });
});

describe('bidi controls in joined text', () => {
  it('keeps each control within its word', () => {
    expect(bidiBalancedWords(`note=ok${RLO} to=ACCT-1  amount=9000`)).toBe(`note=ok${RLO}${PDF} to=ACCT-1  amount=9000`);
    expect(bidiBalancedWords('plain text')).toBe('plain text');
  });
});

describe('bidi controls in a JSON view', () => {
  it('writes them as JSON escapes, which parse back to the same string', () => {
    const s = `note=ok${RLO} amount=9000${PDI}`;
    const shown = jsonStringShown(s);
    expect(shown).toBe('"note=ok\\u202e amount=9000\\u2069"');
    expect(JSON.parse(shown)).toBe(s);
  });
  it('leaves other text as JSON.stringify writes it', () => {
    expect(jsonStringShown('עברית "q"\n')).toBe(JSON.stringify('עברית "q"\n'));
  });
});
