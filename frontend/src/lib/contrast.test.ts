import { describe, expect, it } from 'vitest';
import css from '../app.css?raw';

// WCAG AA for the filled buttons' text in both themes, hover included (13.5 px text: 4.5:1).

function tokens(block: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of block.matchAll(/(--[\w-]+):\s*(#[0-9a-fA-F]{6})\b/g)) out[m[1]!] = m[2]!;
  return out;
}

function luminance(hex: string): number {
  const [r, g, b] = [1, 3, 5].map((i) => {
    const v = parseInt(hex.slice(i, i + 2), 16) / 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r! + 0.7152 * g! + 0.0722 * b!;
}

function contrast(a: string, b: string): number {
  const [x, y] = [luminance(a), luminance(b)];
  return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
}

describe('button colours', () => {
  const darkAt = css.indexOf('@media (prefers-color-scheme: dark)');
  const light = tokens(css.slice(0, darkAt));
  const dark = { ...light, ...tokens(css.slice(darkAt, css.indexOf('}\n}', darkAt))) };

  it('reads both themes', () => {
    expect(light['--ok-bg']).toBeDefined();
    expect(dark['--ok-bg']).not.toBe(light['--ok-bg']);
  });

  for (const [theme, t] of [
    ['light', light],
    ['dark', dark],
  ] as const) {
    it.each(['--ok-bg', '--ok-bg-hover', '--danger-bg', '--danger-bg-hover'])(`white on %s is at least 4.5:1 (${theme})`, (name) => {
      expect(t[name], name).toBeDefined();
      expect(contrast('#ffffff', t[name]!)).toBeGreaterThanOrEqual(4.5);
    });
    it(`primary buttons, hovered or not, are at least 4.5:1 (${theme})`, () => {
      for (const bg of ['--accent', '--accent-2']) expect(contrast(t['--on-accent']!, t[bg]!)).toBeGreaterThanOrEqual(4.5);
    });
  }

  it('hover states use the tokens, not a lighter mix', () => {
    expect(css).toMatch(/button\.ok:hover:not\(:disabled\)\s*\{[^}]*var\(--ok-bg-hover\)/);
    expect(css).toMatch(/button\.danger:hover:not\(:disabled\)\s*\{[^}]*var\(--danger-bg-hover\)/);
  });
});
