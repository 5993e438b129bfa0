// Edit and approve changes what the reviewer changed and nothing else: the params go back as
// the agent's JSON text with the edited values in place, so a number JavaScript cannot hold
// (2^53 + 1) reaches the agent, the form and the audit log with its own digits. Approving
// without a change is a plain approval, not an edit.
//   VIGIL_BIN=/path/to/vigil node --test e2e/exactedit.test.mjs

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { aosRequest, shot, startBrowser, startGuardian, toolCall } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
/** @type {import('playwright-core').Page} */
let page;
const session = `exact-${Date.now().toString(36)}`;
const BIG = '9007199254740993'; // 2^53 + 1: JSON.parse reads 9007199254740992

before(async () => {
  guardian = await startGuardian();
  browser = await startBrowser();
  await browser.context.addInitScript(() => localStorage.setItem('vigil.operator', 'E2E Operator'));
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/**
 * Holds a transfer whose amount is the JSON number text given (the big-transfer rule holds it)
 * and opens its edit form; resolves with the agent's answer as text.
 * @param {string} id @param {string} amount
 */
async function holdAndEdit(id, amount) {
  // A page of its own for each test, on its own hold.
  await page?.close();
  page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
  const who = { session: `${session}-${id}`, step: 1, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'ann' };
  const body = JSON.stringify(aosRequest(who, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: '__AMOUNT__', currency: 'EUR', to: 'ACME GmbH' }))).replace(
    '"__AMOUNT__"',
    amount,
  );
  const answer = fetch(`${guardian.url}/aos`, { method: 'POST', headers: { 'content-type': 'application/json' }, body }).then((r) => r.text());
  let holdId = '';
  for (let i = 0; i < 100 && !holdId; i++) {
    const { holds } = await (await fetch(`${guardian.url}/api/holds`)).json();
    holdId = holds?.find((/** @type {any} */ h) => h.sessionId === who.session)?.id ?? '';
    if (!holdId) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(holdId, 'the transfer is held');
  await page.goto(`${guardian.url}/#/held?hold=${holdId}`);
  await page.getByTestId('hold-title').getByText('transfer_funds').waitFor();
  await page.getByRole('link', { name: who.session, exact: true }).waitFor(); // this hold is the one on screen
  await page.waitForTimeout(700); // past the guard time of a new selection
  await page.keyboard.press('e');
  await page.getByTestId('edit-form').waitFor();
  return { answer, session: who.session };
}

/** The edit form's field of an input. @param {string} name */
const field = (name) => page.getByTestId('edit-form').getByLabel(name, { exact: true });

/** The audit entries of a type for a session, as the guardian wrote them. @param {string} type @param {string} sessionId */
async function auditOf(type, sessionId) {
  const audit = await (await fetch(`${guardian.url}/api/audit?type=${type}`)).json();
  return audit.entries.filter((/** @type {any} */ e) => e.sessionId === sessionId);
}

describe('exact edits', () => {
  test('changing one field sends every other value as the agent sent it, 2^53 + 1 included', async () => {
    const { answer, session: sid } = await holdAndEdit('big', BIG);
    assert.equal(await field('amount').inputValue(), BIG, 'the form shows the agent’s digits');
    await page.locator('.content').getByText(BIG, { exact: true }).waitFor(); // and so does the step above it

    await field('to').fill('Other Ltd');
    const diff = page.getByTestId('edit-diff');
    await diff.getByText('"Other Ltd"').waitFor();
    const rows = await diff.locator('li').allInnerTexts();
    assert.equal(rows.length, 1, `only the edited field changes: ${rows.join(' | ')}`);
    assert.match(rows[0] ?? '', /to\s*"ACME GmbH"\s*→\s*"Other Ltd"/);
    await page.getByTestId('edit-verdict').getByText(/The rules would/).waitFor();
    await shot(page, 'exactedit-01-form');

    const sent = page.waitForRequest((r) => /\/api\/holds\/[^/]+\/modify$/.test(r.url()));
    await field('to').focus();
    await page.keyboard.press('Control+Enter');
    await page.getByTestId('send-now').click();
    assert.ok((await sent).postData()?.includes(`"value":${BIG}`), 'the console sent the amount as the agent did');

    const res = await answer;
    const decision = JSON.parse(res).result?.decision;
    assert.equal(decision, 'modify', res);
    assert.ok(res.includes(`"value":${BIG}`), `the agent got the amount as it sent it: ${res}`);
    assert.ok(res.includes('"Other Ltd"'), res);

    // The audit diff holds the one replace the reviewer made.
    const [entry] = await auditOf('hold.modified', sid);
    assert.deepEqual(
      entry?.diff?.map((/** @type {any} */ op) => `${op.op} ${op.path}`),
      ['replace /toolCallRequest/inputs/2/value'],
      JSON.stringify(entry),
    );
  });

  test('"Approve with changes" without a change is a plain approval, not an edit', async () => {
    const { answer, session: sid } = await holdAndEdit('unchanged', '5000');
    await page.getByTestId('edit-diff').getByText(/No changes yet/).waitFor();
    await page.getByTestId('approve-edit').click();
    await page.getByTestId('send-now').click();
    const res = JSON.parse(await answer);
    assert.equal(res.result?.decision, 'allow', JSON.stringify(res));
    assert.equal((await auditOf('hold.modified', sid)).length, 0, 'recorded as an edit');
    assert.equal((await auditOf('hold.approved', sid)).length, 1);
  });
});
