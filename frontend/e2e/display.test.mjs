// What agents send is shown as sent and in full: long names wrap instead of pushing values out
// of view, bidi controls cannot turn the rest of a line around, held steps nobody reviewed say
// what happened, and the condition editor says how to leave it.
//   VIGIL_BIN=/path/to/vigil node --test e2e/display.test.mjs

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
  guardian = await startGuardian({
    extraRules: [
      { id: 'long-tool', when: 'len(tool) > 200', action: 'hold', message: 'A very long tool name', priority: 40, mode: 'enforce', hold: { timeout: '2m', onTimeout: 'deny' } },
      { id: 'quick-check', when: 'tool == "quick_check"', action: 'hold', priority: 40, mode: 'enforce', hold: { timeout: '1s', onTimeout: 'deny' } },
    ],
  });
  browser = await startBrowser();
  await browser.context.addInitScript(() => localStorage.setItem('vigil.operator', 'rita'));
  page = await browser.context.newPage();
  page.setDefaultTimeout(15_000);
});

after(async () => {
  await browser?.stop();
  await guardian?.stop();
});

/** @param {string} method @param {string} path @param {unknown} [body] */
const api = (method, path, body) => apiCall(guardian.url, method, path, body);

/** Waits for the session's pending hold. @param {string} sid */
async function pendingHold(sid) {
  for (let i = 0; i < 100; i++) {
    const h = (await api('GET', '/api/holds?status=pending')).holds.find((/** @type {any} */ x) => x.sessionId === sid);
    if (h) return h;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  throw new Error(`no hold for ${sid}`);
}

/**
 * Where the inputs table's values are drawn, against the pane that shows them and the window.
 * @param {string} pane a selector of the scrolling pane
 */
function valuesInView(pane) {
  return page.evaluate((sel) => {
    const box = /** @type {HTMLElement} */ (document.querySelector(sel));
    const b = box.getBoundingClientRect();
    const values = [...box.querySelectorAll('.inputs td pre')].map((el) => {
      const r = el.getBoundingClientRect();
      return { text: /** @type {HTMLElement} */ (el).innerText.slice(0, 12), left: Math.round(r.left), right: Math.round(r.right), width: Math.round(r.width) };
    });
    const tool = /** @type {HTMLElement | null} */ (box.querySelector('.readable .tool'));
    return {
      pane: [Math.round(b.left), Math.round(b.right)],
      scrolls: box.scrollWidth > box.clientWidth + 1,
      page: document.documentElement.scrollWidth,
      window: innerWidth,
      tool: tool ? Math.round(tool.getBoundingClientRect().right) : 0,
      values,
    };
  }, pane);
}

describe('long names', () => {
  test('a 256-character tool and a 500-character input name wrap: every value stays in view at 390, 1024 and 1440 px', async () => {
    const sid = `long-${Date.now().toString(36)}`;
    const tool = 't'.repeat(256);
    const answer = post(guardian.url, aosRequest({ session: sid, step: 1 }, 'steps/toolCallRequest', toolCall(tool, { ['n'.repeat(500)]: 'first value', amount: 9000 })));
    const hold = await pendingHold(sid);
    /** @param {Awaited<ReturnType<typeof valuesInView>>} got @param {string} where */
    const check = (got, where) => {
      assert.equal(got.values.length, 2, `${where}: ${JSON.stringify(got)}`);
      for (const v of got.values) {
        assert.ok(v.width >= 40, `${where}: the value ${v.text} is squeezed to ${v.width} px`);
        assert.ok(v.left >= got.pane[0] && v.right <= got.pane[1] + 1 && v.right <= got.window, `${where}: the value ${v.text} is drawn outside the pane ${JSON.stringify(got)}`);
      }
      assert.ok(got.tool <= got.pane[1] + 1, `${where}: the tool name runs out of the pane ${JSON.stringify(got)}`);
      assert.equal(got.scrolls, false, `${where}: the pane scrolls sideways ${JSON.stringify(got)}`);
      assert.ok(got.page <= got.window, `${where}: the page is ${got.page} px wide`);
    };
    try {
      for (const width of [1440, 1024, 390]) {
        await page.setViewportSize({ width, height: 900 });
        await page.goto(`${guardian.url}/#/held?hold=${hold.id}`);
        await page.getByTestId('hold-title').waitFor();
        await page.locator('.detail .inputs').waitFor();
        await page.waitForTimeout(100);
        check(await valuesInView('section.detail'), `held ${width} px`);
        if (width === 1440) await shot(page, 'display-01-held-long-names');
      }
      await api('POST', `/api/holds/${hold.id}/approve`, { operator: 'rita' });
      assert.equal((await answer).result?.decision, 'allow');
      for (const width of [1440, 1024, 390]) {
        await page.setViewportSize({ width, height: 900 });
        await page.goto(`${guardian.url}/#/session/${sid}`);
        await page.getByTestId('timeline-step').first().click();
        await page.getByTestId('step-inspector').locator('.inputs').waitFor();
        await page.waitForTimeout(100);
        // On a phone the page scrolls as one: the inspector is the pane.
        check(await valuesInView(width <= 760 ? '[data-testid="step-inspector"]' : 'section.detail'), `session ${width} px`);
      }
    } finally {
      await page.setViewportSize({ width: 1440, height: 900 });
    }
  });
});

describe('bidi controls', () => {
  test('an RLO in an input does not reverse the rest of the timeline line, the search snippet or the names', async () => {
    const sid = `bidi-${Date.now().toString(36)}`;
    const r = await post(guardian.url, aosRequest({ session: sid, step: 1, agent: { id: 'bidi-bot', name: 'Bot\u202e' }, user: 'u\u2069\u202eser' }, 'steps/toolCallRequest', toolCall('log_note', { note: 'ok\u202e', to: 'ACCT-1', amount: 9000 })));
    assert.equal(r.result?.decision, 'allow');

    /**
     * Whether each word is drawn left to right, after the one before it, in the element.
     * @param {string} sel @param {string[]} words
     */
    const ordered = (sel, words) =>
      page.evaluate(
        ([sel, words]) => {
          const el = /** @type {HTMLElement} */ (document.querySelector(/** @type {string} */ (sel)));
          const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
          /** @type {{node: Text, at: number}[]} */
          const found = [];
          for (let n = /** @type {Text | null} */ (walker.nextNode()); n; n = /** @type {Text | null} */ (walker.nextNode())) {
            for (const w of /** @type {string[]} */ (words)) {
              const at = n.data.indexOf(w);
              if (at >= 0) found.push({ node: n, at });
            }
          }
          const x = (/** @type {Text} */ node, /** @type {number} */ i) => {
            const range = document.createRange();
            range.setStart(node, i);
            range.setEnd(node, i + 1);
            return range.getBoundingClientRect().left;
          };
          // Within each word, letters go left to right; and each word starts after the one before.
          const within = found.every(({ node, at }) => x(node, at) < x(node, at + 1));
          const lefts = found.map(({ node, at }) => x(node, at));
          return { found: found.length, within, lefts, across: lefts.every((l, i) => i === 0 || l > /** @type {number} */ (lefts[i - 1])) };
        },
        [sel, words],
      );

    await page.goto(`${guardian.url}/#/session/${sid}`);
    const row = page.getByTestId('timeline-step').first();
    await row.waitFor();
    const line = await ordered('[data-testid="timeline-step"] .sp', ['note', 'to=', 'amount']);
    assert.deepEqual({ found: line.found, within: line.within, across: line.across }, { found: 3, within: true, across: true }, `timeline line: ${JSON.stringify(line)}`);
    await shot(page, 'display-02-bidi-timeline');
    // The raw request shows the controls as JSON escapes, which reorder nothing.
    await row.click();
    const tree = page.locator('details', { hasText: 'Request' }).locator('.tree').first();
    await tree.waitFor();
    for (let i = 0; i < 10; i++) {
      const closed = tree.locator('button.toggle[aria-expanded="false"]');
      if ((await closed.count()) === 0) break;
      await closed.first().click();
    }
    const raw = await tree.textContent();
    assert.ok(raw?.includes('"ok\\u202e"'), `request tree: ${raw}`);
    assert.ok(raw?.includes('"Bot\\u202e"'), `request tree: ${raw}`);
    assert.equal(/[\u202a-\u202e\u2066-\u2069]/.test(raw ?? ''), false, 'no raw bidi control in the tree');

    await page.goto(`${guardian.url}/#/live`);
    const srow = page.locator(`[data-testid="session-row"][data-session="${sid}"]`);
    await srow.waitFor();
    // The agent's name and the session id share a line in the ticker: the RLO ending the name
    // does not turn the id after it around. (Inside a piece, text after an override is drawn as
    // the override says: that is the piece's own content.)
    const names = await ordered(`[data-testid="session-row"][data-session="${sid}"] .agent`, ['Bot']);
    assert.equal(names.within, true, `session row: ${JSON.stringify(names)}`);
    const tick = page.locator('[data-testid="tick"]', { hasText: 'log_note' }).first();
    await tick.waitFor();
    const ticker = await tick.evaluate((el) => {
      el.setAttribute('data-probe', '1');
      return true;
    });
    assert.ok(ticker);
    const tsub = await ordered('[data-testid="tick"][data-probe="1"] .tsub', ['Bot', 'bidi-']);
    assert.deepEqual({ found: tsub.found, within: tsub.within, across: tsub.across }, { found: 2, within: true, across: true }, `ticker: ${JSON.stringify(tsub)}`);

    for (let i = 0; i < 100; i++) {
      const s = await api('GET', `/api/search?q=ACCT&session=${sid}`);
      if (s.steps.length) break;
      await new Promise((ok) => setTimeout(ok, 100));
    }
    await page.goto(`${guardian.url}/#/search?q=ACCT&session=${sid}`);
    await page.getByTestId('search-hit').first().waitFor();
    const snippet = await ordered('[data-testid="search-hit"] .snippet', ['ACCT', 'amount']);
    assert.ok(snippet.found >= 1, 'the snippet holds the input');
    assert.equal(snippet.within && snippet.across, true, `search snippet: ${JSON.stringify(snippet)}`);
  });
});

describe('held steps nobody reviewed', () => {
  test('a held step that timed out says "timed out", not "after review"', async () => {
    const sid = `quick-${Date.now().toString(36)}`;
    const r = await post(guardian.url, aosRequest({ session: sid, step: 1 }, 'steps/toolCallRequest', toolCall('quick_check', { x: 1 })));
    assert.equal(r.result?.decision, 'deny');
    await page.goto(`${guardian.url}/#/session/${sid}`);
    const row = page.getByTestId('timeline-step').first();
    await row.getByTestId('decision-chip').getByText('timed out', { exact: false }).waitFor();
    assert.equal(await row.getByText('after review').count(), 0);
    await row.click();
    const insp = page.getByTestId('step-inspector');
    await insp.getByTestId('held-outcome').getByText('timed out').waitFor();
    await insp.getByTestId('step-review').getByText('Timed out').waitFor();
    assert.equal(await insp.getByText('after review').count(), 0);
    const chip = await insp.locator('header [data-testid="decision-chip"]').getAttribute('title');
    assert.equal(chip, 'deny · timed out');
    await shot(page, 'display-03-timed-out');
  });
});

describe('condition editor', () => {
  test('the editor says that Tab indents and Esc then Tab leaves it, on screen and to a screen reader', async () => {
    await page.goto(`${guardian.url}/#/rules/new`);
    const content = page.locator('#rule-when .cm-content');
    await content.waitFor();
    const hint = page.getByTestId('when-keys');
    assert.match(await hint.innerText(), /Tab\s+indents.*Esc\s*, then\s+Tab/s);
    assert.ok(await hint.isVisible());
    assert.equal(await content.getAttribute('aria-describedby'), 'rule-when-keys');
    // And it is so: Tab stays in the editor, Esc then Tab moves on.
    await content.click();
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.classList.contains('cm-content')), true);
    await page.keyboard.press('Escape');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.classList.contains('cm-content')), false);
    await page.getByRole('link', { name: 'Live', exact: true }).click();
    const leave = page.getByRole('dialog', { name: 'Leave without saving?' });
    if (await leave.isVisible().catch(() => false)) await leave.getByRole('button', { name: 'Discard changes' }).click();
  });
});
