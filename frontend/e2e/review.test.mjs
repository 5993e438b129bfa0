// Deciding held steps from a session's page goes the same way as on the Held page (the undo
// window, hold.confirm, the bar on other pages), a session whose only step is held is shown
// and reviewable, and a step decided after review stays in its turn.
//   VIGIL_BIN=/path/to/vigil node --test e2e/review.test.mjs

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { aosRequest, apiCall, post, shot, startBrowser, startGuardian, toolCall, userMessage } from './harness.mjs';

/** @type {Awaited<ReturnType<typeof startGuardian>>} */
let guardian;
/** @type {Awaited<ReturnType<typeof startBrowser>>} */
let browser;
/** @type {import('playwright-core').Page} */
let page;

before(async () => {
  // The shared fixture plus a hold rule that asks for a confirmation before an approval.
  const extraRules = [{
    id: 'confirm-wire',
    name: 'Confirm wires',
    when: 'tool == "wire"',
    action: 'hold',
    priority: 60,
    mode: 'enforce',
    hold: { timeout: '2m', onTimeout: 'deny', confirm: true },
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

const uid = (/** @type {string} */ p) => `${p}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;

/** Posts a step and keeps its answer; settled() says whether the agent has it. @param {unknown} req */
function send(req) {
  let done = false;
  const promise = post(guardian.url, req).finally(() => (done = true));
  return { promise, settled: () => done };
}

/** Waits for n pending holds of a session. @param {string} sid @param {number} n */
async function pendingOf(sid, n) {
  for (let i = 0; i < 150; i++) {
    const hs = (await api('GET', '/api/holds?status=pending')).holds.filter((/** @type {{sessionId: string}} */ h) => h.sessionId === sid);
    if (hs.length >= n) return hs;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  throw new Error(`no ${n} pending holds in ${sid}`);
}

/** The id of the focused element's data-testid (or its tag). */
const focused = () => page.evaluate(() => document.activeElement?.getAttribute('data-testid') ?? document.activeElement?.tagName ?? '');

/** The seconds the undo panel says are left. @param {import('playwright-core').Locator} l */
async function secondsLeft(l) {
  const m = /answered in (\d+) s|sent in (\d+) s|… (\d+) s/.exec(await l.innerText());
  assert.ok(m, `no countdown in ${await l.innerText()}`);
  return Number(m[1] ?? m[2] ?? m[3]);
}

describe('deciding on the session page', () => {
  test('a decision from the timeline waits 5 s with Undo, as on the Held page, and the bar keeps it on other pages', async () => {
    const sid = uid('undo');
    await post(guardian.url, aosRequest({ session: sid, step: 1 }, 'steps/toolCallRequest', toolCall('search', { q: 'invoices' })));
    const held = send(aosRequest({ session: sid, step: 2 }, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 5000, to: 'ACME' })));
    await page.goto(`${guardian.url}/#/session/${sid}`);
    const row = page.getByTestId('timeline-hold');
    await row.waitFor();

    // Approve from the row: queued, not sent; the row and the inspector say so, at most 5 s.
    await row.getByRole('button', { name: 'Approve transfer_funds' }).click();
    const chip = row.getByTestId('hold-queued');
    await chip.getByText(/Approving…/).waitFor();
    const queued = page.getByTestId('hold-inspector').getByTestId('queued-decision');
    await queued.getByText('Approving…').waitFor();
    const left = await secondsLeft(queued);
    assert.ok(left >= 1 && left <= 5, `the undo window says ${left} s`);
    assert.ok((await secondsLeft(chip)) <= 5);
    await shot(page, 'review-01-session-undo');
    // The bar at the bottom does not repeat what the page shows.
    assert.equal(await page.getByTestId('undo-bar').count(), 0);
    await page.waitForTimeout(1500);
    assert.equal(held.settled(), false, 'the approval was sent before the undo window ended');

    // Undo from the row: nothing reaches the agent, even after the window would have ended.
    await row.getByTestId('row-undo').click();
    await row.getByRole('button', { name: 'Approve transfer_funds' }).waitFor();
    assert.equal(await page.getByTestId('queued-decision').count(), 0);
    await page.waitForTimeout(4500);
    assert.equal(held.settled(), false, 'an undone decision reached the agent');

    // Deny from the inspector, then leave: the bar on another page keeps the Undo.
    await page.getByTestId('hold-deny').click();
    await queued.getByText('Denying…').waitFor();
    await page.getByRole('link', { name: 'Live', exact: true }).click();
    const bar = page.getByTestId('undo-bar');
    await bar.getByText(/Denying… transfer_funds · sent in [1-5] s/).waitFor();
    await bar.getByRole('button', { name: 'Undo' }).click();
    await bar.waitFor({ state: 'detached' });
    await page.waitForTimeout(500);
    assert.equal(held.settled(), false, 'the undone deny reached the agent');

    // Back on the session: Approve, then Send now answers the agent at once.
    await page.goto(`${guardian.url}/#/session/${sid}`);
    await row.getByRole('button', { name: /^Tool call/ }).click();
    await page.getByTestId('hold-approve').click();
    await queued.getByTestId('send-now').click();
    assert.equal((await held.promise).result?.decision, 'allow');
    // The stored step takes the hold's place and the selection.
    await row.waitFor({ state: 'detached' });
    await page.locator('[data-testid="timeline-step"][aria-current="true"]').getByText('Tool call · transfer_funds').waitFor();
    await page.getByTestId('session-steps').getByText('2 steps').waitFor();
  });

  test('a hold.confirm rule needs Confirm on the session page too, and the focus goes to it and back', async () => {
    const sid = uid('confirm');
    const wire = send(aosRequest({ session: sid, step: 1 }, 'steps/toolCallRequest', toolCall('wire', { amount: 90000 })));
    await page.goto(`${guardian.url}/#/session/${sid}`);
    const row = page.getByTestId('timeline-hold');
    await row.waitFor();
    await page.getByTestId('hold-inspector').getByText('needs confirmation').waitFor();

    const approve = row.getByRole('button', { name: 'Approve wire' });
    await approve.focus();
    await page.keyboard.press('Enter');
    const panel = page.getByTestId('confirm-approval');
    await panel.waitFor();
    assert.equal(await focused(), 'confirm-approve', 'the confirmation takes the focus');
    await page.waitForTimeout(300);
    assert.equal(await page.getByTestId('queued-decision').count(), 0, 'an approval needing confirmation was queued');
    await shot(page, 'review-02-session-confirm');

    // Esc cancels, and the focus goes back to the button that opened it.
    await page.keyboard.press('Escape');
    await panel.waitFor({ state: 'detached' });
    assert.equal(await approve.evaluate((el) => el === document.activeElement), true, 'the focus did not come back');

    // Confirm queues the approval, into the undo window; the focus goes to its Undo.
    await approve.click();
    await page.getByTestId('confirm-approve').click();
    const queued = page.getByTestId('queued-decision');
    await queued.getByText('Approving…').waitFor();
    assert.equal(await focused(), 'undo');
    assert.equal(wire.settled(), false);
    await queued.getByTestId('send-now').click();
    assert.equal((await wire.promise).result?.decision, 'allow');
  });

  test('on the Held page, a on a confirm hold moves the focus to Confirm; Cancel gives it back', async () => {
    const sid = uid('held-confirm');
    const wire = send(aosRequest({ session: sid, step: 1 }, 'steps/toolCallRequest', toolCall('wire', { amount: 120000 })));
    const [h] = await pendingOf(sid, 1);
    await page.goto(`${guardian.url}/#/held?hold=${h.id}`);
    await page.getByTestId('hold-title').getByText('wire').waitFor();
    await page.getByText('needs confirmation').waitFor();
    await page.waitForTimeout(700);
    await page.keyboard.press('a');
    await page.getByTestId('confirm-approval').waitFor();
    assert.equal(await focused(), 'confirm-approve', 'the focus stayed on the page, not on Confirm');
    await page.getByTestId('confirm-approval').getByRole('button', { name: /Cancel/ }).click();
    await page.getByTestId('confirm-approval').waitFor({ state: 'detached' });
    assert.equal(await focused(), 'approve', 'Cancel leaves the focus nowhere');
    // Enter on the focused Approve opens it again; Enter on Confirm confirms.
    await page.keyboard.press('Enter');
    await page.getByTestId('confirm-approval').waitFor();
    assert.equal(await focused(), 'confirm-approve');
    await page.keyboard.press('Enter');
    const queued = page.getByTestId('queued-decision');
    await queued.getByText('Approving…').waitFor();
    assert.ok((await secondsLeft(queued)) <= 5);
    assert.equal(await focused(), 'undo');
    await page.keyboard.press('Enter'); // Undo, by keyboard
    await queued.waitFor({ state: 'detached' });
    assert.equal(wire.settled(), false);
    await api('POST', `/api/holds/${h.id}/deny`, { operator: 'dana' });
    assert.equal((await wire.promise).result?.decision, 'deny');
  });

  test('Approve and Deny keep 4.5:1 contrast when hovered, in both themes', async () => {
    const sid = uid('hover');
    const held = send(aosRequest({ session: sid, step: 1 }, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 1500, to: 'ACME' })));
    const [h] = await pendingOf(sid, 1);
    await page.goto(`${guardian.url}/#/held?hold=${h.id}`);
    await page.getByTestId('hold-title').getByText('transfer_funds').waitFor();
    await page.getByTestId('approve').waitFor();
    /** WCAG contrast of a button's text on its background (both computed). @param {string} id */
    const contrast = (id) =>
      page.getByTestId(id).evaluate((el) => {
        const rgb = (/** @type {string} */ c) => (c.match(/[\d.]+/g) ?? []).slice(0, 3).map(Number);
        const lum = (/** @type {number[]} */ c) => {
          const [r, g, b] = c.map((v) => (v / 255 <= 0.03928 ? v / 255 / 12.92 : ((v / 255 + 0.055) / 1.055) ** 2.4));
          return 0.2126 * r + 0.7152 * g + 0.0722 * b;
        };
        const cs = getComputedStyle(el);
        const [a, b] = [lum(rgb(cs.color)), lum(rgb(cs.backgroundColor))];
        return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      });
    try {
      for (const scheme of /** @type {const} */ (['light', 'dark'])) {
        await page.emulateMedia({ colorScheme: scheme });
        for (const id of ['approve', 'deny']) {
          await page.getByTestId(id).hover();
          await page.waitForTimeout(200); // the background's transition
          const c = await contrast(id);
          assert.ok(c >= 4.5, `${id} hovered in ${scheme}: ${c.toFixed(2)}:1`);
        }
      }
    } finally {
      await page.emulateMedia({ colorScheme: 'dark' });
      await page.mouse.move(0, 0);
    }
    await api('POST', `/api/holds/${h.id}/deny`, { operator: 'dana' });
    await held.promise;
  });
});

describe('a session whose only step is held', () => {
  test('shows on Live and on its page, reviewable, and becomes a stored session once decided', async () => {
    const sid = uid('only-held');
    const who = { session: sid, step: 1, agent: { id: 'payout-bot', name: 'Payout bot' }, user: 'ann' };
    const held = send(aosRequest(who, 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 8000, to: 'ACME' })));
    await pendingOf(sid, 1);

    await page.goto(`${guardian.url}/#/live`);
    const liveRow = page.locator(`[data-testid="session-row"][data-session="${sid}"]`);
    await liveRow.getByText('1 held').waitFor();
    await liveRow.getByText('Payout bot').waitFor();
    await liveRow.getByText(/waiting for review/).waitFor();
    await shot(page, 'review-03-live-held-only');

    await liveRow.click();
    await page.waitForURL(new RegExp(`#/session/${sid}`));
    const row = page.getByTestId('timeline-hold');
    await row.getByText('Tool call · transfer_funds').waitFor();
    // Selected at once: the held step is what there is to look at.
    await page.getByTestId('hold-inspector').getByText('8000').waitFor();
    assert.equal(await page.getByTestId('session-not-found').count(), 0, 'the session claims not to exist');
    assert.equal(await page.getByText('Session not found').count(), 0);
    await page.getByRole('heading', { level: 1, name: 'Payout bot' }).waitFor();
    await page.getByTestId('nothing-stored').waitFor();
    await shot(page, 'review-04-session-held-only');

    await page.getByTestId('hold-approve').click();
    await page.getByTestId('send-now').click();
    assert.equal((await held.promise).result?.decision, 'allow');
    await page.locator('[data-testid="timeline-step"][aria-current="true"]').getByText('Tool call · transfer_funds').waitFor();
    await page.getByTestId('session-steps').getByText('1 step', { exact: true }).waitFor();
    assert.equal(await page.getByTestId('nothing-stored').count(), 0);

    await page.goto(`${guardian.url}/#/live`);
    await liveRow.getByText('1 step', { exact: true }).waitFor();
    assert.equal(await liveRow.getByText(/waiting for review/).count(), 0);
  });

  test('a session with nothing stored and nothing held says so, and shows its first step when it comes', async () => {
    const sid = uid('nobody');
    await page.goto(`${guardian.url}/#/session/${sid}`);
    await page.getByTestId('session-not-found').waitFor();
    await post(guardian.url, aosRequest({ session: sid, step: 1 }, 'steps/message', userMessage('hello')));
    await page.getByTestId('timeline-step').waitFor();
    assert.equal(await page.getByTestId('session-not-found').count(), 0);
  });
});

describe('turns', () => {
  test('a step decided after review stays in its turn, where it was held', async () => {
    const sid = uid('turns');
    const who = (/** @type {number} */ step, /** @type {number} */ turn) => ({ session: sid, step, turn });
    await post(guardian.url, aosRequest(who(1, 1), 'steps/message', userMessage('Pay the ACME invoice, then look up the next one')));
    await post(guardian.url, aosRequest(who(2, 2), 'steps/toolCallRequest', toolCall('search', { q: 'ACME invoice' })));
    const held = send(aosRequest(who(3, 2), 'steps/toolCallRequest', toolCall('transfer_funds', { amount: 4200, to: 'ACME' })));
    await pendingOf(sid, 1);
    await post(guardian.url, aosRequest(who(4, 3), 'steps/toolCallRequest', toolCall('search', { q: 'next invoice' })));
    await post(guardian.url, aosRequest(who(5, 3), 'steps/toolCallRequest', toolCall('search', { q: 'due dates' })));

    await page.goto(`${guardian.url}/#/session/${sid}`);
    await page.getByTestId('timeline-step').nth(3).waitFor();
    await page.getByTestId('timeline-hold').click();
    await page.getByTestId('hold-approve').click();
    await page.getByTestId('send-now').click();
    assert.equal((await held.promise).result?.decision, 'allow');
    await page.getByTestId('timeline-hold').waitFor({ state: 'detached' });
    await page.getByTestId('timeline-step').nth(4).waitFor();

    /** The timeline as turn ids and step titles, in order. */
    const layout = () =>
      page.locator('[data-testid="timeline-turn"], [data-testid="timeline-step"]').evaluateAll((els) =>
        els.map((e) =>
          e.getAttribute('data-testid') === 'timeline-turn' ? `turn ${e.getAttribute('data-turn')}` : (e.querySelector('.sp')?.textContent ?? '').trim(),
        ),
      );
    const want = ['turn turn-1', '', 'turn turn-2', 'q=ACME invoice', 'amount=4200 to=ACME', 'turn turn-3', 'q=next invoice', 'q=due dates'];
    // Live, as the decided step arrived, and again from the stored pages after a reload.
    for (const reload of [false, true]) {
      if (reload) {
        await page.reload();
        await page.getByTestId('timeline-step').nth(4).waitFor();
      }
      const got = await layout();
      assert.deepEqual(
        got.map((x, i) => (i === 1 ? '' : x)),
        want,
        `${reload ? 'after a reload' : 'live'}: ${JSON.stringify(got)}`,
      );
    }
    await page.getByText('Turn 3').waitFor();
    assert.equal(await page.getByText('Turn 4').count(), 0);
    await shot(page, 'review-05-turns');
  });
});

describe('session page layout', () => {
  test('at 390 px the page scrolls as one with the inspector below the timeline; at 1280 px the title keeps its line', async () => {
    const sid = uid('layout');
    for (let i = 1; i <= 6; i++) await post(guardian.url, aosRequest({ session: sid, step: i, turn: 1 + (i >> 1), agent: { id: 'billing-bot', name: 'Billing bot' } }, 'steps/toolCallRequest', toolCall('search', { q: `page ${i}` })));
    await page.goto(`${guardian.url}/#/session/${sid}`);
    await page.getByTestId('timeline-step').nth(5).waitFor();
    const head = await page.getByRole('heading', { level: 1, name: 'Billing bot' }).boundingBox();
    await page.setViewportSize({ width: 1280, height: 900 });
    try {
      const h1280 = await page.getByRole('heading', { level: 1, name: 'Billing bot' }).boundingBox();
      assert.ok(h1280 && head && h1280.height < 30, `the title wraps at 1280 px: ${JSON.stringify(h1280)}`);

      await page.setViewportSize({ width: 390, height: 844 });
      await page.getByTestId('timeline-step').nth(2).click();
      const r = await page.evaluate(() => {
        const box = (/** @type {string} */ s) => document.querySelector(s)?.getBoundingClientRect();
        const detail = /** @type {HTMLElement} */ (document.querySelector('section.detail'));
        return {
          width: document.documentElement.scrollWidth,
          detailScrolls: detail.scrollHeight > detail.clientHeight + 1 && getComputedStyle(detail).overflowY !== 'visible',
          detailOverflow: getComputedStyle(detail).overflowY,
          timelineBottom: box('section.timeline')?.bottom ?? 0,
          detailTop: box('section.detail')?.top ?? 0,
          timelineHeight: box('section.timeline')?.height ?? 0,
        };
      });
      assert.ok(r.width <= 390, `the page is ${r.width} px wide`);
      assert.equal(r.detailOverflow, 'visible', 'the inspector is a scroll box of its own');
      assert.ok(r.detailTop >= r.timelineBottom - 1, `the inspector is not below the timeline: ${JSON.stringify(r)}`);
      assert.ok(r.timelineHeight >= 6 * 48, `the timeline shows its rows: ${JSON.stringify(r)}`);
      // The page scrolls to the inspector's end.
      await page.getByTestId('step-inspector').getByText('page 3').first().scrollIntoViewIfNeeded();
      await shot(page, 'review-06-session-390');
    } finally {
      await page.setViewportSize({ width: 1440, height: 900 });
    }
  });
});
