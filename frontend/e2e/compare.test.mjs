// Comparing sessions side by side, and a backtest that reports only the draft's changes,
// in the browser against the real guardian.
//   VIGIL_BIN=/path/to/vigil node --test e2e/compare.test.mjs

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { aosRequest, apiCall, post, shot, startBrowser, startGuardian, toolCall, userMessage } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
/** @type {import('playwright-core').Page} */
let page;

before(async () => {
  guardian = await startGuardian();
  browser = await startBrowser();
  page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/** Calls the console API as an operator. @param {string} method @param {string} path @param {unknown} [body] */
const api = (method, path, body) => apiCall(guardian.url, method, path, body);

const run = Date.now().toString(36);

describe('backtest', () => {
  test('an unchanged rule shows no changes, and what a session block decided apart', async () => {
    const session = `bt-${run}`;
    const who = (/** @type {number} */ step) => ({ session, step });
    await post(guardian.url, aosRequest(who(1), 'steps/toolCallRequest', toolCall('send_email', { to: 'leak@gmail.com' })));
    await api('POST', `/api/sessions/${session}/block`, { operator: 'rita', note: 'testing' });
    const r = await post(guardian.url, aosRequest(who(2), 'steps/toolCallRequest', toolCall('lookup_invoice', { id: 7 })));
    assert.equal(r.result.decision, 'deny');
    assert.equal(r.result.data.ruleId, 'session-blocked');

    await page.goto(`${guardian.url}/#/rules/external-email`);
    await page.getByRole('tab', { name: 'Backtest' }).click();
    await page.getByTestId('run-backtest').click();
    await page.getByTestId('backtest-nochange').waitFor();
    const summary = await page.getByTestId('backtest-summary').innerText();
    assert.match(summary, /0\s*decisions change/);
    const outside = page.getByTestId('backtest-outside');
    await outside.getByText('Outside the rules:').waitFor();
    await outside.locator('summary').click();
    const blocked = await outside.locator('li[data-reason="sessionBlocked"]').innerText();
    assert.match(blocked, /^1 session blocked by an operator$/);
    await shot(page, 'compare-01-backtest-unchanged');
  });
});

describe('compare', () => {
  const a = `cmp-a-${run}`;
  const b = `cmp-b-${run}`;

  before(async () => {
    const send = async (/** @type {string} */ session, /** @type {number} */ step, /** @type {string} */ method, /** @type {Record<string, unknown>} */ params) =>
      post(guardian.url, aosRequest({ session, step }, method, params));
    // The same task twice; the second time the agent mails outside the company (denied)
    // and looks up one more invoice.
    await send(a, 1, 'steps/message', userMessage('Send the invoice to the customer'));
    await send(a, 2, 'steps/toolCallRequest', toolCall('send_email', { to: 'ann@corp.example' }));
    await send(a, 3, 'steps/toolCallRequest', toolCall('run_shell', { command: 'ls' }));
    await send(b, 1, 'steps/message', userMessage('Send the invoice to the customer'));
    await send(b, 2, 'steps/toolCallRequest', toolCall('send_email', { to: 'eve@evil.example' }));
    await send(b, 3, 'steps/toolCallRequest', toolCall('lookup_invoice', { id: 7 }));
    await send(b, 4, 'steps/toolCallRequest', toolCall('run_shell', { command: 'ls' }));
  });

  test('two sessions side by side: the changed decision and the extra step are marked', async () => {
    await page.goto(`${guardian.url}/#/session/${encodeURIComponent(a)}`);
    await page.getByTestId('compare-with').click();
    await page.waitForURL(/#\/compare\?a=/);
    await page.getByTestId('compare-b').fill(b);
    await page.getByRole('button', { name: 'Compare', exact: true }).click();
    await page.waitForURL((u) => u.hash.includes(`b=${encodeURIComponent(b)}`));

    const rows = page.getByTestId('compare-row');
    await rows.first().waitFor();
    const labels = (await page.getByTestId('row-label').allInnerTexts()).map((s) => s.replace(/^[≠−+]\s*/, '').trim());
    assert.deepEqual(labels, ['same', 'differs: decision, inputs, text, matched rules', 'only in B', 'same']);
    const changed = rows.nth(1);
    assert.equal(await changed.getAttribute('data-status'), 'differ');
    await changed.getByText('/to: "ann@corp.example" → "eve@evil.example"').waitFor();
    assert.equal(await rows.nth(2).getAttribute('data-status'), 'onlyB');
    await rows.nth(2).getByText('no step in A').waitFor();
    await rows.nth(2).getByText('lookup_invoice').waitFor();
    assert.match(await page.getByTestId('compare-summary').innerText(), /2\s*same.*1\s*differ.*0\s*only in A.*1\s*only in B/s);
    await shot(page, 'compare-02-side-by-side');

    // Only the differences, and the deep link reproduces the view.
    await page.getByLabel('Only differences').check();
    assert.equal(await rows.count(), 2);
    await page.reload();
    await rows.nth(3).waitFor();
    assert.equal(await rows.count(), 4);
  });

  test('at 390 px the two sides of a row stack and nothing scrolls sideways', async () => {
    const narrow = await browser.context.newPage();
    try {
      await narrow.setViewportSize({ width: 390, height: 844 });
      await narrow.goto(`${guardian.url}/#/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
      const row = narrow.getByTestId('compare-row').nth(1);
      await row.waitFor();
      const boxA = await row.getByTestId('cell-a').boundingBox();
      const boxB = await row.getByTestId('cell-b').boundingBox();
      assert.ok(boxA && boxB);
      assert.ok(boxB.y >= boxA.y + boxA.height - 1, `B (${boxB.y}) is below A (${boxA.y}+${boxA.height})`);
      assert.ok(boxB.x + boxB.width <= 390 + 1, `B fits in 390 px (${boxB.x}+${boxB.width})`);
      const overflow = await narrow.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `the page scrolls sideways by ${overflow} px`);
      await shot(narrow, 'compare-03-390px');
    } finally {
      await narrow.close();
    }
  });
});
