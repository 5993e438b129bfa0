// What arrives while a page loads is neither lost nor counted twice: the Live sessions page, a
// session's page and the audit log keep the live events that came while their first answer was
// on its way (an answer taken before them), and load again what was stored before the live
// stream first opened (the stream's first connection replays nothing). Each case is made
// deterministic: the page's first answer is fetched at once (the snapshot is taken then) and
// handed to the page only after the steps or comments were posted and the page had them live;
// or the live stream is kept from opening until they are stored.
//   VIGIL_BIN=/path/to/vigil node --test e2e/liveload.test.mjs

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { isDeepStrictEqual } from 'node:util';
import { aosRequest, apiCall, post, startBrowser, startGuardian, toolCall } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;

before(async () => {
  guardian = await startGuardian();
  browser = await startBrowser();
  await browser.context.addInitScript(() => localStorage.setItem('vigil.operator', 'rita'));
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/** Calls the console API as rita. @param {string} method @param {string} path @param {unknown} [body] */
const api = (method, path, body) => apiCall(guardian.url, method, path, body);

const uid = (/** @type {string} */ p) => `${p}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;

/** Posts steps 1..n of a session (an allowed tool call each) and resolves with the session's last seq. */
async function postSteps(/** @type {string} */ sid, /** @type {number} */ from, /** @type {number} */ to) {
  for (let i = from; i <= to; i++) {
    const r = await post(guardian.url, aosRequest({ session: sid, step: i }, 'steps/toolCallRequest', toolCall('search', { q: `m${i}` })));
    assert.equal(r.result?.decision, 'allow', JSON.stringify(r));
  }
  return (await api('GET', `/api/sessions/${encodeURIComponent(sid)}`)).lastSeq;
}

/** Posts n comments on a session ("comment first", …) and resolves with the last one's seq. */
async function postComments(/** @type {string} */ sid, /** @type {number} */ n, first = 1) {
  let seq = 0;
  for (let i = first; i < first + n; i++) seq = (await api('POST', `/api/sessions/${encodeURIComponent(sid)}/comments`, { operator: 'rita', text: `comment ${i}` })).seq;
  return seq;
}

/** A page of its own (its routes die with it), with the live stream open. */
async function openPage(/** @type {string} */ hash = '#/held') {
  const page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
  const errors = /** @type {string[]} */ ([]);
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${guardian.url}/${hash}`);
  await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
  return { page, errors };
}

/** Goes to another page of the console without reloading it (the live stream stays open). */
const navigate = (/** @type {import('playwright-core').Page} */ page, /** @type {string} */ hash) => page.evaluate((h) => (location.hash = h), hash);

/**
 * Holds back the page's next request that matches: its answer is taken from the guardian at
 * once (an older snapshot than whatever is stored next) and handed to the page by release(),
 * which resolves once the browser has it. Later requests go through. (The route stays for the
 * page's life: a route that expires ({times: 1}) turns interception off when it was the last
 * one, which lets the other held requests through at once.)
 * @param {import('playwright-core').Page} page @param {(u: URL) => boolean} match
 */
async function holdAnswer(page, match) {
  /** @type {() => void} */
  let open = () => {};
  const gate = new Promise((ok) => (open = () => ok(undefined)));
  /** @type {() => void} */
  let taken = () => {};
  const snapshot = new Promise((ok) => (taken = () => ok(undefined)));
  /** @type {() => void} */
  let handed = () => {};
  const delivered = new Promise((ok) => (handed = () => ok(undefined)));
  let used = false;
  await page.route(match, async (route) => {
    if (used) return route.continue();
    used = true;
    const response = await route.fetch();
    taken();
    await gate;
    await route.fulfill({ response });
    handed();
  });
  return {
    snapshot,
    release: async () => {
      open();
      await delivered;
    },
  };
}

/**
 * Keeps the console's live stream from opening until release(): a page opened meanwhile loads
 * with the stream not open yet, as right after the console starts.
 * @param {import('playwright-core').Page} page
 */
async function holdStream(page) {
  /** @type {() => void} */
  let release = () => {};
  const gate = new Promise((ok) => (release = () => ok(undefined)));
  await page.routeWebSocket(/\/api\/live/, async (ws) => {
    await gate;
    ws.connectToServer();
  });
  return release;
}

/** A fresh page whose live stream does not open until release(). */
async function openPageStreamHeld(/** @type {string} */ hash) {
  const page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
  const errors = /** @type {string[]} */ ([]);
  page.on('pageerror', (e) => errors.push(String(e)));
  const release = await holdStream(page);
  await page.goto(`${guardian.url}/${hash}`);
  await page.getByTestId('live-status').getByText('Connecting…').waitFor();
  return { page, errors, release };
}

/** Waits until the page has handled the live events up to seq (the sidebar shows the last one). */
async function sawSeq(/** @type {import('playwright-core').Page} */ page, /** @type {number} */ seq) {
  const status = page.getByTestId('live-status');
  const end = Date.now() + 10_000;
  let text = '';
  while (Date.now() < end) {
    text = (await status.textContent()) ?? '';
    const m = /seq ([\d,.\s]+)/.exec(text);
    if (m && Number(m[1].replace(/\D/g, '')) >= seq) return;
    await new Promise((ok) => setTimeout(ok, 50));
  }
  assert.fail(`the page never had seq ${seq} live: ${text}`);
}

/**
 * Waits (briefly: the page has had everything) until read() gives want, and fails with what it
 * gave. @template T @param {() => Promise<T>} read @param {T} want @param {string} what
 */
async function settles(read, want, what) {
  const end = Date.now() + 3000;
  let got = await read();
  while (!isDeepStrictEqual(got, want) && Date.now() < end) {
    await new Promise((ok) => setTimeout(ok, 100));
    got = await read();
  }
  assert.deepEqual(got, want, what);
}
/** What a session's row on the Live page says: its step count and its allow chip. */
async function liveRow(/** @type {import('playwright-core').Page} */ page, /** @type {string} */ sid) {
  const row = page.locator(`[data-testid="session-row"][data-session="${sid}"]`);
  if ((await row.count()) === 0) return 'missing';
  const steps = ((await row.locator('.last .faint').textContent()) ?? '').trim();
  const chip = row.locator('.decisions .chip.allow');
  const allow = (await chip.count()) ? `${((await chip.textContent()) ?? '').replace(/\D/g, '')} allow` : 'no allow chip';
  return `${steps} / ${allow}`;
}

/** What the API says of a session, as liveRow shows it. */
async function apiRow(/** @type {string} */ sid) {
  const s = await api('GET', `/api/sessions/${encodeURIComponent(sid)}`);
  return `${s.steps} steps / ${s.decisions.allow} allow`;
}

/** What a session's page says: the steps loaded and the header's count ('' when not shown). */
async function sessionView(/** @type {import('playwright-core').Page} */ page) {
  const text = async (/** @type {import('playwright-core').Locator} */ l) => ((await l.count()) ? ((await l.textContent()) ?? '').replace(/\s+/g, ' ').trim() : '');
  return { loaded: await text(page.getByText(/^\d+\+? loaded$/)), header: await text(page.getByTestId('session-steps')) };
}

describe('Live sessions page', () => {
  test('steps that arrive while the sessions load are kept: the row counts what the API counts', async () => {
    const { page, errors } = await openPage();
    try {
      const sid = uid('live-during');
      const held = await holdAnswer(page, (u) => u.pathname === '/api/sessions');
      await navigate(page, '#/live');
      await held.snapshot;
      // The first step of a new session is stored after the snapshot and reaches the page live
      // while the answer is still on its way.
      await sawSeq(page, await postSteps(sid, 1, 1));
      await held.release();
      await page.getByText(/^\d+ shown/).waitFor();
      await sawSeq(page, await postSteps(sid, 2, 21));
      assert.equal(await apiRow(sid), '21 steps / 21 allow');
      await settles(() => liveRow(page, sid), '21 steps / 21 allow', 'the Live row of the session');
      assert.deepEqual(errors, []);
    } finally {
      await page.close();
    }
  });

  test('a step stored before the live stream first opened is loaded when it opens', async () => {
    const { page, errors, release } = await openPageStreamHeld('#/live');
    try {
      const sid = uid('live-before');
      await page.getByText(/^\d+ shown/).waitFor();
      await postSteps(sid, 1, 1);
      release();
      await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
      await sawSeq(page, await postSteps(sid, 2, 21));
      assert.equal(await apiRow(sid), '21 steps / 21 allow');
      await settles(() => liveRow(page, sid), '21 steps / 21 allow', 'the Live row of the session');
      assert.deepEqual(errors, []);
    } finally {
      await page.close();
    }
  });
});

describe('session page', () => {
  test('steps that arrive while the timeline and the header load are kept, and counted once', async () => {
    const { page, errors } = await openPage();
    try {
      const sid = uid('sess-during');
      // Stored, and on the page's stream, before the page opens.
      await sawSeq(page, await postSteps(sid, 1, 1));
      const path = `/api/sessions/${sid}`;
      const header = await holdAnswer(page, (u) => u.pathname === path);
      const steps = await holdAnswer(page, (u) => u.pathname === `${path}/steps`);
      await navigate(page, `#/session/${sid}`);
      await Promise.all([header.snapshot, steps.snapshot]);
      await sawSeq(page, await postSteps(sid, 2, 11));
      // The first page comes back first (it is the last page too), then the header; one more
      // step comes after both, live.
      await steps.release();
      await page.getByText(/^\d+ loaded$/).waitFor();
      await header.release();
      await sawSeq(page, await postSteps(sid, 12, 12));
      assert.equal((await api('GET', `/api/sessions/${sid}`)).steps, 12);
      await settles(() => sessionView(page), { loaded: '12 loaded', header: '12 steps' }, 'the session page');
      const seqs = await page.getByTestId('timeline-step').evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq'))));
      assert.equal(new Set(seqs).size, seqs.length, `a step shown twice: ${seqs}`);
      assert.deepEqual(errors, []);
    } finally {
      await page.close();
    }
  });

  test('steps stored before the live stream first opened are loaded when it opens', async () => {
    const sid = uid('sess-before');
    await postSteps(sid, 1, 1);
    const { page, errors, release } = await openPageStreamHeld(`#/session/${sid}`);
    try {
      await page.getByText('1 loaded', { exact: true }).waitFor();
      await postSteps(sid, 2, 11);
      release();
      await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
      await sawSeq(page, await postSteps(sid, 12, 12));
      await settles(() => sessionView(page), { loaded: '12 loaded', header: '12 steps' }, 'the session page');
      assert.deepEqual(errors, []);
    } finally {
      await page.close();
    }
  });

  test('a page of steps on its way when the live stream opens leaves no gap', async () => {
    const sid = uid('sess-opening');
    await postSteps(sid, 1, 1);
    const page = await browser.context.newPage();
    page.setDefaultTimeout(15_000);
    try {
      const releaseStream = await holdStream(page);
      const steps = await holdAnswer(page, (u) => u.pathname === `/api/sessions/${sid}/steps`);
      await page.goto(`${guardian.url}/#/session/${sid}`);
      await steps.snapshot;
      // Stored before the stream opens: in neither the page's answer nor the stream.
      await postSteps(sid, 2, 6);
      releaseStream();
      await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
      // Live, while the page is still on its way.
      await sawSeq(page, await postSteps(sid, 7, 11));
      await steps.release();
      await settles(() => sessionView(page), { loaded: '11 loaded', header: '11 steps' }, 'the session page');
      const seqs = await page.getByTestId('timeline-step').evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq'))));
      const stored = (await api('GET', `/api/sessions/${sid}/steps?limit=1000`)).steps.map((/** @type {{seq: number}} */ x) => x.seq);
      assert.deepEqual(seqs, stored.slice(0, seqs.length), 'the timeline is not the stored steps in order');
    } finally {
      await page.close();
    }
  });
});

// Comments are posted through the API: the mock has no comments.
describe('audit log', { skip: process.env.VIGIL_BIN ? false : 'comments need the real guardian (VIGIL_BIN)' }, () => {
  test('entries that arrive while the audit log loads are kept', async () => {
    const { page, errors } = await openPage();
    try {
      const sid = uid('audit-during');
      await sawSeq(page, await postSteps(sid, 1, 1));
      const held = await holdAnswer(page, (u) => u.pathname === '/api/audit');
      await navigate(page, `#/audit?type=comment&session=${sid}`);
      await held.snapshot;
      await sawSeq(page, await postComments(sid, 8));
      await held.release();
      // One more after the answer, live.
      await sawSeq(page, await postComments(sid, 1, 9));
      assert.equal((await api('GET', `/api/audit?type=comment&sessionId=${sid}`)).entries.length, 9);
      await settles(() => page.locator('.arow').count(), 9, 'audit rows');
      assert.deepEqual(await page.locator('.arow .muted').allTextContents(), [9, 8, 7, 6, 5, 4, 3, 2, 1].map((i) => `comment ${i}`));
      assert.deepEqual(errors, []);
    } finally {
      await page.close();
    }
  });

  test('entries recorded before the live stream first opened are loaded when it opens', async () => {
    const sid = uid('audit-before');
    await postSteps(sid, 1, 1);
    const { page, errors, release } = await openPageStreamHeld(`#/audit?type=comment&session=${sid}`);
    try {
      await page.getByText('No entries match these filters', { exact: false }).waitFor();
      await postComments(sid, 8);
      release();
      await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
      await sawSeq(page, await postComments(sid, 1, 9));
      await settles(() => page.locator('.arow').count(), 9, 'audit rows');
      assert.deepEqual(await page.locator('.arow .muted').allTextContents(), [9, 8, 7, 6, 5, 4, 3, 2, 1].map((i) => `comment ${i}`));
      assert.deepEqual(errors, []);
    } finally {
      await page.close();
    }
  });
});
