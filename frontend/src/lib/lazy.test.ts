import { describe, expect, it } from 'vitest';
import { retryable } from './lazy';

describe('retryable', () => {
  it('forgets a failed load, so the next call loads again, and keeps a success', async () => {
    let calls = 0;
    let fail = true;
    const load = retryable(async () => {
      calls++;
      if (fail) throw new Error('Unable to preload CSS for /assets/Rules.css');
      return { page: 'rules' };
    });
    await expect(load()).rejects.toThrow('Unable to preload CSS');
    await expect(load()).rejects.toThrow('Unable to preload CSS');
    expect(calls).toBe(2);
    fail = false;
    const m = await load();
    expect(m.page).toBe('rules');
    expect(await load()).toBe(m);
    expect(calls).toBe(3);
  });

  it('shares one load between callers while it is under way', async () => {
    let calls = 0;
    const load = retryable(async () => ++calls);
    const [a, b] = await Promise.all([load(), load()]);
    expect([a, b, calls]).toEqual([1, 1, 1]);
  });

  it('runs beforeRetry only before a load that follows a failure', async () => {
    const log: string[] = [];
    let fail = true;
    const load = retryable(
      async () => {
        log.push('load');
        if (fail) throw new Error('down');
        return 1;
      },
      async () => {
        log.push('restyle');
      },
    );
    await load().catch(() => undefined);
    fail = false;
    await load();
    expect(log).toEqual(['load', 'restyle', 'load']);
  });
});
