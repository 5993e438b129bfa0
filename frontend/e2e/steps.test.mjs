// The session timeline and step inspector never mislead: a pending hold stands in its place,
// a modified step shows what the agent received and who decided, MCP/A2A steps and session
// controls are named, and deep links reach steps and holds.
//   VIGIL_BIN=/path/to/vigil node --test e2e/steps.test.mjs

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
  // The shared fixture plus a redaction rule whose message names every PII kind in the
  // text, as the old starter pack did: the console must show what was really redacted.
  const extraRules = [{
    id: 'redact-cards',
    name: 'Redact card numbers in e-mail',
    when: 'tool == "send_email" && "creditCard" in piiKinds(text)',
    action: 'modify',
    modify: { redact: ['creditCard'] },
    message: 'Redacted {{ piiKinds(text) }} from {{tool}}',
    reasonCode: 'PII_REDACTED',
    priority: 60,
    mode: 'enforce',
  }];
  guardian = await startGuardian({ extraRules });
  browser = await startBrowser();
  await browser.context.addInitScript(() => localStorage.setItem('vigil.operator', 'dana'));
  page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/** Calls the console API as dana. @param {string} method @param {string} path @param {unknown} [body] */
const api = (method, path, body) => apiCall(guardian.url, method, path, body, 'dana');

/** Waits for n pending holds of a session. @param {string} sid @param {number} n */
async function pendingOf(sid, n) {
  for (let i = 0; i < 150; i++) {
    const hs = (await api('GET', '/api/holds?status=pending')).holds.filter((/** @type {{sessionId: string}} */ h) => h.sessionId === sid);
    if (hs.length >= n) return hs;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  throw new Error(`no ${n} pending holds in ${sid}`);
}

/** The stored steps of a session. @param {string} sid */
async function stepsOf(sid) {
  return (await api('GET', `/api/sessions/${encodeURIComponent(sid)}/steps?limit=1000`)).steps;
}

const uid = (/** @type {string} */ p) => `${p}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;

describe('session timeline', () => {
  test('a pending held step shows in place, counts down, and is approved from the timeline', async () => {
    const sid = uid('pend');
    const who = (/** @type {number} */ step) => ({ session: sid, step });
    await post(guardian.url, aosRequest(who(1), 'steps/toolCallRequest', toolCall('search', { q: 'invoices' })));
    await page.goto(`${guardian.url}/#/session/${sid}`);
    await page.getByTestId('timeline-step').first().waitFor();

    // Held while the page is open: the hold.created event puts it in the timeline.
    const answer = post(guardian.url, aosRequest(who(2), 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 5000, to: 'ACME' })));
    const row = page.getByTestId('timeline-hold');
    await row.waitFor();
    await row.getByText('Tool call · transfer_funds').waitFor();
    const countdown = await row.getByTestId('hold-countdown').textContent();
    assert.match(countdown ?? '', /^[12]:\d\d$/, `countdown ${countdown}`);
    // In place: after the step before it.
    const order = await page.locator('[data-testid="timeline-step"], [data-testid="timeline-hold"]').evaluateAll((els) => els.map((e) => e.getAttribute('data-testid')));
    assert.deepEqual(order, ['timeline-step', 'timeline-hold']);

    await row.getByRole('button', { name: /^Tool call/ }).click();
    const detail = page.getByTestId('hold-inspector');
    await detail.getByText('Waiting for review').waitFor();
    await detail.getByText('5000').waitFor();
    await shot(page, 'steps-01-pending-in-timeline');
    await page.setViewportSize({ width: 390, height: 844 });
    await shot(page, 'steps-01b-pending-390');
    await page.setViewportSize({ width: 1440, height: 900 });

    // As on the Held page, the approval waits out its undo window (e2e/review.test.mjs).
    await row.getByRole('button', { name: 'Approve transfer_funds' }).click();
    await detail.getByTestId('queued-decision').getByTestId('send-now').click();
    assert.equal((await answer).result?.decision, 'allow');
    // The hold gives way to the stored step, which takes the selection.
    await row.waitFor({ state: 'detached' });
    const held = page.locator('[data-testid="timeline-step"][aria-current="true"]');
    await held.getByText('Tool call · transfer_funds').waitFor();
    await page.getByTestId('step-review').getByTestId('decided-by').getByText('dana').waitFor();
    assert.equal(await page.getByTestId('timeline-step').count(), 2);
  });

  test('a modified step shows what the agent received, the change, who decided, when and the note', async () => {
    const sid = uid('mod');
    const who = (/** @type {number} */ step) => ({ session: sid, step });
    const answer = post(guardian.url, aosRequest(who(1), 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 5000, to: 'ACME' })));
    const [h] = await pendingOf(sid, 1);
    const params = { ...h.request.params, toolCallRequest: { ...h.request.params.toolCallRequest, inputs: [{ name: 'amount', value: 50 }, { name: 'to', value: 'ACME' }] } };
    await api('POST', `/api/holds/${h.id}/modify`, { operator: 'dana', note: 'capped at 50 until finance confirms', params });
    assert.equal((await answer).result?.decision, 'modify');
    const [step] = await stepsOf(sid);

    await page.goto(`${guardian.url}/#/session/${sid}?step=${step.seq}`);
    const received = page.getByTestId('step-received');
    await received.getByText('What the agent received').waitFor();
    const change = received.getByTestId('step-changes').locator('tr', { hasText: 'inputs.amount' });
    assert.deepEqual(await change.locator('td').allTextContents(), ['5000', '50']);
    await page.getByTestId('decided-by').getByText('dana').waitFor();
    await page.getByTestId('decision-note').getByText('capped at 50 until finance confirms').waitFor();
    await page.getByTestId('step-review').getByText(/Approved with changes/).waitFor();
    // The original is there, folded away.
    const original = received.getByTestId('step-original');
    assert.equal(await original.getAttribute('open'), null);
    await shot(page, 'steps-02-modified-by-reviewer');

    // A redaction by a rule: the inputs shown are the redacted ones, and only the card is
    // named as redacted though the rule's message also names the e-mail address.
    const r = await post(
      guardian.url,
      aosRequest(who(2), 'steps/toolCallRequest', toolCall('send_email', { to: 'billing@corp.example', body: 'Please charge 4111 1111 1111 1111.' })),
    );
    assert.equal(r.result?.decision, 'modify');
    const steps = await stepsOf(sid);
    await page.goto(`${guardian.url}/#/session/${sid}?step=${steps[1].seq}`);
    await page.getByTestId('step-received').getByText('Please charge [REDACTED:creditCard].').first().waitFor();
    assert.deepEqual(await page.getByTestId('redactions').locator('.chip').allTextContents(), ['creditCard']);
    // The timeline row shows the redacted text too.
    await page.locator(`[data-testid="timeline-step"][data-seq="${steps[1].seq}"]`).getByText(/body=Please charge \[REDACTED:creditCard\]/).waitFor();
    await shot(page, 'steps-03-redacted');
  });

  test('MCP and A2A steps are named by method, tool and peers; a blocked step says an operator blocked it', async () => {
    const mcpSession = uid('mcp');
    await post(guardian.url, {
      jsonrpc: '2.0',
      id: 1,
      method: 'protocols/MCP',
      params: { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'read_file', arguments: { path: '/etc/hosts' }, _meta: { sessionId: mcpSession } } },
    });
    await page.goto(`${guardian.url}/#/session/${mcpSession}`);
    await page.getByTestId('timeline-step').getByText('MCP tools/call · read_file').waitFor();
    await page.getByTestId('step-inspector').getByRole('heading', { name: 'MCP tools/call · read_file' }).waitFor();

    const ctxId = uid('a2a');
    await post(guardian.url, {
      jsonrpc: '2.0',
      id: 2,
      method: 'message/send',
      params: {
        context: { from: { name: 'planner' }, to: 'researcher' },
        payload: { message: { role: 'agent', messageId: 'm1', contextId: ctxId, parts: [{ kind: 'text', text: 'Find three sources on tidal power.' }] } },
      },
    });
    await page.goto(`${guardian.url}/#/session/${ctxId}`);
    await page.getByTestId('timeline-step').getByText('A2A message/send · planner → researcher').waitFor();
    await page.getByRole('heading', { level: 1, name: 'planner → researcher' }).waitFor();
    await page.getByTestId('step-inspector').getByText('Find three sources on tidal power.').waitFor();
    await shot(page, 'steps-04-a2a');

    const sid = uid('blk');
    await post(guardian.url, aosRequest({ session: sid, step: 1 }, 'steps/toolCallRequest', toolCall('search', { q: 'a' })));
    await api('POST', `/api/sessions/${sid}/block`, { operator: 'dana', note: 'runaway' });
    const denied = await post(guardian.url, aosRequest({ session: sid, step: 2 }, 'steps/toolCallRequest', toolCall('search', { q: 'b' })));
    assert.equal(denied.result?.decision, 'deny');
    await page.goto(`${guardian.url}/#/session/${sid}`);
    await page.getByTestId('timeline-step').nth(1).waitFor();
    await shot(page, 'steps-06-blocked');
    const reason = page.getByTestId('step-inspector').getByTestId('control-reason');
    await reason.getByText(/An operator blocked this session/).waitFor();
    await reason.getByText('session-blocked').waitFor();
    assert.equal(await page.getByTestId('step-inspector').getByText('No rule matched').count(), 0);
  });

  test('deep links select a step beyond the first page and open a hold', async () => {
    const sid = uid('deep');
    for (let i = 1; i <= 230; i++) await post(guardian.url, aosRequest({ session: sid, step: i }, 'steps/toolCallRequest', toolCall('search', { q: `page ${i}` })));
    const steps = await stepsOf(sid);
    const target = steps[224];
    await page.goto(`${guardian.url}/#/session/${sid}?step=${target.seq}`);
    const row = page.locator(`[data-testid="timeline-step"][data-seq="${target.seq}"]`);
    await row.waitFor();
    assert.equal(await row.getAttribute('aria-current'), 'true');
    assert.ok(await row.isVisible(), 'the linked step is scrolled into view');
    await page.getByTestId('step-inspector').getByText('page 225').waitFor();
    await shot(page, 'steps-05-deep-link');

    const hs = uid('hlink');
    const a1 = post(guardian.url, aosRequest({ session: hs, step: 1 }, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 2000, to: 'A' })));
    await pendingOf(hs, 1);
    const a2 = post(guardian.url, aosRequest({ session: hs, step: 2 }, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 3000, to: 'B' })));
    const holds = await pendingOf(hs, 2);
    const second = holds.find((/** @type {{request: any}} */ h) => h.request.params.toolCallRequest.inputs[0].value === 3000);
    await page.goto(`${guardian.url}/#/held?hold=${second.id}`);
    await page.getByLabel('Held step').getByText('3000').waitFor();
    const items = page.getByTestId('hold-item');
    const current = await items.evaluateAll((els) => els.findIndex((e) => e.getAttribute('aria-current') === 'true'));
    assert.equal(current, (await items.count()) - 1);
    for (const h of holds) await api('POST', `/api/holds/${h.id}/deny`, { operator: 'dana' });
    await Promise.all([a1, a2]);
  });
});
