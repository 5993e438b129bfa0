// Screenshots of every page against a guardian full of demo data, for looking at the console.
//   npm run build && node e2e/screens.mjs            (mock guardian with seeded data)
//   VIGIL_URL=http://127.0.0.1:7878 node e2e/screens.mjs   (a running guardian)
// Writes e2e/artifacts/screen-<scheme>-<page>.png for the dark and light schemes at 1440 px,
// and screen-<scheme>-phone-<page>.png at 390x844.

import { aosRequest, post, shot, startBrowser, startGuardian, toolCall } from './harness.mjs';

process.env.VIGIL_MOCK ??= '1';
const external = process.env.VIGIL_URL;
const guardian = external
  ? { url: external, stop: async () => {} }
  : await startGuardian({ extraArgs: ['--seed-sessions', '400', '--seed-steps', '12000', '--simulate'] });
const base = guardian.url;

// Two steps that wait for review, so the queue has something in it.
const who = (s, n) => ({ session: `review-${s}`, step: n, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'farah' });
const holds = [
  post(base, aosRequest(who('a', 1), 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 12500, currency: 'EUR', to: 'DE89 3704 0044 0532 0130 00', memo: 'Invoice 2024-118' }, 'The invoice from Acme is due today and the user approved paying it.'))),
  post(base, aosRequest(who('b', 1), 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 2400, currency: 'USD', to: 'Globex LLC' }, 'Monthly retainer'))),
].map((p) => p.catch(() => null)); // the guardian stops with these still waiting

for (const [scheme, width, height] of [['dark', 1440, 900], ['light', 1440, 900], ['dark', 390, 844], ['light', 390, 844]]) {
  process.env.E2E_SCHEME = String(scheme);
  const b = await startBrowser();
  const page = await b.context.newPage();
  await page.setViewportSize({ width: Number(width), height: Number(height) });
  const tag = width === 390 ? `${scheme}-phone` : scheme;
  await page.addInitScript(() => localStorage.setItem('vigil.operator', 'Dana Reyes'));
  const visit = async (hash, name, ready) => {
    await page.goto(`${base}/${hash}`);
    if (ready) await page.locator(ready).first().waitFor({ timeout: 15000 });
    await page.waitForTimeout(1200);
    await shot(page, `screen-${tag}-${name}`);
  };
  await visit('#/live', 'live', '[data-testid="session-row"]');
  const first = await page.locator('[data-testid="session-row"]').nth(3).getAttribute('data-session') ?? '';
  await visit(`#/session/${encodeURIComponent(first)}`, 'session', '[data-testid="timeline-step"]');
  await page.getByTestId('timeline-step').nth(2).click();
  await page.waitForTimeout(300);
  await shot(page, `screen-${tag}-session-step`);
  await visit('#/held', 'held', '[data-testid="hold-item"]');
  await page.keyboard.press('e');
  await page.waitForTimeout(300);
  await shot(page, `screen-${tag}-held-edit`);
  await page.keyboard.press('Escape');
  await page.keyboard.press('r');
  await page.waitForTimeout(300);
  await shot(page, `screen-${tag}-held-remember`);
  await visit('#/rules/external-email', 'rules', '.cm-content');
  await page.getByRole('tab', { name: 'History', exact: true }).click();
  await page.waitForTimeout(500);
  await shot(page, `screen-${tag}-rules-history`);
  await page.getByRole('tab', { name: 'Test', exact: true }).click();
  await page.getByRole('button', { name: 'Run test' }).click();
  await page.waitForTimeout(600);
  await shot(page, `screen-${tag}-rules-test`);
  await visit('#/overview', 'overview', '.kpi');
  await visit('#/audit', 'audit', '.arow');
  await page.locator('.arow').nth(0).click();
  await page.waitForTimeout(300);
  await shot(page, `screen-${tag}-audit-detail`);
  await b.stop();
}
void Promise.allSettled(holds);
await guardian.stop();
process.exit(0);
