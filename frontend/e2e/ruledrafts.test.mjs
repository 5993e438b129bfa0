// The rule editor and changes made elsewhere. Every change of the rule set publishes a
// rule.changed event: one rule's change carries the rule; an import, a reload of the rules file
// and a replace name the rules they touched (ruleIds). The open rule follows each of them when
// its draft has no changes; a draft with changes stays, with a banner, and is never saved over
// the newer version unless the operator chooses to (the save carries the version it was based
// on, which the guardian checks: 409). The Redact and Set inputs fields show the rule as it is.
//   VIGIL_BIN=/path/to/vigil node --test e2e/ruledrafts.test.mjs

import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { apiCall, shot, startBrowser, startGuardian } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
/** @type {import('playwright-core').Page} */
let page;
/** Uncaught errors in the page. @type {string[]} */
const pageErrors = [];

const redactPii = {
  id: 'redact-pii',
  name: 'Redact PII in CRM notes',
  when: 'tool == "crm_note"',
  action: 'modify',
  modify: { redact: ['email', 'ACCT-[0-9]+'], set: { note: '"x"' } },
  mode: 'enforce',
};
const fileRule = { id: 'file-rule', name: 'From the file', when: 'tool == "file_rule"', action: 'deny', message: 'first', mode: 'enforce' };

before(async () => {
  // extraRules: the guardian reads a copy of the rules file in its own directory, which the
  // reload test rewrites.
  guardian = await startGuardian({ extraRules: [redactPii, fileRule] });
  browser = await startBrowser();
  await browser.context.addInitScript(() => localStorage.setItem('vigil.operator', 'alice'));
});

/** A page of its own for each test: a draft left by one (unsaved, so leaving asks) stays with it. */
async function freshPage() {
  await page?.close();
  page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
  page.on('pageerror', (e) => pageErrors.push(String(e)));
}

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/** Calls the API as bob, "another operator". @param {string} method @param {string} path @param {unknown} [body] */
const bob = (method, path, body) => apiCall(guardian.url, method, path, body, 'bob');

/** Waits until an input shows a value, failing with what it shows. @param {string} selector @param {string} want */
async function untilValue(selector, want, timeout = 10_000) {
  let got = '';
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    got = await page.locator(selector).inputValue();
    if (got === want) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(got, want, `${selector} shows`);
}

/** Opens a rule in the editor. @param {string} id */
async function openRule(id) {
  await freshPage();
  await page.goto(`${guardian.url}/#/rules/${id}`);
  await page.locator('#rule-when .cm-content').waitFor();
  await page.getByText(new RegExp(`^${id} · v\\d+$`)).waitFor();
}

/** The rule without the fields the API adds. @param {string} id */
async function stored(id) {
  const { stats, expired, fromFile, ...r } = await apiCall(guardian.url, 'GET', `/api/rules/${id}`);
  return r;
}

const versionOps = async (/** @type {string} */ id) =>
  (await apiCall(guardian.url, 'GET', `/api/rules/${id}/versions`)).versions.map((/** @type {any} */ v) => `${v.version} ${v.op} ${v.operator}`);

describe('the open rule changed elsewhere', () => {
  test('an import that changes the open rule while the draft has changes: banner, Save refused (409), nothing overwritten; Load their version', async () => {
    await openRule('external-email');
    const original = await stored('external-email');
    assert.equal(original.version, 1);
    await page.locator('#rule-desc').fill('Alice was here');
    await page.getByText('external-email · v1 · unsaved changes').waitFor();

    const theirs = { ...original, version: undefined, updatedAt: undefined, when: `${original.when} && !(string(inputs.to) endsWith "@partner.example")`, message: 'Bob says no' };
    const res = await bob('POST', '/api/rules/import?mode=merge', { rules: [theirs] });
    assert.equal(res.changed, 1);

    await page.getByText('This rule was changed elsewhere').waitFor();
    await page.getByTestId('remote-change').getByText('(now v2)').waitFor();
    assert.equal(await page.locator('#rule-desc').inputValue(), 'Alice was here', 'the draft stays');

    // Save carries the version the draft is based on: refused, and said so.
    const put = page.waitForResponse((r) => r.request().method() === 'PUT' && r.url().endsWith('/api/rules/external-email'));
    await page.getByTestId('save-rule').click();
    const answer = await put;
    const now = await stored('external-email');
    assert.equal(now.version, 2);
    assert.equal(now.message, 'Bob says no');
    assert.equal(now.when, theirs.when);
    assert.deepEqual(await versionOps('external-email'), ['2 import bob', '1 import rules-file']);
    assert.equal(JSON.parse(answer.request().postData() ?? '{}').version, 1, 'the save names the version it was made from');
    assert.equal(answer.status(), 409);
    await page.getByTestId('save-conflict').getByText(/changed meanwhile/).waitFor();
    await shot(page, 'ruledrafts-01-conflict');

    await page.getByRole('button', { name: /Load their version/ }).click();
    await page.getByText(/^external-email · v2$/).waitFor();
    await untilValue('#rule-message', 'Bob says no');
    await page.locator('#rule-when .cm-content').getByText('@partner.example').waitFor();
    assert.equal(await page.getByTestId('remote-change').count(), 0);
  });

  test('a draft without changes follows an import and a reload of the rules file at once', async () => {
    await openRule('file-rule');
    await untilValue('#rule-message', 'first');

    const res = await bob('POST', '/api/rules/import?mode=merge', { rules: [{ ...fileRule, message: 'second' }] });
    assert.equal(res.changed, 1);
    await untilValue('#rule-message', 'second');
    await page.getByText(/^file-rule · v2$/).waitFor();

    // The rules file changed and read again (POST /api/rules/reload, as SIGHUP does).
    const file = join(guardian.dir, 'rules.json');
    const set = JSON.parse(readFileSync(file, 'utf8'));
    set.rules.find((/** @type {any} */ r) => r.id === 'file-rule').message = 'third';
    writeFileSync(file, JSON.stringify(set));
    await bob('POST', '/api/rules/reload');
    await untilValue('#rule-message', 'third');
    await page.getByText(/^file-rule · v3$/).waitFor();
    assert.equal(await page.getByText('changed elsewhere').count(), 0, 'no draft, no banner');
    assert.equal(await page.getByText('unsaved changes').count(), 0);
  });

  test('an update elsewhere: Save is refused; Replace their version saves the draft knowingly', async () => {
    const id = `mine-${Date.now().toString(36)}`;
    await bob('POST', '/api/rules', { id, when: 'tool == "mine"', action: 'deny', message: 'one', mode: 'enforce' });
    await openRule(id);
    await page.locator('#rule-message').fill('alice');
    await page.getByText(`${id} · v1 · unsaved changes`).waitFor();

    const cur = await stored(id);
    await bob('PUT', `/api/rules/${id}`, { ...cur, message: 'bob' });
    await page.getByText('This rule was changed elsewhere').waitFor();
    const put = page.waitForResponse((r) => r.request().method() === 'PUT' && r.url().endsWith(`/api/rules/${id}`));
    await page.getByTestId('save-rule').click();
    await put;
    assert.equal((await stored(id)).message, 'bob', 'Save overwrote their version');
    await page.getByTestId('save-conflict').waitFor();

    await page.getByTestId('replace-theirs').click();
    await page.getByText(`Saved ${id} (v3)`).waitFor();
    assert.equal((await stored(id)).message, 'alice');
    assert.deepEqual(await versionOps(id), ['3 update alice', '2 update bob', '1 create bob']);
    assert.equal(await page.getByTestId('remote-change').count(), 0);
  });

  test('Redact and Set inputs show the rule as it is after a change elsewhere, and after Load their version', async () => {
    await openRule('redact-pii');
    await untilValue('#modify-redact', 'email, ACCT-[0-9]+');
    await untilValue('#modify-set', 'note = "x"');

    // No draft: the form follows.
    let cur = await stored('redact-pii');
    await bob('PUT', '/api/rules/redact-pii', { ...cur, modify: { redact: ['phone'], set: {} } });
    await untilValue('#modify-redact', 'phone');
    await untilValue('#modify-set', '');
    assert.equal(await page.getByText('unsaved changes').count(), 0);

    // A draft: Load their version brings their Redact and Set.
    await page.locator('#rule-desc').fill('draft');
    cur = await stored('redact-pii');
    await bob('PUT', '/api/rules/redact-pii', { ...cur, modify: { redact: ['email'], set: { note: '"y"' } } });
    await page.getByText('This rule was changed elsewhere').waitFor();
    await page.getByRole('button', { name: /Load their version/ }).click();
    await untilValue('#modify-redact', 'email');
    await untilValue('#modify-set', 'note = "y"');

    // Typing in one field keeps the other as it is now, not as it was.
    await page.locator('#modify-redact').fill('email, phone');
    await page.getByTestId('save-rule').click();
    await page.getByText(/Saved redact-pii \(v\d+\)/).waitFor();
    assert.deepEqual((await stored('redact-pii')).modify, { redact: ['email', 'phone'], set: { note: '"y"' } });
  });

  test('an import that replaces the rule set without the open rule says it was deleted', async () => {
    await openRule('file-rule');
    await bob('POST', '/api/rules/import', { rules: [{ id: 'only-one', when: 'tool == "only"', action: 'deny', mode: 'enforce' }] });
    await page.getByText('Rule file-rule was deleted').waitFor();
    await page.waitForURL(/#\/rules$/);
    assert.deepEqual(pageErrors, []);
  });
});
