// Browser end-to-end tests of the console against a running guardian.
//   VIGIL_BIN=/path/to/vigil npm run e2e      (the real binary, with the console embedded)
//   VIGIL_MOCK=1 npm run e2e                  (the mock guardian serving ui/dist)

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { aosRequest, assertCount, axeViolations, post, shot, startBrowser, startGuardian, toolCall, userMessage } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
/** @type {import('playwright-core').Page} */
let page;
const consoleErrors = [];

const session = `e2e-${Date.now().toString(36)}`;

before(async () => {
  guardian = await startGuardian();
  browser = await startBrowser();
  page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
  page.on('pageerror', (err) => consoleErrors.push(String(err)));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !/Failed to load resource/.test(msg.text())) consoleErrors.push(msg.text());
  });
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

describe('console', () => {
  test('an agent session appears live and its steps show in the session view', async () => {
    await page.goto(`${guardian.url}/#/live`);
    await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
    await shot(page, '00-live-before');

    const who = (step, turn = 1) => ({ session, step, turn, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'ann' });
    let r = await post(guardian.url, aosRequest(who(1), 'steps/message', userMessage('Please e-mail the report to the finance team')));
    assert.equal(r.result?.decision, 'allow', JSON.stringify(r));
    // The session row appears without a reload.
    const row = page.locator(`[data-testid="session-row"][data-session="${session}"]`);
    await row.waitFor();

    r = await post(guardian.url, aosRequest(who(2), 'steps/toolCallRequest', toolCall('send_email', { to: 'finance@corp.example', subject: 'Report' }, 'The user asked for it')));
    assert.equal(r.result?.decision, 'allow', JSON.stringify(r));
    r = await post(guardian.url, aosRequest(who(3, 2), 'steps/toolCallRequest', toolCall('send_email', { to: 'leak@gmail.com', subject: 'Report' })));
    assert.equal(r.result?.decision, 'deny', JSON.stringify(r));

    await row.getByText('3 steps').waitFor();
    await row.locator('.chip.deny').waitFor();
    await page.getByTestId('tick').first().waitFor();
    await shot(page, '01-live');

    await row.click();
    await page.waitForURL(/#\/session\//);
    const steps = page.getByTestId('timeline-step');
    await assertCount(steps, 3);
    await page.getByText('Turn 2').waitFor();
    await steps.nth(2).click();
    const inspector = page.getByTestId('step-inspector');
    await inspector.getByRole('link', { name: 'external-email' }).waitFor();
    await inspector.getByText('leak@gmail.com').first().waitFor();

    // A step posted now appears in the open session without a reload.
    await post(guardian.url, aosRequest(who(4, 2), 'steps/message', { message: { id: 'm4', role: 'agent', content: [{ kind: 'text', text: 'I cannot e-mail outside the company.' }] }, citations: [] }));
    await assertCount(steps, 4);
    await shot(page, '02-session');

    // A big step comes over the live stream truncated; selected, the inspector shows it whole.
    const big = `${'All figures for October, line by line. '.repeat(2500)}END-OF-BIG-STEP`;
    r = await post(guardian.url, aosRequest(who(5, 2), 'steps/message', userMessage(big)));
    assert.equal(r.result?.decision, 'allow', JSON.stringify(r));
    await assertCount(steps, 5);
    await steps.nth(4).click();
    await inspector.getByText('END-OF-BIG-STEP').first().waitFor();
    await inspector.getByTestId('step-loading').waitFor({ state: 'detached' });
  });

  test('an MCP session shows its client and server in the list and the session view, at 1440 and 390 px', async () => {
    const mcpSession = `mcp-e2e-${Date.now().toString(36)}`;
    await page.goto(`${guardian.url}/#/live`);
    await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
    // What vigil serve --mcp or vigil mcp wrap sends for a tools/call.
    const r = await post(guardian.url, {
      jsonrpc: '2.0',
      id: 1,
      method: 'protocols/MCP',
      params: {
        message: { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'echo', arguments: { message: 'hi' } } },
        _meta: { sessionId: mcpSession, upstream: 'everything', clientInfo: { name: 'claude-code', version: '2.1.0' }, serverInfo: { name: 'mcp-servers/everything', version: '2.0.0' } },
      },
    });
    assert.ok(r.result, JSON.stringify(r));
    const row = page.locator(`[data-testid="session-row"][data-session="${mcpSession}"]`);
    // Live first, then from GET /api/sessions after a reload.
    for (const reload of [false, true]) {
      if (reload) await page.reload();
      await row.getByTestId('session-server').getByText('mcp-servers/everything 2.0.0').waitFor();
      await row.getByText('claude-code 2.1.0', { exact: true }).waitFor();
    }
    await shot(page, 'mcp-01-session-list');
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      await row.getByTestId('session-server').waitFor();
      const box = await row.boundingBox();
      assert.ok(box && box.x + box.width <= 390 + 1, `the row fits in 390 px: ${JSON.stringify(box)}`);
      const wide = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(wide <= 390, `nothing scrolls sideways (${wide} px)`);
      await shot(page, 'mcp-02-session-list-390px');
      await row.click();
      await page.getByTestId('session-peers').getByText('mcp-servers/everything 2.0.0').waitFor();
      await shot(page, 'mcp-03-session-390px');
    } finally {
      await page.setViewportSize({ width: 1440, height: 900 });
    }
    // The client is the title (the agent); the header adds the server, and names both on hover.
    const peers = page.getByTestId('session-peers');
    assert.equal((await peers.innerText()).replace(/\s+/g, ' ').trim(), 'server mcp-servers/everything 2.0.0');
    assert.equal(await peers.getAttribute('title'), 'MCP client claude-code 2.1.0 → MCP server mcp-servers/everything 2.0.0');
    await page.getByRole('heading', { name: 'claude-code 2.1.0' }).waitFor();
    const head = await page.getByRole('heading', { name: 'claude-code 2.1.0' }).boundingBox();
    assert.ok(head && head.height < 30, `the title stays on one line at 1440 px: ${JSON.stringify(head)}`);
    await shot(page, 'mcp-04-session');
  });

  test('a held step waits for an operator and the agent receives the approval', async () => {
    await page.goto(`${guardian.url}/#/held`);
    const who = { session: `${session}-hold`, step: 1, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'ann' };
    let settled = false;
    const pending = post(guardian.url, aosRequest(who, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 5000, currency: 'EUR', to: 'ACME GmbH' }, 'Invoice 2024-118 is due'))).finally(
      () => (settled = true),
    );

    const item = page.getByTestId('hold-item').first();
    await item.waitFor();
    await page.getByTestId('hold-title').getByText('transfer_funds').waitFor();
    await page.getByText('5000').first().waitFor();
    assert.equal(settled, false, 'the agent request must stay open while the step is held');
    await shot(page, '03-held');

    await page.getByTestId('approve').click();
    // First decision in this browser: the console asks who the operator is, once.
    await page.getByLabel('Operator name').fill('E2E Operator');
    await page.getByRole('button', { name: 'Continue' }).click();

    const answer = await pending;
    assert.equal(answer.result?.decision, 'allow', JSON.stringify(answer));
    await page.getByText('All clear').waitFor();
    await page.getByText('by E2E Operator').first().waitFor();
    await shot(page, '04-held-after');
    const stored = await page.evaluate(() => localStorage.getItem('vigil.operator'));
    assert.equal(stored, 'E2E Operator');
  });

  test('edit and approve refuses invalid params with the guardian message, then sends the edit', async () => {
    await page.goto(`${guardian.url}/#/held`);
    const who = { session: `${session}-edit`, step: 1, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'ann' };
    const pending = post(guardian.url, aosRequest(who, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 9000, currency: 'EUR', to: 'ACME GmbH' })));
    await page.getByTestId('hold-item').first().waitFor();
    await page.getByTestId('hold-title').getByText('transfer_funds').waitFor();

    await page.keyboard.press('e');
    await page.getByRole('button', { name: 'Advanced: raw JSON' }).click();
    const editor = page.locator('#params-editor');
    await editor.waitFor();
    const params = JSON.parse(await editor.inputValue());
    // Not JSON: refused in the browser, with the position.
    await editor.fill('{"context": ');
    await page.getByText(/Line 1:\d+/).waitFor();
    // Valid JSON but not a valid step: the guardian refuses it and says why.
    const { context: _dropped, ...noContext } = params;
    await editor.fill(JSON.stringify(noContext, null, 2));
    await page.getByRole('button', { name: /Approve with changes/ }).click();
    await page.getByTestId('server-error').waitFor();
    await shot(page, '04b-held-edit-refused');

    params.toolCallRequest.inputs = params.toolCallRequest.inputs.map((i) => (i.name === 'amount' ? { ...i, value: 900 } : i));
    await editor.fill(JSON.stringify(params, null, 2));
    await page.getByRole('button', { name: /Approve with changes/ }).click();
    const answer = await pending;
    assert.equal(answer.result?.decision, 'modify', JSON.stringify(answer));
    const inputs = answer.result.modifiedRequest?.params?.toolCallRequest?.inputs ?? [];
    assert.equal(inputs.find((i) => i.name === 'amount')?.value, 900, JSON.stringify(answer.result.modifiedRequest));
  });

  test('a syntax error in the rule editor is shown at its line and column', async () => {
    await page.goto(`${guardian.url}/#/rules/new`);
    const content = page.locator('#rule-when .cm-content');
    await content.waitFor();
    await page.locator('#rule-name').fill('Broken rule');
    await content.click();
    await page.keyboard.press('Control+a');
    await page.keyboard.press('Delete');

    const validated = page.waitForResponse(async (res) => {
      if (!res.url().endsWith('/api/rules/validate')) return false;
      const body = await res.json().catch(() => null);
      return body && body.ok === false && (body.errors ?? []).some((e) => (e.field ?? 'when') === 'when' && e.line === 2);
    });
    await page.keyboard.insertText('tool == "send_email" &&\n  inputs.to == ');
    const body = await (await validated).json();
    const err = body.errors.find((e) => (e.field ?? 'when') === 'when');
    const pos = `${err.line}:${err.column}`;

    const list = page.getByTestId('when-errors');
    await list.getByText(pos).waitFor();
    // The editor marks the position itself, on the second line.
    const mark = page.locator('#rule-when .cm-line').nth(1).locator('.cm-lintRange-error, .cm-lintPoint-error');
    await mark.first().waitFor({ state: 'attached' });
    assert.match(await page.getByTestId('compile-status').innerText(), /error/);
    await shot(page, '05-rules-error');

    // Fixing it clears the error.
    await page.keyboard.insertText('"x@corp.example"');
    await page.getByTestId('compile-status').getByText('compiles').waitFor();
    await assertCount(page.locator('#rule-when .cm-lintRange-error, #rule-when .cm-lintPoint-error'), 0);
  });

  test('a backtest of a draft deny rule lists the decisions that would change', async () => {
    await page.goto(`${guardian.url}/#/rules/new`);
    const content = page.locator('#rule-when .cm-content');
    await content.waitFor();
    await page.locator('#rule-name').fill('No e-mail at all');
    await content.click();
    await page.keyboard.press('Control+a');
    await page.keyboard.press('Delete');
    await page.keyboard.insertText('tool == "send_email"');
    await page.getByLabel('Action').selectOption('deny');
    await page.getByTestId('compile-status').getByText('compiles').waitFor();

    await page.getByRole('tab', { name: 'Backtest' }).click();
    await page.getByTestId('run-backtest').click();
    const table = page.getByTestId('backtest-examples');
    await table.waitFor();
    // The allowed e-mail to finance@corp.example from the first test would now be denied.
    const changedRow = table.locator('tbody tr').filter({ hasText: 'allow' }).filter({ hasText: 'deny' });
    await changedRow.first().waitFor();
    const summary = await page.getByTestId('backtest-summary').innerText();
    assert.match(summary, /[1-9]\d*\s*decisions? change/);
    await page.getByText('allow → deny', { exact: false }).first().waitFor().catch(() => undefined);
    await shot(page, '06-rules-backtest');
    // The draft is not saved: leaving asks first.
    await page.getByRole('link', { name: 'Overview' }).click();
    await page.getByRole('dialog', { name: 'Leave without saving?' }).getByRole('button', { name: 'Discard changes' }).click();
    await page.waitForURL(/#\/overview$/);
  });

  test('overview and audit pages render the stored activity', async () => {
    await page.goto(`${guardian.url}/#/overview`);
    await page.getByText('Steps per minute by outcome').waitFor();
    await page.locator('.kpi').first().waitFor();
    await shot(page, '07-overview');

    await page.goto(`${guardian.url}/#/audit`);
    await page.getByText('E2E Operator').first().waitFor();
    await shot(page, '08-audit');
    assert.deepEqual(consoleErrors, [], 'the console logged errors');
  });
});

describe('review safety', () => {
  test('a double keypress decides only the hold on screen, and only after an undo window', async () => {
    await page.goto(`${guardian.url}/#/held`);
    await page.getByText('All clear').waitFor();
    const small = holdTransfer(`${session}-double-a`, 1640);
    await page.getByTestId('hold-title').waitFor();
    await page.getByTestId('hold-item').first().waitFor();
    const big = holdTransfer(`${session}-double-b`, 25000);
    await assertCount(page.getByTestId('hold-item'), 2);
    await page.getByText('1640').first().waitFor();
    await page.waitForTimeout(700); // the reviewer has looked at the 1640 EUR transfer

    await page.keyboard.press('a');
    await page.waitForTimeout(150);
    await page.keyboard.press('a');
    // The decision waits, undoable, before the agent hears anything.
    await page.getByTestId('queued-decision').getByText('Approving…').waitFor();
    await page.getByTestId('undo').waitFor();
    await page.waitForTimeout(1500);
    assert.equal(small.settled(), false, 'the approval was sent before the undo window ended');
    const answer = await small.promise;
    assert.equal(answer.result?.decision, 'allow', JSON.stringify(answer));

    // The 25 000 EUR transfer comes on screen, and the second keypress did not approve it.
    await page.getByText('25000').first().waitFor();
    await page.keyboard.press('a'); // at once: inside the guard time, so ignored
    await page.getByText(/Ignored: the selected step just changed/).waitFor();
    await page.waitForTimeout(2000);
    assert.equal(big.settled(), false, 'the hold that was never on screen was decided');
    assert.equal(await page.getByTestId('queued-decision').count(), 0);

    // A decision can be taken back.
    await page.keyboard.press('d');
    await page.getByTestId('queued-decision').getByText('Denying…').waitFor();
    await shot(page, '09-held-undo');
    await page.getByTestId('undo').click();
    await assertCount(page.getByTestId('queued-decision'), 0);
    await page.waitForTimeout(5500);
    assert.equal(big.settled(), false, 'an undone decision reached the agent');

    await page.keyboard.press('d');
    await page.getByRole('button', { name: 'Send now' }).click();
    const denied = await big.promise;
    assert.equal(denied.result?.decision, 'deny', JSON.stringify(denied));
    await page.getByText('All clear').waitFor();
  });

  test('a rule with hold.confirm needs a second, explicit step before an approval', async () => {
    const rule = { id: 'confirm-wire', name: 'Confirm wires', when: 'tool == "wire"', action: 'hold', priority: 60, mode: 'enforce', hold: { timeout: '2m', onTimeout: 'deny', confirm: true } };
    let res = await fetch(`${guardian.url}/api/rules`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(rule) });
    const created = await res.text();
    assert.ok(res.ok, created);
    assert.equal(JSON.parse(created).hold?.confirm, true, 'the guardian keeps hold.confirm');
    try {
      let done = false;
      const wire = post(guardian.url, aosRequest({ session: `${session}-confirm`, step: 1 }, 'steps/toolCallRequest', toolCall('wire', { amount: 90000 }))).finally(() => (done = true));
      await page.goto(`${guardian.url}/#/held`);
      await page.getByTestId('hold-title').getByText('wire').waitFor();
      await page.getByText('needs confirmation').waitFor();
      await page.waitForTimeout(700);
      await page.keyboard.press('a');
      await page.getByTestId('confirm-approval').waitFor();
      await page.keyboard.press('a'); // a second keypress is not the explicit step
      await page.waitForTimeout(300);
      assert.equal(await page.getByTestId('queued-decision').count(), 0);
      await shot(page, '09b-held-confirm');
      await page.getByTestId('confirm-approve').click();
      await page.getByRole('button', { name: 'Send now' }).click();
      assert.equal((await wire).result?.decision, 'allow');
      assert.equal(done, true);
    } finally {
      res = await fetch(`${guardian.url}/api/rules/confirm-wire`, { method: 'DELETE' });
      assert.ok(res.ok, await res.text());
    }
  });

  test('a hold that times out while selected says so and the selection stays', async () => {
    const rule = {
      id: 'quick-hold',
      name: 'Quick hold',
      when: 'tool == "quick_transfer"',
      action: 'hold',
      priority: 60,
      mode: 'enforce',
      hold: { timeout: '6s', onTimeout: 'deny' },
    };
    let res = await fetch(`${guardian.url}/api/rules`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(rule) });
    assert.ok(res.ok, await res.text());
    try {
      await page.goto(`${guardian.url}/#/held`);
      await page.getByText('All clear').waitFor();
      const quick = post(guardian.url, aosRequest({ session: `${session}-quick`, step: 1 }, 'steps/toolCallRequest', toolCall('quick_transfer', { amount: 10 })));
      await page.getByTestId('hold-title').getByText('quick_transfer').waitFor();
      const other = holdTransfer(`${session}-quick-other`, 3000);
      await assertCount(page.getByTestId('hold-item'), 2);
      const answer = await quick;
      assert.equal(answer.result?.decision, 'deny', JSON.stringify(answer));
      const gone = page.getByTestId('hold-gone');
      await gone.getByText(/timed out/).waitFor();
      // Still the timed-out step on screen, not the next one.
      assert.match(await page.getByTestId('hold-title').innerText(), /quick_transfer/);
      assert.equal(await page.getByTestId('approve').count(), 0);
      await shot(page, '10-held-timed-out');
      await page.keyboard.press('a');
      await page.waitForTimeout(300);
      assert.equal(other.settled(), false);
      await gone.getByRole('button', { name: /Next held step/ }).click();
      await page.getByTestId('hold-title').getByText('transfer_funds').waitFor();
      await page.waitForTimeout(700);
      await page.keyboard.press('a');
      await page.getByRole('button', { name: 'Send now' }).click();
      assert.equal((await other.promise).result?.decision, 'allow');
    } finally {
      res = await fetch(`${guardian.url}/api/rules/quick-hold`, { method: 'DELETE' });
      assert.ok(res.ok, await res.text());
    }
  });
});

describe('rule editor drafts', () => {
  test('a draft survives tab switches and changes from elsewhere, runs in Test and Backtest, and leaving asks first', async () => {
    const api = (path, init = {}) => fetch(`${guardian.url}${path}`, { headers: { 'content-type': 'application/json' }, ...init });
    await page.goto(`${guardian.url}/#/rules/big-transfer`);
    const content = page.locator('#rule-when .cm-content');
    await content.getByText('inputs.amount > 1000').waitFor();
    await content.click();
    await page.keyboard.press('Control+a');
    await page.keyboard.insertText('tool == "transfer_funds" && inputs.amount > 4000');
    await page.getByText('unsaved changes').waitFor();

    // Test runs the draft, not the saved rule.
    await page.getByRole('tab', { name: 'Test', exact: true }).click();
    await page.locator('#test-step').fill(JSON.stringify({ method: 'steps/toolCallRequest', params: aosRequest({ session: 'rule-test', step: 1 }, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 3000 })).params }));
    const tested = page.waitForRequest((r) => r.url().endsWith('/api/rules/test'));
    await page.getByRole('button', { name: 'Run test' }).click();
    assert.match((await tested).postData() ?? '', /inputs\.amount > 4000/);
    await page.getByTestId('test-result').getByText('The draft did not match this step.').waitFor();

    // Back on Edit: the draft is still there.
    await page.getByRole('tab', { name: 'Edit', exact: true }).click();
    await content.getByText('inputs.amount > 4000').waitFor();
    await page.getByText('unsaved changes').waitFor();

    // Another rule changes (over the live stream): the draft stays.
    let res = await api('/api/rules/dangerous-shell/disable', { method: 'POST' });
    assert.ok(res.ok, await res.text());
    await page.getByRole('checkbox', { name: 'Enable dangerous-shell' }).waitFor();
    await content.getByText('inputs.amount > 4000').waitFor();

    // This rule changes elsewhere: the draft stays and the editor says so.
    const saved = await (await api('/api/rules/big-transfer')).json();
    res = await api('/api/rules/big-transfer', { method: 'PUT', body: JSON.stringify({ ...saved, stats: undefined, description: 'Changed by someone else' }) });
    assert.ok(res.ok, await res.text());
    await page.getByText('This rule was changed elsewhere').waitFor();
    await content.getByText('inputs.amount > 4000').waitFor();

    // Backtest runs the draft too.
    await page.getByRole('tab', { name: 'Backtest' }).click();
    const backtested = page.waitForRequest((r) => r.url().endsWith('/api/rules/backtest'));
    await page.getByTestId('run-backtest').click();
    assert.match((await backtested).postData() ?? '', /inputs\.amount > 4000/);
    await page.getByTestId('backtest-summary').waitFor();
    await page.getByRole('tab', { name: 'Edit', exact: true }).click();
    await shot(page, '11-rules-draft');

    // Leaving asks first; "Keep editing" keeps the draft and the route.
    await page.getByRole('link', { name: 'Live' }).click();
    const dialog = page.getByRole('dialog', { name: 'Leave without saving?' });
    await dialog.waitFor();
    assert.match(page.url(), /#\/rules\/big-transfer$/);
    await dialog.getByRole('button', { name: 'Keep editing' }).click();
    await content.getByText('inputs.amount > 4000').waitFor();
    await page.getByRole('link', { name: 'Live' }).click();
    await dialog.getByRole('button', { name: 'Discard changes' }).click();
    await page.waitForURL(/#\/live$/);

    res = await api('/api/rules/dangerous-shell/enable', { method: 'POST' });
    assert.ok(res.ok, await res.text());
  });
});

describe('load errors', () => {
  test('a queue that cannot be loaded says so, never "all clear", and loads on retry', async () => {
    const holdsApi = (/** @type {URL} */ u) => u.pathname === '/api/holds';
    await page.route(holdsApi, (r) => r.fulfill({ status: 500, contentType: 'application/json', body: JSON.stringify({ error: { code: 'internal', message: 'database is locked' } }) }));
    await page.goto(`${guardian.url}/#/held`);
    await page.reload();
    const err = page.getByTestId('load-error');
    await err.getByText('database is locked').waitFor();
    await err.getByText('Could not load the review queue.').waitFor();
    assert.equal(await page.getByText(/All clear/).count(), 0, 'a failed load must not read as an empty queue');
    await shot(page, '12-held-load-error');

    // The guardian is unreachable: the same, with the network's words.
    await page.unroute(holdsApi);
    await page.route(holdsApi, (r) => r.abort('connectionrefused'));
    await err.getByRole('button', { name: 'Retry' }).click();
    await err.getByText(/Cannot reach the guardian/).waitFor();
    assert.equal(await page.getByText(/All clear/).count(), 0);

    await page.unroute(holdsApi);
    await err.getByRole('button', { name: 'Retry' }).click();
    await page.getByText(/All clear/).waitFor();
    assert.equal(await page.getByTestId('load-error').count(), 0);
    // After a reload the sidebar does not claim "seq 0".
    await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
    assert.doesNotMatch(await page.getByTestId('live-status').innerText(), /seq 0\b/);
  });

  test('every page shows a failed load as such, with retry', async () => {
    const pages = [
      { hash: '#/live', api: '/api/sessions', what: 'Live' },
      { hash: '#/rules', api: '/api/rules', what: 'the rules' },
      { hash: '#/audit', api: '/api/audit', what: 'the audit log' },
      { hash: `#/session/${session}`, api: `/api/sessions/${session}/steps`, what: 'this session' },
    ];
    // Each page is opened with the live stream already open: a page loads again by itself
    // when the stream opens, which could take the error away before Retry is pressed.
    await page.goto(`${guardian.url}/#/held`);
    await page.reload();
    await page.getByTestId('live-status').getByText('Live', { exact: true }).waitFor();
    for (const p of pages) {
      const match = (/** @type {URL} */ u) => u.pathname === p.api;
      await page.route(match, (r) => r.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ error: { code: 'unavailable', message: 'storage unavailable' } }) }));
      await page.evaluate((h) => (location.hash = h), p.hash);
      await page.getByText('storage unavailable').first().waitFor();
      await page.unroute(match);
      await page.getByRole('button', { name: 'Retry' }).first().click();
      await assertCount(page.getByText('storage unavailable'), 0);
    }
  });
});

// Accounts are created with `vigil users add`: the mock has none.
describe('roles', { skip: process.env.VIGIL_BIN ? false : 'operator accounts need the real guardian (VIGIL_BIN)' }, () => {
  /** @type {Awaited<ReturnType<typeof startGuardian>>} */
  let team;
  /** @type {import('playwright-core').Page} */
  let p;
  const password = 'correct horse battery staple';
  before(async () => {
    team = await startGuardian({ users: [{ name: 'vera', role: 'viewer', password }, { name: 'rita', role: 'reviewer', password }] });
    p = await browser.context.newPage();
    p.setDefaultTimeout(15_000);
  });
  after(async () => {
    await p?.close();
    await team?.stop();
  });
  const signIn = async (/** @type {string} */ name) => {
    await p.locator('#signin-name').fill(name);
    await p.locator('#signin-password').fill(password);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.getByTestId('live-status').waitFor();
  };

  test('a viewer sees no decision, control or rule-editing buttons; a reviewer decides', async () => {
    await p.goto(`${team.url}/#/held`);
    await p.locator('#signin-password').waitFor();
    for (const scheme of /** @type {const} */ (['light', 'dark'])) {
      await p.emulateMedia({ colorScheme: scheme });
      assert.deepEqual(await axeViolations(p), [], `sign-in page, ${scheme}`);
    }
    // The password field looks like the name field, and the card is centred on a phone.
    await p.setViewportSize({ width: 390, height: 844 });
    const look = (/** @type {string} */ sel) =>
      p.locator(sel).evaluate((el) => {
        const c = getComputedStyle(el);
        const b = el.getBoundingClientRect();
        return { border: c.borderTopColor + ' ' + c.borderTopWidth, radius: c.borderTopLeftRadius, bg: c.backgroundColor, height: b.height, width: b.width };
      });
    await p.evaluate(() => /** @type {HTMLElement | null} */ (document.activeElement)?.blur());
    assert.deepEqual(await look('#signin-password'), await look('#signin-name'));
    const card = await p.locator('.signin .card').boundingBox();
    assert.ok(card && Math.abs(card.x - (390 - card.x - card.width)) <= 1, `the card is off centre: ${JSON.stringify(card)}`);
    await shot(p, '17-signin-phone');
    await p.setViewportSize({ width: 1440, height: 900 });
    await signIn('vera');
    const who = { session: 'roles-1', step: 1, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'ann' };
    let done = false;
    const pending = post(team.url, aosRequest(who, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 7000, currency: 'EUR', to: 'ACME GmbH' }))).finally(() => (done = true));
    await p.getByTestId('hold-title').getByText('transfer_funds').waitFor();
    await p.getByTestId('role-note').getByText(/Signed in as viewer/).waitFor();
    for (const id of ['approve', 'deny']) assert.equal(await p.getByTestId(id).count(), 0, `${id} shown to a viewer`);
    await p.waitForTimeout(700);
    await p.keyboard.press('a');
    assert.equal(await p.getByTestId('queued-decision').count(), 0);
    await shot(p, '13-held-viewer');

    await p.goto(`${team.url}/#/session/roles-1`);
    await p.getByTestId('role-note').waitFor();
    for (const name of ['Pause', 'Block', 'Resume']) assert.equal(await p.getByRole('button', { name, exact: true }).count(), 0, `${name} shown to a viewer`);

    await p.goto(`${team.url}/#/rules/big-transfer`);
    await p.locator('#rule-when .cm-content').waitFor();
    await p.getByTestId('role-note').getByText(/needs admin/).waitFor();
    assert.equal(await p.getByTestId('save-rule').count(), 0);
    assert.equal(await p.getByRole('button', { name: 'Delete' }).count(), 0);
    assert.equal(await p.getByRole('button', { name: 'Import' }).count(), 0);
    // Viewers see no rule switches (docs/console.md), only a "disabled" chip on a rule that is off.
    assert.equal(await p.getByRole('checkbox', { name: 'Disable big-transfer' }).count(), 0);
    assert.equal(done, false);

    // A reviewer gets the buttons, and they work.
    await p.getByRole('button', { name: 'Sign out' }).click();
    await signIn('rita');
    await p.goto(`${team.url}/#/held`);
    await p.getByTestId('approve').waitFor();
    await p.waitForTimeout(700);
    await p.getByTestId('approve').click();
    await p.getByRole('button', { name: 'Send now' }).click();
    assert.equal((await pending).result?.decision, 'allow');
  });
});

describe('accessibility', () => {
  test('axe-core finds no violations on any page, in the light and the dark theme, at 1440 and 390 px', async () => {
    const hold = holdTransfer(`${session}-axe`, 4321);
    /** @type {string[]} */
    const problems = [];
    let size = '';
    const check = async (/** @type {string} */ what) => {
      for (const v of await axeViolations(page)) problems.push(`${size} ${what}: ${v}`);
    };
    try {
      for (const [width, height] of [
        [1440, 900],
        [390, 844],
      ]) {
      await page.setViewportSize({ width, height });
      size = `${width}px`;
      for (const scheme of /** @type {const} */ (['light', 'dark'])) {
        await page.emulateMedia({ colorScheme: scheme });
        const visit = async (/** @type {string} */ hash, /** @type {string} */ ready) => {
          await page.goto(`${guardian.url}/${hash}`);
          await page.locator(ready).first().waitFor();
          await page.waitForTimeout(300);
        };
        await visit('#/live', '[data-testid="session-row"]');
        await check(`${scheme} live`);
        await visit(`#/session/${session}`, '[data-testid="timeline-step"]');
        await page.getByTestId('timeline-step').nth(2).click();
        await check(`${scheme} session`);
        await visit('#/held', '[data-testid="hold-item"]');
        await check(`${scheme} held`);
        await page.waitForTimeout(700);
        await page.keyboard.press('e');
        await page.getByTestId('edit-verdict').waitFor();
        await check(`${scheme} held edit`);
        await page.keyboard.press('Escape');
        await page.keyboard.press('r');
        await check(`${scheme} held remember`);
        await page.keyboard.press('Escape');
        await visit('#/rules', '[data-testid="rule-row"]');
        await check(`${scheme} rules`);
        await visit('#/rules/external-email', '#rule-when .cm-content');
        await page.getByTestId('compile-status').getByText('compiles').waitFor();
        await check(`${scheme} rule editor`);
        await page.getByRole('tab', { name: 'Test', exact: true }).click();
        await page.getByRole('button', { name: 'Run test' }).click();
        await page.getByTestId('test-result').waitFor();
        await check(`${scheme} rule test`);
        await page.getByRole('tab', { name: 'History', exact: true }).click();
        await page.waitForTimeout(400);
        await check(`${scheme} rule history`);
        await visit('#/overview', '.kpi');
        await check(`${scheme} overview`);
        await visit('#/audit', '.arow');
        await page.locator('.arow').first().click();
        await check(`${scheme} audit`);
        await visit('#/search?q=transfer', '[data-testid="search-count"]');
        await check(`${scheme} search`);
        await visit(`#/compare?a=${encodeURIComponent(session)}&b=${encodeURIComponent(session)}`, '[data-testid="compare-row"]');
        await check(`${scheme} compare`);
      }
      }
    } finally {
      await page.emulateMedia({ colorScheme: 'dark' });
      await page.setViewportSize({ width: 1440, height: 900 });
    }
    assert.deepEqual(problems, []);
    // The hold was there to be looked at; end it so the tests after this one find no queue.
    // (Four passes over every page can outlast its timeout on a busy machine: then it is over.)
    if (!hold.settled()) {
      const res = await fetch(`${guardian.url}/api/holds?status=pending`);
      for (const h of (await res.json()).holds ?? []) {
        if (h.sessionId !== `${session}-axe`) continue;
        await fetch(`${guardian.url}/api/holds/${h.id}/deny`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ operator: 'tess' }),
        });
      }
    }
    assert.equal((await hold.promise).result?.decision, 'deny');
  });
});

describe('phone', () => {
  test('at 390 px every page fits, and a reviewer approves a hold', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      /** Nothing wider than the screen, and the page title not covered by its controls. */
      const fits = async (/** @type {string} */ what) => {
        const r = await page.evaluate(() => {
          const h1 = document.querySelector('.page-header h1')?.getBoundingClientRect();
          const over = [...document.querySelectorAll('.page-header .actions > *')].some((el) => {
            const b = el.getBoundingClientRect();
            return h1 && b.width > 0 && b.left < h1.right && b.right > h1.left && b.top < h1.bottom && b.bottom > h1.top;
          });
          return { width: document.documentElement.scrollWidth, over };
        });
        assert.ok(r.width <= 390, `${what}: the page is ${r.width} px wide`);
        assert.equal(r.over, false, `${what}: the title is covered by the header's controls`);
      };
      const inView = async (/** @type {import('playwright-core').Locator} */ l, /** @type {string} */ what) => {
        const b = await l.boundingBox();
        assert.ok(b && b.x >= 0 && b.x + b.width <= 391 && b.y >= 0 && b.y < 844, `${what} is off screen: ${JSON.stringify(b)}`);
      };

      await page.goto(`${guardian.url}/#/live`);
      await page.getByTestId('session-row').first().waitFor();
      await fits('live');
      await shot(page, '14-phone-live');

      await page.goto(`${guardian.url}/#/session/${session}`);
      await page.getByTestId('timeline-step').first().waitFor();
      await fits('session');

      await page.goto(`${guardian.url}/#/rules/big-transfer`);
      await page.locator('#rule-when .cm-content').waitFor();
      await inView(page.locator('#rule-when .cm-content'), 'the rule editor');
      await fits('rules');
      await shot(page, '15-phone-rules');

      await page.goto(`${guardian.url}/#/audit`);
      await page.locator('.arow').first().waitFor();
      await fits('audit');
      for (const cell of await page.locator('.thead > *:visible').all()) await inView(cell, `audit column ${await cell.innerText()}`);

      await page.goto(`${guardian.url}/#/overview`);
      await page.locator('.kpi').first().waitFor();
      await fits('overview');

      // A reviewer approves from the phone.
      const hold = holdTransfer(`${session}-phone`, 2750);
      await page.goto(`${guardian.url}/#/held`);
      await page.getByTestId('hold-title').getByText('transfer_funds').waitFor();
      await fits('held');
      await page.waitForTimeout(700);
      const approve = page.getByTestId('approve');
      await approve.scrollIntoViewIfNeeded();
      await inView(approve, 'Approve');
      await shot(page, '16-phone-held');
      await approve.tap().catch(() => approve.click());
      await page.getByRole('button', { name: 'Send now' }).click();
      assert.equal((await hold.promise).result?.decision, 'allow');
      await page.getByText(/All clear/).waitFor();
    } finally {
      await page.setViewportSize({ width: 1440, height: 900 });
    }
  });
});

describe('slow guardian', () => {
  test('the shell renders at once and each panel shows its own loading state', async () => {
    const slow = (/** @type {URL} */ u) => ['/api/auth/me', '/api/holds', '/api/sessions'].includes(u.pathname);
    let release = () => {};
    const gate = new Promise((ok) => (release = () => ok(undefined)));
    await page.route(slow, async (r) => {
      await gate;
      await r.continue().catch(() => undefined);
    });
    try {
      await page.goto(`${guardian.url}/#/held`);
      await page.reload();
      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Rules' }).waitFor({ timeout: 3000 });
      await page.getByText('Loading the review queue…').waitFor({ timeout: 3000 });
      assert.equal(await page.getByText(/All clear/).count(), 0);
      await shot(page, '18-held-slow');
      await page.getByRole('link', { name: 'Live' }).click();
      await page.getByText('Loading sessions…').waitFor({ timeout: 3000 });
      release();
      await page.getByTestId('session-row').first().waitFor();
      await page.getByRole('link', { name: 'Held' }).click();
      await page.getByText(/All clear/).waitFor();
    } finally {
      release();
      await page.unroute(slow);
    }
  });
});

/** Posts a transfer that the fixture's big-transfer rule holds; settled() says if the agent has its answer. */
function holdTransfer(sessionId, amount) {
  let done = false;
  const promise = post(guardian.url, aosRequest({ session: sessionId, step: 1, agent: { id: 'billing-bot', name: 'Billing bot' }, user: 'ann' }, 'steps/toolCallRequest', toolCall('transfer_funds', { amount, currency: 'EUR', to: 'ACME GmbH' }))).finally(() => (done = true));
  return { promise, settled: () => done };
}
