// Pages that must fit and read right: the empty Live page with its AOS endpoint at 390 px, the
// Live columns beside the ticker, a rule backtest on a phone, a new rule's condition, and the
// audit log's notes.
//   VIGIL_BIN=/path/to/vigil node --test e2e/layout.test.mjs

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { aosRequest, apiCall, axeViolations, post, shot, startBrowser, startGuardian, toolCall } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
/** @type {import('playwright-core').Page} */
let page;

before(async () => {
  guardian = await startGuardian();
  browser = await startBrowser();
  await browser.context.addInitScript(() => localStorage.setItem('vigil.operator', 'rita'));
  page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/** Calls the console API as an operator. @param {string} method @param {string} path @param {unknown} [body] */
const api = (method, path, body) => apiCall(guardian.url, method, path, body);

describe('live', () => {
  // First: the guardian has no session yet.
  test('with no sessions the AOS endpoint and its Copy button fit at 390 px, and axe finds nothing', async () => {
    /** @type {string[]} */
    const problems = [];
    try {
      for (const [width, height] of [
        [390, 844],
        [1440, 900],
      ]) {
        await page.setViewportSize({ width, height });
        for (const scheme of /** @type {const} */ (['light', 'dark'])) {
          await page.emulateMedia({ colorScheme: scheme });
          await page.goto(`${guardian.url}/#/live`);
          const endpoint = page.getByTestId('aos-endpoint');
          await endpoint.waitFor();
          await page.waitForTimeout(200);
          const fit = await page.evaluate(() => {
            const code = /** @type {HTMLElement} */ (document.querySelector('[data-testid="aos-endpoint"]'));
            const row = /** @type {HTMLElement} */ (code.parentElement);
            const copy = /** @type {HTMLElement} */ (row.querySelector('button'));
            const r = row.getBoundingClientRect();
            const c = copy.getBoundingClientRect();
            return { page: document.documentElement.scrollWidth, row: [r.left, r.right], copy: [c.left, c.right], rowOverflows: row.scrollWidth > row.clientWidth, copyText: copy.innerText };
          });
          assert.ok(fit.page <= width, `${width} px ${scheme}: the page is ${fit.page} px wide`);
          assert.equal(fit.rowOverflows, false, `${width} px: the endpoint row overflows ${JSON.stringify(fit)}`);
          assert.ok(fit.copy[0] >= fit.row[0] && fit.copy[1] <= fit.row[1] && fit.copy[1] <= width, `${width} px: Copy is cut off ${JSON.stringify(fit)}`);
          assert.equal(fit.copyText.trim(), 'Copy');
          if (width === 390 && scheme === 'dark') await shot(page, 'layout-01-live-empty-390');
          for (const v of await axeViolations(page)) problems.push(`${width}px ${scheme}: ${v}`);
        }
      }
    } finally {
      await page.emulateMedia({ colorScheme: 'dark' });
      await page.setViewportSize({ width: 1440, height: 900 });
    }
    assert.deepEqual(problems, []);

    // The example's tabs are tabs: the arrow keys move between them; Copy is not one of them.
    const tabs = page.getByRole('tablist', { name: 'Example' });
    assert.deepEqual(await tabs.getByRole('tab').allInnerTexts(), ['curl', 'Go']);
    assert.equal(await tabs.getByRole('button', { name: /Copy/ }).count(), 0);
    await tabs.getByRole('tab', { name: 'curl' }).focus();
    await page.keyboard.press('ArrowRight');
    assert.equal(await tabs.getByRole('tab', { name: 'Go' }).getAttribute('aria-selected'), 'true');
    await page.getByRole('tabpanel').getByText('package main').waitFor();
  });

  test('the Last seen column fits beside the ticker at every width from 1201 to 1290 px', async () => {
    const r = await post(guardian.url, aosRequest({ session: `cols-${Date.now().toString(36)}`, step: 1, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'ann' }, 'steps/toolCallRequest', toolCall('search', { q: 'x' })));
    assert.equal(r.result?.decision, 'allow');
    await page.goto(`${guardian.url}/#/live`);
    await page.getByTestId('session-row').first().waitFor();
    try {
      for (const width of [1201, 1220, 1250, 1280, 1290, 1300, 1100, 900, 800]) {
        await page.setViewportSize({ width, height: 900 });
        await page.waitForTimeout(50);
        const got = await page.evaluate(() => {
          const row = /** @type {HTMLElement} */ (document.querySelector('[data-testid="session-row"]'));
          const head = /** @type {HTMLElement} */ (document.querySelector('.sessions .thead'));
          const within = (/** @type {HTMLElement} */ box, /** @type {Element | null} */ el) => {
            if (!el || getComputedStyle(el).display === 'none') return true;
            const b = box.getBoundingClientRect();
            const e = el.getBoundingClientRect();
            return e.left >= b.left - 0.5 && e.right <= b.right + 0.5;
          };
          const seenHead = head.lastElementChild;
          return {
            ticker: getComputedStyle(/** @type {Element} */ (document.querySelector('.ticker'))).display !== 'none',
            rowFits: row.scrollWidth <= row.clientWidth,
            headFits: head.scrollWidth <= head.clientWidth,
            cells: [...row.children].every((c) => within(row, c)) && [...head.children].every((c) => within(head, c)),
            seenHead: seenHead && getComputedStyle(seenHead).display !== 'none' ? /** @type {HTMLElement} */ (seenHead).innerText : '',
            seen: /** @type {HTMLElement | null} */ (row.querySelector('.seen'))?.innerText ?? '',
          };
        });
        assert.ok(got.rowFits && got.headFits && got.cells, `${width} px: a column is cut off ${JSON.stringify(got)}`);
        if (width > 1200) {
          assert.equal(got.ticker, true, `${width} px: the ticker is hidden`);
          assert.equal(got.seenHead, 'LAST SEEN', `${width} px: ${JSON.stringify(got)}`);
          assert.match(got.seen, /ago|just now/);
        }
        if (width === 1250) await shot(page, 'layout-02-live-1250');
      }
    } finally {
      await page.setViewportSize({ width: 1440, height: 900 });
    }
  });
});

describe('rules', () => {
  test('a new rule starts with an empty condition, the example only a placeholder; empty gets the usual error', async () => {
    await page.goto(`${guardian.url}/#/rules/new`);
    const content = page.locator('#rule-when .cm-content');
    await content.waitFor();
    await page.locator('#rule-when .cm-placeholder').getByText('tool == "send_email"', { exact: false }).waitFor();
    // The line holds the placeholder only: no text of the document.
    const docText = () =>
      page.locator('#rule-when .cm-content').evaluate((el) => {
        const c = /** @type {HTMLElement} */ (el.cloneNode(true));
        for (const p of c.querySelectorAll('.cm-placeholder')) p.remove();
        return (c.textContent ?? '').replace(/\u200b/g, '');
      });
    assert.equal(await docText(), '');
    await page.locator('#rule-name').fill('Only what I typed');
    // What the operator types is the whole condition.
    await content.click();
    await page.keyboard.insertText('tool == "run_shell"');
    await page.getByTestId('compile-status').getByText('compiles').waitFor();
    assert.equal(await docText(), 'tool == "run_shell"');
    await page.getByTestId('save-rule').waitFor();
    assert.equal(await page.getByTestId('save-rule').isDisabled(), false);
    // Emptied again: the guardian's validation error, and no Save.
    await page.keyboard.press('Control+a');
    await page.keyboard.press('Delete');
    await page.getByTestId('when-errors').getByText('expression is empty').waitFor();
    await page.getByTestId('compile-status').getByText(/1 error/).waitFor();
    assert.equal(await page.getByTestId('save-rule').isDisabled(), true);
    await shot(page, 'layout-03-new-rule-empty');
    await page.getByRole('link', { name: 'Live', exact: true }).click();
    await page.getByRole('dialog', { name: 'Leave without saving?' }).getByRole('button', { name: 'Discard changes' }).click();
  });

  test('a backtest fits at 390 px: the summary cards wrap', async () => {
    await post(guardian.url, aosRequest({ session: `bt-${Date.now().toString(36)}`, step: 1 }, 'steps/toolCallRequest', toolCall('send_email', { to: 'ann@corp.example' })));
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      await page.goto(`${guardian.url}/#/rules/external-email`);
      await page.locator('#rule-when .cm-content').waitFor();
      await page.getByRole('tab', { name: 'Backtest' }).click();
      await page.getByTestId('run-backtest').click();
      const summary = page.getByTestId('backtest-summary');
      await summary.waitFor();
      const got = await page.evaluate(() => {
        const s = /** @type {HTMLElement} */ (document.querySelector('[data-testid="backtest-summary"]'));
        return { page: document.documentElement.scrollWidth, summary: s.scrollWidth <= s.clientWidth, right: Math.max(...[...s.children].map((c) => c.getBoundingClientRect().right)) };
      });
      assert.ok(got.page <= 390 && got.summary && got.right <= 390, `the backtest is wider than the phone: ${JSON.stringify(got)}`);
      await shot(page, 'layout-04-backtest-390');
    } finally {
      await page.setViewportSize({ width: 1440, height: 900 });
    }
  });
});

describe('audit', () => {
  test('"params edited" is said of a hold approved with edited params, not of rule changes', async () => {
    // A rule import (its entry carries the rules' diff) and an edited approval.
    const res = await fetch(`${guardian.url}/api/rules/import?mode=merge`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-vigil-operator': 'rita' },
      body: JSON.stringify({ rules: [{ id: 'imported-one', when: 'tool == "nothing"', action: 'deny', mode: 'monitor' }] }),
    });
    assert.ok(res.ok, await res.text());
    const sid = `aud-${Date.now().toString(36)}`;
    const answer = post(guardian.url, aosRequest({ session: sid, step: 1 }, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 5000, to: 'ACME' })));
    /** @type {any[]} */
    let holds = [];
    for (let i = 0; i < 100 && holds.length === 0; i++) {
      holds = (await api('GET', '/api/holds?status=pending')).holds.filter((/** @type {any} */ h) => h.sessionId === sid);
      if (!holds.length) await new Promise((ok) => setTimeout(ok, 100));
    }
    const h = holds[0];
    const params = { ...h.request.params, toolCallRequest: { ...h.request.params.toolCallRequest, inputs: [{ name: 'amount', value: 500 }, { name: 'to', value: 'ACME' }] } };
    await api('POST', `/api/holds/${h.id}/modify`, { operator: 'rita', params });
    assert.equal((await answer).result?.decision, 'modify');

    await page.goto(`${guardian.url}/#/audit`);
    const imported = page.locator('.arow', { hasText: 'Rules imported' }).first();
    await imported.waitFor();
    assert.equal((await imported.locator('> span').last().innerText()).trim(), '', 'a rule import says "params edited"');
    const edited = page.locator('.arow', { hasText: 'Hold approved with changes' }).first();
    await edited.getByText('params edited').waitFor();
    assert.equal(await page.locator('.arow', { hasText: 'Rule' }).filter({ hasText: 'params edited' }).count(), 0);
    await imported.click();
    await page.getByLabel('Entry detail').getByText('Change to the rule').waitFor();
    await shot(page, 'layout-05-audit');
  });
});
