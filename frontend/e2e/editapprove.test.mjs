// Edit and approve: a form of the held step's inputs, the diff, the rules' verdict on the
// edit, and the explicit "send anyway" an edit the rules deny needs.
//   VIGIL_BIN=/path/to/vigil node --test e2e/editapprove.test.mjs

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { aosRequest, post, shot, startBrowser, startGuardian, toolCall } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
/** @type {import('playwright-core').Page} */
let page;
const session = `edit-${Date.now().toString(36)}`;

before(async () => {
  // The fixture's rules and one deny rule that an edit can run into.
  const extraRules = [{
    id: 'transfer-cap',
    name: 'No transfers over 50,000',
    when: 'tool == "transfer_funds" && inputs.amount > 50000',
    action: 'deny',
    message: 'Transfers over 50,000 are never allowed',
    reasonCode: 'TRANSFER_CAP',
    priority: 200,
    mode: 'enforce',
  }];
  guardian = await startGuardian({ extraRules });
  browser = await startBrowser();
  page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
  await page.addInitScript(() => localStorage.setItem('vigil.operator', 'E2E Operator'));
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/** Holds a transfer of amount and opens its edit form; resolves with the agent's answer. @param {string} id @param {number} amount */
async function holdAndEdit(id, amount) {
  await page.goto(`${guardian.url}/#/held`);
  const who = { session: `${session}-${id}`, step: 1, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'ann' };
  let settled = false;
  const answer = post(guardian.url, aosRequest(who, 'steps/toolCallRequest', toolCall('transfer_funds', { amount, currency: 'EUR', to: 'ACME GmbH' }))).finally(
    () => (settled = true),
  );
  await page.getByTestId('hold-title').getByText('transfer_funds').waitFor();
  await page.waitForTimeout(700); // past the guard time of a new selection
  await page.keyboard.press('e');
  await page.getByTestId('edit-form').waitFor();
  return { answer, settled: () => settled };
}

/** The edit form's field of an input. @param {string} name */
const field = (name) => page.getByTestId('edit-form').getByLabel(name, { exact: true });

/** @param {any} answer */
const amountOf = (answer) => answer.result?.modifiedRequest?.params?.toolCallRequest?.inputs?.find((/** @type {any} */ i) => i.name === 'amount')?.value;

describe('edit and approve', () => {
  test('a form field per input, the diff and the rules’ verdict; Ctrl+Enter sends the edit after the undo window', async () => {
    const { answer } = await holdAndEdit('allow', 9000);
    const amount = field('amount');
    assert.equal(await amount.getAttribute('type'), 'number');
    assert.equal(await field('to').inputValue(), 'ACME GmbH');
    assert.equal(await page.locator(':focus').getAttribute('id'), await amount.getAttribute('id'), 'the first field has the focus');

    await amount.fill('900');
    const diff = page.getByTestId('edit-diff');
    await diff.getByText('900', { exact: true }).waitFor();
    assert.match(await diff.innerText(), /amount\s*9000\s*→\s*900/);
    const verdict = page.getByTestId('edit-verdict');
    await verdict.getByText('The rules would allow this edited step').waitFor();
    await shot(page, 'edit-01-form-allow');

    // The raw JSON holds the same edit, and the form comes back from it.
    await page.getByRole('button', { name: 'Advanced: raw JSON' }).click();
    assert.match(await page.locator('#params-editor').inputValue(), /"value": 900\b/);
    await page.getByRole('button', { name: 'Advanced: raw JSON' }).click();
    assert.equal(await field('amount').inputValue(), '900');

    await field('amount').focus();
    await page.keyboard.press('Control+Enter');
    await page.getByTestId('queued-decision').waitFor();
    const res = await answer;
    assert.equal(res.result?.decision, 'modify', JSON.stringify(res));
    assert.equal(amountOf(res), 900, JSON.stringify(res.result));
  });

  test('an edit a deny rule forbids shows the deny and needs an explicit "send anyway"', async () => {
    const { answer, settled } = await holdAndEdit('deny', 5000);
    await field('amount').fill('60000');
    const verdict = page.getByTestId('edit-verdict');
    await verdict.getByText('The rules would deny this edited step').waitFor();
    assert.match(await verdict.innerText(), /transfer-cap.*Transfers over 50,000 are never allowed/);
    assert.ok(await page.getByTestId('approve-edit').isDisabled());
    await shot(page, 'edit-02-deny-1440');
    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByTestId('send-anyway').scrollIntoViewIfNeeded();
    await shot(page, 'edit-02-deny-390');
    await page.setViewportSize({ width: 1440, height: 900 });

    // Ctrl+Enter does not send it: it points at the confirmation instead.
    await field('amount').focus();
    await page.keyboard.press('Control+Enter');
    await page.waitForFunction(() => document.activeElement?.id === 'send-anyway');
    assert.equal(await page.getByTestId('queued-decision').count(), 0);
    assert.equal(settled(), false);

    await page.getByLabel(/Send anyway: the rules would deny this/).check();
    await page.keyboard.press('Control+Enter');
    await page.getByTestId('queued-decision').getByText(/Approving with changes/i).waitFor();
    // Undo brings the form back as it was, the confirmation included.
    await page.getByTestId('undo').click();
    assert.equal(await field('amount').inputValue(), '60000');
    assert.ok(await page.getByLabel(/Send anyway/).isChecked());
    await page.getByTestId('approve-edit').click();
    const res = await answer;
    assert.equal(res.result?.decision, 'modify', JSON.stringify(res));
    assert.equal(amountOf(res), 60000);

    // The audit log names the deny that was overridden.
    const audit = await (await fetch(`${guardian.url}/api/audit?type=hold.modified`)).json();
    const entry = audit.entries.find((/** @type {any} */ e) => e.sessionId === `${session}-deny`);
    assert.equal(entry?.detail?.override?.ruleId, 'transfer-cap', JSON.stringify(audit.entries));
  });
});
