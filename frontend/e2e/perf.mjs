// Measures the console with a large store: 10,000 sessions and 1,000,000 steps (the mock
// guardian seeds them compactly), then a burst of live steps.
//   npm run build && node e2e/perf.mjs
//   VIGIL_URL=http://127.0.0.1:7878 node e2e/perf.mjs   (a running guardian you filled yourself)

import { aosRequest, post, startBrowser, startGuardian, toolCall } from './harness.mjs';

process.env.VIGIL_MOCK ??= '1';
const SESSIONS = Number(process.env.PERF_SESSIONS ?? 10_000);
const STEPS = Number(process.env.PERF_STEPS ?? 1_000_000);
const t0 = Date.now();
const guardian = process.env.VIGIL_URL
  ? { url: process.env.VIGIL_URL, stop: async () => {} }
  : await startGuardian({ extraArgs: ['--seed-sessions', String(SESSIONS), '--seed-steps', String(STEPS), '--stats-ms', '5000'], startTimeoutMs: 180_000 });
const results = { sessions: SESSIONS, steps: STEPS, seedSeconds: (Date.now() - t0) / 1000 };

const b = await startBrowser();
const page = await b.context.newPage();
await page.addInitScript(() => {
  // Long tasks (> 50 ms) on the main thread, for the whole run.
  /** @type {any} */ (window).__long = [];
  new PerformanceObserver((l) => l.getEntries().forEach((e) => /** @type {any} */ (window).__long.push(e.duration))).observe({ type: 'longtask', buffered: true });
  // When the first session row is painted, in page time.
  new MutationObserver((_, obs) => {
    if (document.querySelector('[data-testid="session-row"]')) {
      /** @type {any} */ (window).__firstRow = performance.now();
      obs.disconnect();
    }
  }).observe(document, { childList: true, subtree: true });
});

// 1. Live page: time to the first session row.
let t = Date.now();
await page.goto(`${guardian.url}/#/live`);
await page.locator('[data-testid="session-row"]').first().waitFor({ timeout: 60_000 });
results.liveFirstRowMs = Date.now() - t;
results.liveRowsInDom = await page.locator('[data-testid="session-row"]').count();
Object.assign(
  results,
  await page.evaluate(() => {
    const api = performance.getEntriesByType('resource').find((e) => e.name.includes('/api/sessions?'));
    return {
      liveFirstRowPageMs: Math.round(/** @type {any} */ (window).__firstRow),
      liveSessionsApiMs: Math.round(api?.duration ?? -1),
      liveRenderAfterApiMs: Math.round(/** @type {any} */ (window).__firstRow - (/** @type {any} */ (api)?.responseEnd ?? 0)),
      scriptTransferKB: Math.round(performance.getEntriesByType('resource').filter((e) => /\.(js|css)$/.test(e.name)).reduce((a, e) => a + /** @type {any} */ (e).transferSize, 0) / 1024),
    };
  }),
);

// 2. Scroll to the end repeatedly: each time the next page of 100 sessions loads.
t = Date.now();
const target = 2000;
for (let i = 0; i < 60; i++) {
  await page.locator('.vlist').first().evaluate((el) => (el.scrollTop = el.scrollHeight));
  await page.waitForTimeout(60);
  const shown = await page.evaluate(() => Number(/([\d,]+) shown/.exec(document.querySelector('.page-header p')?.textContent ?? '')?.[1]?.replace(/,/g, '') ?? 0));
  if (shown >= target) break;
}
results.scrollTo2000SessionsMs = Date.now() - t;
results.sessionsLoaded = await page.evaluate(() => document.querySelector('.page-header p')?.textContent);
results.liveRowsInDomAfterScroll = await page.locator('[data-testid="session-row"]').count();

// 3. Server-side search over all sessions.
t = Date.now();
const lastId = `sess-${String(SESSIONS - 1).padStart(5, '0')}`;
await page.locator('#session-search').fill(lastId);
await page.locator(`[data-session^="${lastId}"]`).first().waitFor({ timeout: 30_000 });
results.searchMs = Date.now() - t;

// 4. A session's timeline.
t = Date.now();
const mid = Math.floor(SESSIONS / 2);
const midId = `sess-${String(mid).padStart(5, '0')}-${['billing', 'support', 'research', 'devops', 'sales'][mid % 5]}`;
await page.goto(`${guardian.url}/#/session/${encodeURIComponent(midId)}`);
await page.getByTestId('timeline-step').first().waitFor({ timeout: 30_000 });
results.sessionFirstStepMs = Date.now() - t;
results.sessionStepsLoaded = await page.evaluate(() => document.querySelector('.tl-head .faint')?.textContent);

// 5. A burst of 1,000 live steps while the Live page is open.
await page.goto(`${guardian.url}/#/live`);
await page.locator('[data-testid="session-row"]').first().waitFor({ timeout: 60_000 });
await page.evaluate(() => (/** @type {any} */ (window).__long.length = 0));
t = Date.now();
const burst = [];
for (let i = 0; i < 1000; i++) {
  const who = { session: `burst-${i % 50}`, step: i + 1, agent: { id: 'burst-bot', name: 'Burst bot' } };
  burst.push(post(guardian.url, aosRequest(who, 'steps/toolCallRequest', toolCall('search_web', { query: `q${i}` }))));
  if (burst.length % 50 === 0) await Promise.all(burst.slice(-50));
}
await Promise.all(burst);
await page.locator('[data-session="burst-49"]').waitFor({ timeout: 30_000 });
results.burst1000StepsMs = Date.now() - t;
await page.waitForTimeout(500);
results.tickerRows = await page.getByTestId('tick').count();
const long = await page.evaluate(() => /** @type {any} */ (window).__long.slice());
results.burstLongTasks = long.length;
results.burstLongestTaskMs = Math.round(Math.max(0, ...long));
results.burstEventsPerSecond = Math.round(1000 / (results.burst1000StepsMs / 1000));
results.jsHeapMB = await page.evaluate(() => Math.round((/** @type {any} */ (performance).memory?.usedJSHeapSize ?? 0) / 1e6));
results.domNodes = await page.evaluate(() => document.getElementsByTagName('*').length);

console.log(JSON.stringify(results, null, 2));
await b.stop();
await guardian.stop();
