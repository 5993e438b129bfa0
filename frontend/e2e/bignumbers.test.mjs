// What an agent sent is shown with its own digits everywhere the console shows it: a number
// JavaScript cannot hold (12345678901234567891 reads as 12345678901234567000 through
// JSON.parse) in a held step's input shows as sent in the review queue, in the session's
// timeline and step inspector, and in the audit log.
//   VIGIL_BIN=/path/to/vigil node --test e2e/bignumbers.test.mjs

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { aosRequest, shot, startBrowser, startGuardian, toolCall } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
const BIG = '12345678901234567891';
const EDITED = '98765432109876543211';
const ROUNDED = /1234567890123456(7000|8000)/;

before(async () => {
  guardian = await startGuardian();
  browser = await startBrowser();
  await browser.context.addInitScript(() => localStorage.setItem('vigil.operator', 'E2E Operator'));
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/** The pending hold of a session, once the guardian lists it. @param {string} sessionId */
async function holdOf(sessionId) {
  for (let i = 0; i < 100; i++) {
    const { holds } = await (await fetch(`${guardian.url}/api/holds`)).json();
    const h = holds?.find((/** @type {any} */ x) => x.sessionId === sessionId);
    if (h) return h;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no hold for ${sessionId}`);
}

/** Fails when the text shows the rounded number. @param {import('playwright-core').Locator} where @param {string} what */
async function notRounded(where, what) {
  const text = await where.innerText();
  assert.doesNotMatch(text, ROUNDED, `${what} shows the number rounded: ${text}`);
}

// The mock guardian reads what agents send with JSON.parse: it rounds the numbers itself.
describe('numbers past 2^53', { skip: process.env.VIGIL_BIN ? false : 'the mock guardian rounds numbers (VIGIL_BIN)' }, () => {
  test('a held step’s 12345678901234567891 shows as sent in the queue, the session and the audit log', async () => {
    const page = await browser.context.newPage();
    page.setDefaultTimeout(15_000);
    // The hold's own text (GET /api/holds/{id}, what an edit starts from) is not read: what
    // the queue shows is its own copy, from the live stream and from GET /api/holds.
    await page.route(/\/api\/holds\/[^/?]+$/, (r) => r.abort());
    await page.goto(`${guardian.url}/#/held`);
    await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();

    const session = `big-${Date.now().toString(36)}`;
    const who = { session, step: 1, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'ann' };
    const params = toolCall('transfer_funds', { amount: 5000, currency: 'EUR', reference: '__REF__' });
    const body = JSON.stringify(aosRequest(who, 'steps/toolCallRequest', params)).replace('"__REF__"', BIG);
    const answer = fetch(`${guardian.url}/aos`, { method: 'POST', headers: { 'content-type': 'application/json' }, body }).then((r) => r.text());
    const hold = await holdOf(session);

    // The queue, as the live stream brought the hold, then as GET /api/holds lists it.
    const content = page.locator('.content');
    for (const how of ['live', 'loaded']) {
      if (how === 'loaded') await page.reload();
      await page.getByTestId('hold-title').getByText('transfer_funds').waitFor();
      await content.getByText(BIG, { exact: true }).waitFor();
      await notRounded(content, `the queue (${how})`);
    }
    await shot(page, 'bignumbers-01-queue');

    // The session page: the pending hold in the timeline.
    await page.goto(`${guardian.url}/#/session/${encodeURIComponent(session)}`);
    await page.getByTestId('timeline-hold').locator('.pick').click();
    const pending = page.getByTestId('hold-inspector');
    await pending.getByText(BIG, { exact: true }).waitFor();
    await notRounded(pending, 'the held step on the session page');

    // An operator edits the reference; the agent's and the edited numbers go as written.
    const edited = JSON.stringify(params).replace('"__REF__"', EDITED);
    const ctx = JSON.stringify(JSON.parse(body).params.context);
    const res = await fetch(`${guardian.url}/api/holds/${encodeURIComponent(hold.id)}/modify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-vigil-operator': 'rita' },
      body: `{"operator":"rita","params":${edited.replace(/^\{/, `{"context":${ctx},`)}}`,
    });
    assert.equal(res.status, 200, await res.text());
    assert.ok((await answer).includes(EDITED), 'the agent got the edited reference');

    // The stored step, live and then loaded: the row (what the agent received), the change
    // from what it sent, and the raw request.
    const inspector = page.getByTestId('step-inspector');
    for (const how of ['live', 'loaded']) {
      if (how === 'loaded') await page.reload();
      const row = page.locator('[data-testid="timeline-step"]', { hasText: 'Tool call · transfer_funds' });
      await row.getByText(`reference=${EDITED}`).waitFor();
      await row.click();
      const change = inspector.getByTestId('step-changes').getByRole('row', { name: /inputs\.reference/ });
      await change.getByRole('cell', { name: BIG, exact: true }).waitFor();
      await change.getByRole('cell', { name: EDITED, exact: true }).waitFor();
      const tree = inspector.locator('.tree').first();
      for (let closed = tree.locator('button[aria-expanded="false"]'); await closed.count(); ) await closed.first().click();
      await tree.getByText(BIG, { exact: true }).waitFor();
      await notRounded(inspector, `the step inspector (${how})`);
      await notRounded(row, `the timeline (${how})`);
    }
    await shot(page, 'bignumbers-02-session');

    // The audit log: the edit's diff, the reference before and after.
    await page.goto(`${guardian.url}/#/audit?session=${encodeURIComponent(session)}`);
    await page.locator('.arow', { hasText: 'Hold approved with changes' }).click();
    const detail = page.getByRole('complementary', { name: 'Entry detail' });
    await detail.getByText(BIG, { exact: true }).waitFor();
    await detail.getByText(EDITED, { exact: true }).waitFor();
    await notRounded(detail, 'the audit entry');
    await shot(page, 'bignumbers-03-audit');
    await page.close();
  });
});
