// The console recovers from what goes wrong around it and never loses an operator's work: the
// rule switch and the open draft agree, a refused import says why inside its dialog, a page
// that failed to load loads again with Retry, a guardian that stops answering is said to be
// out of reach, and signing out never drops a decision still in its undo window.
//   VIGIL_BIN=/path/to/vigil node --test e2e/recovery.test.mjs

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { aosRequest, apiCall, assertCount, axeViolations, post, shot, startBrowser, startGuardian, toolCall } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
/** @type {import('playwright-core').Page} */
let page;
/** Uncaught errors in the page. @type {string[]} */
const pageErrors = [];

before(async () => {
  guardian = await startGuardian();
  browser = await startBrowser();
  await browser.context.addInitScript(() => localStorage.setItem('vigil.operator', 'rita'));
  page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
  page.on('pageerror', (e) => pageErrors.push(String(e)));
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/** Calls the console API as rita. @param {string} method @param {string} path @param {unknown} [body] */
const api = (method, path, body) => apiCall(guardian.url, method, path, body);

const uid = (/** @type {string} */ p) => `${p}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;

/** Polls fn until it returns true. @param {() => Promise<boolean>} fn @param {string} what */
async function until(fn, what, timeout = 10_000) {
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    if (await fn()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`timed out waiting for ${what}`);
}

describe('rules', () => {
  test('the enable switch beside the open rule updates the draft: Save keeps the rule off, and it is not "changed elsewhere"', async () => {
    const id = uid('switch');
    await api('POST', '/api/rules', { id, name: 'Switch test', when: 'tool == "switch_test"', action: 'deny', message: 'one', mode: 'enforce' });
    await page.goto(`${guardian.url}/#/rules/${id}`);
    await page.locator('#rule-when .cm-content').waitFor();
    await page.locator('#rule-message').fill('two');
    await page.getByText('unsaved changes').waitFor();

    // Switched off in the list while the draft is open and changed.
    await page.getByRole('checkbox', { name: `Disable ${id}` }).click({ force: true }); // the switch's track covers it
    await until(async () => (await api('GET', `/api/rules/${id}`)).enabled === false, 'the rule to be disabled');
    await page.getByRole('checkbox', { name: `Enable ${id}` }).waitFor();
    assert.equal(await page.getByLabel('Enabled', { exact: true }).isChecked(), false, 'the editor still says Enabled');
    await page.getByText(`${id} · v2 · unsaved changes`).waitFor();
    await page.waitForTimeout(800); // the rule.changed event of the switch has arrived
    assert.equal(await page.getByText('changed elsewhere').count(), 0, 'this tab\'s own switch was called a change elsewhere');

    await page.getByTestId('save-rule').click();
    await page.getByText(`Saved ${id} (v3)`).waitFor();
    const saved = await api('GET', `/api/rules/${id}`);
    assert.equal(saved.enabled, false, 'Save turned the rule back on');
    assert.equal(saved.version, 3);
    assert.equal(saved.message, 'two');
    await page.waitForTimeout(800);
    assert.equal(await page.getByText('changed elsewhere').count(), 0);

    // A change that really comes from elsewhere is still said to be one.
    await page.locator('#rule-message').fill('three');
    await api('POST', `/api/rules/${id}/enable`);
    await page.getByText('This rule was changed elsewhere').waitFor();
    await shot(page, 'recovery-01-rule-switch');
    await page.getByRole('button', { name: /Load their version/ }).click();
    await page.getByText(`${id} · v4`).waitFor();
  });

  test('a refused import says why inside its dialog, which stays open; the same file can be picked again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vigil-import-'));
    const file = join(dir, 'import.yaml');
    const id = uid('imported');
    try {
      writeFileSync(file, `rules:\n  - id: ${id}\n    when: 'tool == '\n    action: deny\n`);
      await page.goto(`${guardian.url}/#/rules`);
      await page.getByTestId('rule-row').first().waitFor();
      const errorsBefore = pageErrors.length;
      const choose = async (/** @type {() => Promise<void>} */ click) => {
        const [chooser] = await Promise.all([page.waitForEvent('filechooser'), click()]);
        await chooser.setFiles(file);
      };
      await choose(() => page.getByRole('button', { name: 'Import', exact: true }).click());
      const dialog = page.locator('dialog[open]');
      await dialog.getByRole('heading', { name: 'Import import.yaml' }).waitFor();
      // The input is cleared, so choosing the same file again is a change.
      assert.equal(await page.locator('input[type=file]').inputValue(), '');
      assert.deepEqual(pageErrors.slice(errorsBefore), []);

      await dialog.getByRole('button', { name: 'Merge rules' }).click();
      const alert = dialog.getByRole('alert');
      await alert.getByText(/does not compile/).waitFor();
      await alert.getByText('Not imported: nothing was changed.').waitFor();
      assert.ok(await dialog.isVisible(), 'the dialog closed on the error');
      // Named by its own title (every modal of the page used to share one title id).
      await page.getByRole('dialog', { name: 'Import import.yaml' }).waitFor();
      await shot(page, 'recovery-02-import-error');
      for (const scheme of /** @type {const} */ (['light', 'dark'])) {
        await page.emulateMedia({ colorScheme: scheme });
        assert.deepEqual(await axeViolations(page), [], `import error, ${scheme}`);
      }

      // Fixed, and chosen again from the dialog: the same file name is read afresh.
      writeFileSync(file, `rules:\n  - id: ${id}\n    when: 'tool == "imported"'\n    action: deny\n`);
      await choose(() => dialog.getByRole('button', { name: 'Choose another file…' }).click());
      await dialog.getByText('tool == "imported"').waitFor();
      await assertCount(dialog.getByRole('alert'), 0);
      await dialog.getByRole('button', { name: 'Merge rules' }).click();
      await page.getByText('Imported import.yaml').waitFor();
      await dialog.waitFor({ state: 'hidden' });
      assert.equal((await api('GET', `/api/rules/${id}`)).when, 'tool == "imported"');

      // After Cancel the same file opens the dialog again.
      await choose(() => page.getByRole('button', { name: 'Import', exact: true }).click());
      await dialog.waitFor();
      await dialog.getByRole('button', { name: 'Cancel' }).click();
      await dialog.waitFor({ state: 'hidden' });
      await choose(() => page.getByRole('button', { name: 'Import', exact: true }).click());
      await dialog.waitFor();
      await dialog.getByRole('button', { name: 'Cancel' }).click();
      assert.deepEqual(pageErrors.slice(errorsBefore), []);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('lazy pages', () => {
  test('a page that failed to load (the guardian was away) loads again with Retry, styled', async () => {
    const fail = (/** @type {import('playwright-core').Route} */ r) => r.abort('connectionrefused');
    const rulesChunk = /\/assets\/Rules-[^/]+\.(js|css)$/;
    const overviewChunk = /\/assets\/Overview-[^/]+\.(js|css)$/;
    await page.route(rulesChunk, fail);
    await page.route(overviewChunk, fail);
    try {
      await page.goto(`${guardian.url}/#/live`);
      await page.reload();
      await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
      const err = page.getByTestId('load-error');
      await page.goto(`${guardian.url}/#/overview`);
      await err.getByText('Could not load the overview.').waitFor();
      await page.goto(`${guardian.url}/#/rules`);
      await err.getByText('Could not load the rule editor.').waitFor();
      await err.getByText(/Unable to preload CSS|Failed to fetch/).waitFor();
      await shot(page, 'recovery-03-lazy-failed');
    } finally {
      await page.unroute(rulesChunk, fail);
      await page.unroute(overviewChunk, fail);
    }
    // Back: Retry loads the chunk (and its stylesheet) again, with no reload of the page.
    await page.getByTestId('load-error').getByRole('button', { name: 'Retry' }).click();
    await page.getByTestId('rule-row').first().waitFor();
    assert.equal(await page.locator('.split').evaluate((el) => getComputedStyle(el).display), 'grid', 'the rule editor has no styles');
    // The next visit of the other page loads it again too.
    await page.goto(`${guardian.url}/#/overview`);
    await page.getByText('guardian latency p99').waitFor();
    assert.equal(await page.locator('.kpi').first().evaluate((el) => getComputedStyle(el).display), 'flex', 'the overview has no styles');
    await assertCount(page.getByTestId('load-error'), 0);
  });
});

describe('live stream', () => {
  test('a guardian that stops answering: attempts time out, and the stale-data banner with Retry stays up', async () => {
    const g = await startGuardian();
    const p = await browser.context.newPage();
    p.setDefaultTimeout(15_000);
    try {
      await p.goto(`${g.url}/#/live`);
      const status = p.getByTestId('live-status');
      await status.getByText('Live', { exact: true }).waitFor();
      g.signal('SIGSTOP');
      // No frame for 20 s: the connection is dropped.
      const banner = p.getByTestId('stale-banner');
      await until(() => banner.isVisible(), 'the stale-data banner', 40_000);
      // It stays while attempts are made that the guardian never answers (each given up after 10 s).
      /** @type {Set<string>} */
      const seen = new Set();
      const end = Date.now() + 13_000;
      while (Date.now() < end) {
        const s = await p.evaluate(() => ({
          banner: !!document.querySelector('[data-testid="stale-banner"]'),
          text: document.querySelector('[data-testid="stale-banner"]')?.textContent ?? '',
          status: document.querySelector('[data-testid="live-status"] .st')?.textContent ?? '',
        }));
        assert.ok(s.banner, `the stale-data banner went away while the guardian did not answer (status ${s.status})`);
        seen.add(s.status.replace(/\d+/, 'N'));
        if (s.text.includes('no answer from the guardian in 10 s')) seen.add('timed out');
        await new Promise((r) => setTimeout(r, 200));
      }
      assert.ok(seen.has('Connecting…'), `no attempt was made: ${[...seen]}`);
      assert.ok(seen.has('timed out'), `no attempt timed out: ${[...seen]}`);
      await banner.getByRole('button', { name: 'Reconnect now' }).waitFor();
      await status.getByRole('button', { name: 'Retry' }).waitFor();
      await shot(p, 'recovery-04-guardian-hangs');

      g.signal('SIGCONT');
      await status.getByText('Live', { exact: true }).waitFor();
      await banner.waitFor({ state: 'detached' });
    } finally {
      await p.close();
      await g.stop();
    }
  });
});

// Accounts are created with `vigil users add`: the mock has none.
describe('sign out', { skip: process.env.VIGIL_BIN ? false : 'operator accounts need the real guardian (VIGIL_BIN)' }, () => {
  test('with a decision in its undo window, Sign out asks: send it now, or discard it; it is never lost', async () => {
    const password = 'correct horse battery staple';
    const team = await startGuardian({ users: [{ name: 'rita', role: 'reviewer', password }] });
    const p = await browser.context.newPage();
    p.setDefaultTimeout(15_000);
    const signIn = async () => {
      await p.locator('#signin-name').fill('rita');
      await p.locator('#signin-password').fill(password);
      await p.getByRole('button', { name: 'Sign in' }).click();
      await p.getByTestId('live-status').waitFor();
    };
    /** @param {number} step */
    const hold = (step) => {
      let done = false;
      const answer = post(team.url, aosRequest({ session: 'signout-1', step }, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 7000 + step, currency: 'EUR', to: 'ACME GmbH' }))).finally(
        () => (done = true),
      );
      return { answer, settled: () => done };
    };
    try {
      await p.goto(`${team.url}/#/held`);
      await signIn();
      const first = hold(1);
      await p.getByTestId('approve').waitFor();
      await p.waitForTimeout(700);
      await p.keyboard.press('a');
      await p.getByTestId('queued-decision').waitFor();
      await p.getByRole('button', { name: 'Sign out' }).click();
      const ask = p.getByRole('dialog', { name: 'A decision is waiting to be sent' });
      await ask.getByText(/Approving transfer_funds · sent in \d s/).waitFor();
      await shot(p, 'recovery-05-signout-ask');
      await ask.getByRole('button', { name: 'Send now and sign out' }).click();
      assert.equal((await first.answer).result?.decision, 'allow');
      await p.locator('#signin-password').waitFor();
      await p.waitForTimeout(500);
      assert.equal(await p.getByText(/failed: sign in/).count(), 0, 'the decision failed for want of a session');

      await signIn();
      const second = hold(2);
      await p.getByTestId('approve').waitFor();
      await p.waitForTimeout(700);
      await p.keyboard.press('a');
      await p.getByTestId('queued-decision').waitFor();
      await p.getByRole('button', { name: 'Sign out' }).click();
      await ask.getByRole('button', { name: 'Discard and sign out' }).click();
      await p.locator('#signin-password').waitFor();
      await p.waitForTimeout(6000);
      assert.equal(second.settled(), false, 'a discarded decision reached the agent');
      await signIn();
      await p.getByTestId('hold-item').waitFor();
      await p.getByTestId('approve').waitFor();
      await p.waitForTimeout(700);
      await p.getByTestId('approve').click();
      await p.getByRole('button', { name: 'Send now' }).click();
      assert.equal((await second.answer).result?.decision, 'allow');

      // On a phone the three choices wrap inside the dialog; Cancel keeps the decision queued.
      await p.setViewportSize({ width: 390, height: 844 });
      const third = hold(3);
      await p.getByTestId('approve').waitFor();
      await p.waitForTimeout(700);
      await p.keyboard.press('a');
      await p.getByTestId('queued-decision').waitFor();
      await p.getByRole('button', { name: 'Sign out' }).click();
      const box = await ask.boundingBox();
      for (const name of ['Cancel', 'Discard and sign out', 'Send now and sign out']) {
        const b = await ask.getByRole('button', { name }).boundingBox();
        assert.ok(box && b && b.x >= box.x && b.x + b.width <= box.x + box.width, `${name} sticks out of the dialog at 390 px`);
      }
      assert.deepEqual(await axeViolations(p), []);
      await shot(p, 'recovery-06-signout-ask-phone');
      await ask.getByRole('button', { name: 'Cancel' }).click();
      await ask.waitFor({ state: 'hidden' });
      await p.getByTestId('queued-decision').waitFor();
      assert.equal((await third.answer).result?.decision, 'allow', 'the decision kept after Cancel was not sent');
      await p.setViewportSize({ width: 1440, height: 900 });
    } finally {
      await p.close();
      await team.stop();
    }
  });
});
