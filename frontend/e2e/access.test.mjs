// The Access page (admins only): API keys and operator accounts, against the real guardian.
//   VIGIL_BIN=/path/to/vigil node --test e2e/access.test.mjs

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { aosRequest, axeViolations, shot, startBrowser, startGuardian, toolCall } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
/** @type {import('playwright-core').Page} */
let page;
const password = 'correct horse battery staple';

/** POSTs one step to /aos with a bearer key and resolves with the HTTP status and body. @param {string} key @param {number} step */
async function aos(key, step) {
  const req = aosRequest({ session: 'access-e2e', step }, 'steps/toolCallRequest', toolCall('search', { q: 'invoices' }));
  const res = await fetch(`${guardian.url}/aos`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(req),
  });
  return { status: res.status, body: JSON.parse(await res.text()) };
}

const signIn = async (/** @type {string} */ name, pw = password) => {
  await page.locator('#signin-name').fill(name);
  await page.locator('#signin-password').fill(pw);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByTestId('live-status').waitFor();
};
const signOut = async () => {
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.locator('#signin-password').waitFor();
};
const nav = () => page.getByRole('navigation', { name: 'Main' });

describe('access', { skip: process.env.VIGIL_BIN ? false : 'operator accounts need the real guardian (VIGIL_BIN)' }, () => {
  before(async () => {
    guardian = await startGuardian({ users: [{ name: 'ada', role: 'admin', password }, { name: 'vera', role: 'viewer', password }] });
    browser = await startBrowser();
    page = await browser.context.newPage();
    page.setDefaultTimeout(15_000);
  });
  after(async () => {
    await browser?.stop();
    await guardian?.stop();
  });

  test('an admin creates a key that lets an agent in, revokes it, adds a reviewer and removes it', async () => {
    await page.goto(`${guardian.url}/#/access`);
    await signIn('ada');
    await nav().getByRole('link', { name: 'Access' }).waitFor();
    const keys = page.getByTestId('keys');
    await keys.getByText('No API keys yet.').waitFor();

    // Create: a key for the harness's agent; the secret is shown once, in a dialog that has the focus.
    const opener = page.getByTestId('create-key');
    await opener.click();
    const dialog = page.getByRole('dialog', { name: 'Create an API key' });
    await dialog.waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'key-name');
    await dialog.getByLabel('Name').fill('e2e bot');
    await dialog.getByRole('textbox', { name: 'Agent id' }).fill('e2e-agent');
    await dialog.getByLabel('Expires after').selectOption('30d');
    await dialog.getByRole('button', { name: 'Create key' }).click();
    const secretDialog = page.getByRole('dialog', { name: 'Copy the new key now' });
    await secretDialog.getByText('You will not see this key again.').waitFor();
    await secretDialog.getByRole('button', { name: 'Copy key to clipboard' }).waitFor();
    const secret = await secretDialog.getByLabel('API key').inputValue();
    assert.match(secret, /^vgl_/);
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'key-secret-value');
    for (const scheme of /** @type {const} */ (['light', 'dark'])) {
      await page.emulateMedia({ colorScheme: scheme });
      await page.waitForTimeout(250);
      assert.deepEqual(await axeViolations(page), [], `secret dialog, ${scheme}`);
    }
    await shot(page, 'access-01-secret');
    // A stray click outside the dialog (on its backdrop) does not throw the secret away.
    await page.mouse.click(5, 5);
    await page.waitForTimeout(250);
    assert.equal(await secretDialog.getByLabel('API key').inputValue(), secret);
    // Esc closes it and gives the focus back to Create key; the secret is gone from the page.
    await page.keyboard.press('Escape');
    await secretDialog.waitFor({ state: 'detached' }).catch(() => secretDialog.waitFor({ state: 'hidden' }));
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('data-testid')), 'create-key');
    assert.equal(await page.getByText(secret).count(), 0);
    const row = keys.getByTestId('key-row').filter({ hasText: 'e2e bot' });
    await row.getByText('active', { exact: true }).waitFor();
    await row.getByText('e2e-agent').waitFor();
    await row.getByText(secret.slice(0, 8), { exact: false }).waitFor();

    // The key works for its agent, and /aos now needs one.
    const ok = await aos(secret, 1);
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(ok.body.result?.decision, 'allow');
    assert.equal((await aos('', 2)).status, 401);
    // Its last use shows after a reload.
    await page.reload();
    await row.getByText(/Last used/).waitFor();
    await row.locator('dd', { hasText: /ago|just now/ }).last().waitFor();

    // Revoke, with a confirmation naming the key; then the agent is refused with 401.
    await row.getByRole('button', { name: 'Revoke key e2e bot' }).click();
    const confirm = page.getByRole('dialog', { name: 'Revoke key e2e bot?' });
    await confirm.waitFor();
    await confirm.getByText('cannot be undone', { exact: false }).waitFor();
    for (const scheme of /** @type {const} */ (['light', 'dark'])) {
      await page.emulateMedia({ colorScheme: scheme });
      await page.waitForTimeout(250);
      assert.deepEqual(await axeViolations(page), [], `revoke dialog, ${scheme}`);
    }
    await confirm.getByRole('button', { name: 'Revoke key' }).click();
    await row.getByTestId('key-status').getByText('revoked').waitFor();
    assert.equal(await row.getByRole('button', { name: /Revoke/ }).count(), 0);
    const refused = await aos(secret, 3);
    assert.equal(refused.status, 401);
    assert.equal(refused.body.error?.code, -32004);

    // Add a reviewer: the server's password rule is shown in the dialog, then the account is added.
    await page.getByTestId('add-user').click();
    const add = page.getByRole('dialog', { name: 'Add an account' });
    await add.getByLabel('Name').fill('rex');
    await add.getByLabel('Role').selectOption('reviewer');
    await add.getByLabel('Password').fill('short');
    await add.getByRole('button', { name: 'Add account' }).click();
    await add.getByRole('alert').getByText('a password has at least 8 characters').waitFor();
    await add.getByLabel('Password').fill(password);
    await add.getByRole('button', { name: 'Add account' }).click();
    await add.waitFor({ state: 'hidden' });
    const rex = page.getByTestId('user-row').filter({ hasText: 'rex' });
    await rex.getByText('reviewer').waitFor();

    // The only admin cannot remove itself: the guardian's refusal, as it says it.
    await page.getByTestId('user-row').filter({ hasText: 'ada' }).getByRole('button', { name: 'Remove account ada' }).click();
    const self = page.getByRole('dialog', { name: 'Remove account ada?' });
    await self.getByText('This is your own account').waitFor();
    await self.getByRole('button', { name: 'Remove account' }).click();
    await self.getByRole('alert').getByText('the last admin account cannot be removed from the console').waitFor();
    await page.keyboard.press('Escape');
    await self.waitFor({ state: 'hidden' });

    // All of it fits a phone, and axe finds nothing on the page in either theme.
    try {
      for (const [width, height] of [
        [390, 844],
        [1440, 900],
      ]) {
        await page.setViewportSize({ width, height });
        for (const scheme of /** @type {const} */ (['light', 'dark'])) {
          await page.emulateMedia({ colorScheme: scheme });
          await page.waitForTimeout(250);
          const wide = await page.evaluate(() => ({
            page: document.documentElement.scrollWidth,
            main: /** @type {HTMLElement} */ (document.querySelector('.page')).scrollWidth - /** @type {HTMLElement} */ (document.querySelector('.page')).clientWidth,
          }));
          assert.ok(wide.page <= width && wide.main <= 0, `${width} px: the Access page is too wide ${JSON.stringify(wide)}`);
          assert.deepEqual(await axeViolations(page), [], `access page, ${width} px ${scheme}`);
          if (width === 390 && scheme === 'dark') await shot(page, 'access-02-phone');
        }
      }
    } finally {
      await page.setViewportSize({ width: 1440, height: 900 });
      await page.emulateMedia({ colorScheme: 'dark' });
    }

    // The reviewer signs in, sees no Access page, and is told why when opening it directly.
    await signOut();
    await signIn('rex');
    await nav().getByRole('link', { name: 'Held' }).waitFor();
    assert.equal(await nav().getByRole('link', { name: 'Access' }).count(), 0);
    await page.goto(`${guardian.url}/#/access`);
    await page.getByTestId('access-denied').getByText('Signed in as reviewer', { exact: false }).waitFor();
    assert.equal(await page.getByTestId('create-key').count(), 0);

    // The admin removes the account; its sign-in no longer works.
    await signOut();
    await signIn('ada');
    await page.goto(`${guardian.url}/#/access`);
    await rex.getByRole('button', { name: 'Remove account rex' }).click();
    const rm = page.getByRole('dialog', { name: 'Remove account rex?' });
    await rm.getByText('signed out at once', { exact: false }).waitFor();
    await rm.getByRole('button', { name: 'Remove account' }).click();
    await rex.waitFor({ state: 'detached' });
    const login = await fetch(`${guardian.url}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'rex', password }) });
    assert.equal(login.status, 401);
  });

  test('a viewer has no Access page and is told why at #/access', async () => {
    await page.goto(`${guardian.url}/#/live`);
    if (await page.getByRole('button', { name: 'Sign out' }).count()) await signOut();
    await signIn('vera');
    await nav().getByRole('link', { name: 'Live' }).waitFor();
    assert.equal(await nav().getByRole('link', { name: 'Access' }).count(), 0);
    await page.goto(`${guardian.url}/#/access`);
    const denied = page.getByTestId('access-denied');
    await denied.getByText('Only admins manage access').waitFor();
    await denied.getByText('Signed in as viewer: to see and manage API keys and accounts needs admin.', { exact: false }).waitFor();
    assert.equal(await page.getByTestId('keys').count(), 0);
    assert.deepEqual(await axeViolations(page), []);
  });

  test('an admin who removes their own account is shown the sign-in page at once', async () => {
    await page.goto(`${guardian.url}/#/access`);
    if (await page.getByRole('button', { name: 'Sign out' }).count()) await signOut();
    await signIn('ada');
    await page.getByTestId('add-user').click();
    const add = page.getByRole('dialog', { name: 'Add an account' });
    await add.getByLabel('Name').fill('ben');
    await add.getByLabel('Role').selectOption('admin');
    await add.getByLabel('Password').fill(password);
    await add.getByRole('button', { name: 'Add account' }).click();
    await add.waitFor({ state: 'hidden' });
    await page.getByTestId('user-row').filter({ hasText: 'ada' }).getByRole('button', { name: 'Remove account ada' }).click();
    const self = page.getByRole('dialog', { name: 'Remove account ada?' });
    await self.getByRole('button', { name: 'Remove account' }).click();
    // The guardian ended the session with the account: the console says so without waiting
    // for another request (it showed ada as a signed-in admin for as long as nothing asked).
    await page.locator('#signin-password').waitFor({ timeout: 5_000 });
    assert.equal(await page.getByTestId('keys').count(), 0);
  });
});

describe('access in the open console', { skip: process.env.VIGIL_BIN ? false : 'operator accounts need the real guardian (VIGIL_BIN)' }, () => {
  before(async () => {
    guardian = await startGuardian({});
    browser = await startBrowser();
    page = await browser.context.newPage();
    page.setDefaultTimeout(15_000);
  });
  after(async () => {
    await browser?.stop();
    await guardian?.stop();
  });

  test('adding the first account turns sign-in on, and the console asks for it at once', async () => {
    await page.goto(`${guardian.url}/#/access`);
    await page.getByTestId('add-user').click();
    const add = page.getByRole('dialog', { name: 'Add an account' });
    await add.getByLabel('Name').fill('root');
    await add.getByLabel('Role').selectOption('admin');
    await add.getByLabel('Password').fill(password);
    await add.getByRole('button', { name: 'Add account' }).click();
    await page.locator('#signin-password').waitFor({ timeout: 5_000 });
    await signIn('root');
    await nav().getByRole('link', { name: 'Access' }).waitFor();
  });
});
