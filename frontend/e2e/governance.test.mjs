// Rule governance and truthful overview figures, in the browser against the real guardian.
//   VIGIL_BIN=/path/to/vigil npm run e2e

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { aosRequest, apiCall, post, shot, startBrowser, startGuardian, toolCall } from './harness.mjs';

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

describe('governance', () => {
  test('a rule from the rules file warns before an edit, and rule changes land in the audit log with their diff', async () => {
    await page.goto(`${guardian.url}/#/rules/external-email`);
    await page.getByTestId('from-file').getByText('comes from the rules file').waitFor();
    await shot(page, 'gov-01-rule-from-file');

    await api('POST', '/api/rules/external-email/disable');
    await page.goto(`${guardian.url}/#/audit`);
    await page.getByLabel('Action type').selectOption('rule');
    const row = page.locator('.arow', { hasText: 'Rule disabled' });
    await row.waitFor();
    await row.getByText('rita').waitFor();
    await row.click();
    const detail = page.getByLabel('Entry detail');
    await detail.getByText('Change to the rule').waitFor();
    await detail.getByText('/enabled').waitFor();
    await shot(page, 'gov-02-audit-rule-change');

    // The filter is in the URL: a reload (or a shared link) shows the same entries.
    await page.waitForURL(/#\/audit\?type=rule/);
    await page.reload();
    assert.equal(await page.getByLabel('Action type').inputValue(), 'rule');
    await page.locator('.arow', { hasText: 'Rule disabled' }).waitFor();
  });

  test('the overview counts a held step as held and keeps review time out of the guardian latency', async () => {
    const who = { session: `gov-${Date.now().toString(36)}`, step: 1 };
    const answer = post(guardian.url, aosRequest(who, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 5000, currency: 'EUR', to: 'ACME' })));
    /** @type {{id: string}[]} */
    let pending = [];
    for (let i = 0; i < 100 && pending.length === 0; i++) {
      pending = (await api('GET', '/api/holds?status=pending')).holds;
      if (!pending.length) await new Promise((ok) => setTimeout(ok, 100));
    }
    assert.equal(pending.length, 1);
    await api('POST', `/api/holds/${pending[0].id}/approve`, { operator: 'rita' });
    assert.equal((await answer).result?.decision, 'allow');

    await page.goto(`${guardian.url}/#/overview`);
    await page.getByText(/review time p50 \(1 held\)/).waitFor();
    await page.locator('.share', { hasText: 'held' }).getByText(/held [1-9]\d*%/).waitFor();
    await page.getByText('guardian latency p99').waitFor();
    await shot(page, 'gov-03-overview');
  });
});

describe('comments', () => {
  test('a comment on a step shows live to another operator and lands in the audit log', async () => {
    const sid = `cmt-${Date.now().toString(36)}`;
    const who = (step) => ({ session: sid, step });
    await post(guardian.url, aosRequest(who(1), 'steps/toolCallRequest', toolCall('search', { q: 'invoices' })));
    await post(guardian.url, aosRequest(who(2), 'steps/toolCallRequest', toolCall('search', { q: 'payroll' })));

    // A second operator watches the same session in another tab.
    const other = await browser.context.newPage();
    await other.goto(`${guardian.url}/#/session/${sid}`);
    await other.getByTestId('timeline-step').nth(1).waitFor();

    await page.goto(`${guardian.url}/#/session/${sid}`);
    await page.getByTestId('timeline-step').first().click();
    const box = page.getByTestId('comments');
    await box.getByPlaceholder('Comment on this step…').fill('Why search payroll here?');
    await box.getByPlaceholder('Comment on this step…').press('Control+Enter');
    const prompt = page.getByRole('dialog');
    if (await prompt.isVisible().catch(() => false)) {
      await prompt.getByRole('textbox').fill('rita');
      await prompt.getByRole('button', { name: /save|continue|ok/i }).click();
    }
    await box.getByTestId('comment').getByText('Why search payroll here?').waitFor();

    // Live in the other tab: the step gets a marker, and its comments show when selected.
    const first = other.getByTestId('timeline-step').first();
    await first.getByText('has comments').waitFor({ state: 'attached' });
    await first.click();
    await other.getByTestId('comments').getByText('Why search payroll here?').waitFor();
    await shot(other, 'gov-04-comment-live');
    await other.close();

    const audit = await api('GET', `/api/audit?type=comment&sessionId=${sid}`);
    assert.equal(audit.entries.length, 1);
    assert.equal(audit.entries[0].note, 'Why search payroll here?');
  });
});

describe('search', () => {
  test('steps are found by their words and filters, with the query in the URL', async () => {
    const sid = `srch-${Date.now().toString(36)}`;
    const who = (step) => ({ session: sid, step, agent: { id: 'payroll-bot', name: 'Payroll bot' } });
    const denied = await post(guardian.url, aosRequest(who(1), 'steps/toolCallRequest', toolCall('run_shell', { command: 'rm -rf /srv/payroll-exports' })));
    assert.equal(denied.result?.decision, 'deny');
    await post(guardian.url, aosRequest(who(2), 'steps/toolCallRequest', toolCall('search', { q: 'payroll policy' })));
    await post(guardian.url, aosRequest(who(3), 'steps/toolCallRequest', toolCall('search', { q: 'holiday calendar' })));

    // The index follows the steps within about a second.
    for (let i = 0; i < 100; i++) {
      const r = await api('GET', '/api/search?q=payroll&agent=payroll');
      if (r.steps.length === 2 && r.indexLag === 0) break;
      await new Promise((ok) => setTimeout(ok, 100));
    }
    // A shared link opens the same search: the denied command about payroll, nothing else.
    const hits = page.getByTestId('search-hit');
    await page.goto(`${guardian.url}/#/search?q=payroll&decision=deny&agent=payroll`);
    await page.getByTestId('search-count').waitFor();
    await hits.first().waitFor();
    const n = await hits.count();
    assert.equal(n, 1);
    await hits.first().getByText('payroll-exports', { exact: false }).waitFor();
    assert.equal(await page.getByTestId('search-decision').inputValue(), 'deny');

    // Typing updates the URL and the results.
    await page.getByTestId('search-decision').selectOption('');
    await page.getByTestId('search-q').fill('payroll pol*');
    await page.waitForURL(/q=payroll\+pol/);
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="search-hit"]').length === 1);
    await hits.first().getByText('policy', { exact: false }).waitFor();
    await shot(page, 'gov-05-search');

    // A hit opens its step in its session.
    await hits.first().click();
    await page.waitForURL(new RegExp(`#/session/${sid}\\?step=\\d+`));
    await page.getByTestId('step-inspector').getByText('payroll policy').first().waitFor();
  });
});
