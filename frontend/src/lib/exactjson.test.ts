import { describe, expect, it } from 'vitest';
import { compactJson, parseExact, parseJsonExact, reindent, spliceValues } from './exactjson';
import { JsonNumber, RawJson, canonicalNumber, numberEqual, stringifyExact } from './jsonnumber';

describe('parseExact', () => {
  it('keeps the digits of numbers a JS number would change, and plain numbers as numbers', () => {
    const d = parseExact('{"big": 9007199254740993, "n": 42, "f": 0.5, "one": 1.0, "e": 1e3, "neg": -0, "frac": 0.1000000000000000055511151231257827}');
    const v = d.value as Record<string, unknown>;
    expect(v.big).toBeInstanceOf(JsonNumber);
    expect((v.big as JsonNumber).text).toBe('9007199254740993');
    expect(v.n).toBe(42);
    expect(v.f).toBe(0.5);
    expect((v.one as JsonNumber).text).toBe('1.0');
    expect((v.e as JsonNumber).text).toBe('1e3');
    expect((v.neg as JsonNumber).text).toBe('-0');
    expect((v.frac as JsonNumber).text).toBe('0.1000000000000000055511151231257827');
  });
  it('reads what JSON.parse reads, the same way', () => {
    const texts = ['{}', '[]', ' [1, "a\\"b\\u00e9", true, false, null, {"x": [[]]}] ', '"\\ud83d\\ude00"', '{"a": 1, "a": 2}', '{"__proto__": {"x": 1}}'];
    for (const t of texts) expect(stringifyExact(parseExact(t).value)).toBe(JSON.stringify(JSON.parse(t)));
    const proto = parseExact('{"__proto__": {"x": 1}}').value as Record<string, unknown>;
    expect(Object.getPrototypeOf(proto)).toBe(Object.prototype);
    expect(Object.keys(proto)).toEqual(['__proto__']);
  });
  it('refuses what is not JSON', () => {
    for (const t of ['', '{', '{"a" 1}', '[1,]', '01', '+1', '.5', '"a', '{"a":1} x', 'tru', '"\u0001"']) expect(() => parseExact(t), t).toThrow(SyntaxError);
  });
  it('knows where each value is, by the path diff.join writes', () => {
    const t = '{"toolCallRequest": {"inputs": [{"name": "amount", "value": 9007199254740993}, {"name": "to", "value": "ACME"}]}, "a b": [true]}';
    const d = parseExact(t);
    const at = (p: string) => t.slice(...d.spans.get(p)!);
    expect(at('toolCallRequest.inputs[0].value')).toBe('9007199254740993');
    expect(at('toolCallRequest.inputs[1].value')).toBe('"ACME"');
    expect(at('["a b"][0]')).toBe('true');
    expect(at('')).toBe(t);
  });
});

describe('parseJsonExact', () => {
  it('reads what parseExact reads, numbers with their digits', () => {
    const t = '{"steps": [{"seq": 7, "request": {"inputs": [{"name": "id", "value": 12345678901234567891}, {"name": "x", "value": [1.50, -0, "caf\\u00e9", "plain"]}]}}]}';
    const v = parseJsonExact(t) as { steps: { seq: number; request: { inputs: { value: unknown }[] } }[] };
    expect(v).toEqual(parseExact(t).value);
    expect(v.steps[0]!.seq).toBe(7);
    const [id, x] = v.steps[0]!.request.inputs;
    expect(id!.value).toBeInstanceOf(JsonNumber);
    expect(String(id!.value)).toBe('12345678901234567891');
    expect(stringifyExact(x!.value)).toBe('[1.50,-0,"café","plain"]');
    expect(stringifyExact(v)).toBe(compactJson(t).replace('\\u00e9', 'é'));
  });
  it('refuses what JSON.parse refuses', () => {
    for (const t of ['', '{"a":}', '[1,]', '"a\u0001"', '{"a":1} x']) expect(() => parseJsonExact(t), t).toThrow(SyntaxError);
  });
});

describe('spliceValues', () => {
  it('replaces the values at some paths and keeps every other byte', () => {
    const t = '{"inputs":[{"name":"amount","value":9007199254740993},{"name":"to","value":"ACME"}],"s":"caf\\u00e9","k":{"2":1,"1":2}}';
    const out = spliceValues(parseExact(t), new Map([['inputs[1].value', '"Other"']]));
    expect(out).toBe(t.replace('"ACME"', '"Other"'));
    expect(spliceValues(parseExact(t), new Map([['nope', '1']]))).toEqual({ missing: 'nope' });
  });
});

describe('reindent', () => {
  it('indents as JSON.stringify(v, null, 2) does, keeping each token as written', () => {
    const t = '{"a":[1,{"b":null},[]],"c":{},"d":"x, y: [z]"}';
    expect(reindent(t)).toBe(JSON.stringify(JSON.parse(t), null, 2));
    const exact = '{ "n" : 9007199254740993, "s": "caf\\u00e9\\"" }';
    expect(reindent(exact)).toBe('{\n  "n": 9007199254740993,\n  "s": "caf\\u00e9\\""\n}');
    expect(compactJson(reindent(exact))).toBe('{"n":9007199254740993,"s":"caf\\u00e9\\""}');
    expect(compactJson(' [ 1 , { } , [ ] , "a b" ] ')).toBe('[1,{},[],"a b"]');
  });
});

describe('stringifyExact', () => {
  it('writes what JSON.stringify writes, with exact numbers and raw JSON as they are', () => {
    const values: unknown[] = [{ a: [1, 'x', null, undefined, { b: undefined }], c: true, d: new Date(0), e: NaN }, [], {}, 'a"b', 0.1];
    for (const v of values) {
      expect(stringifyExact(v)).toBe(JSON.stringify(v));
      expect(stringifyExact(v, 2)).toBe(JSON.stringify(v, null, 2));
    }
    expect(stringifyExact({ amount: new JsonNumber('9007199254740993'), params: new RawJson('{"a": 1.0}') })).toBe('{"amount":9007199254740993,"params":{"a": 1.0}}');
  });
});

describe('numberEqual', () => {
  it('compares decimal values, not JS numbers', () => {
    expect(numberEqual(new JsonNumber('9007199254740993'), 9007199254740992)).toBe(false);
    expect(numberEqual(new JsonNumber('1.0'), 1)).toBe(true);
    expect(numberEqual(new JsonNumber('1e3'), new JsonNumber('1000.00'))).toBe(true);
    expect(numberEqual(new JsonNumber('-0'), 0)).toBe(true); // as the guardian's audit diff compares them
    expect(numberEqual(new JsonNumber('12.5'), 12.50001)).toBe(false);
    expect(canonicalNumber('0.000')).toBe('0');
    expect(canonicalNumber('-120e-1')).toBe('-12e0');
  });
});
