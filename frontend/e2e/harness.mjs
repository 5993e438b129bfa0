// Shared plumbing for the browser tests: start the guardian (the real `vigil serve` from
// VIGIL_BIN, or the mock with VIGIL_MOCK=1), launch Debian's chromium through playwright-core
// with a fresh profile, and act as an agent with plain fetch POSTs to /aos.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
export const ARTIFACTS = join(here, 'artifacts');
export const RULES_FIXTURE = join(here, 'fixtures', 'rules.json');
const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';

/**
 * Starts the guardian and resolves with its URL once it prints "listening on http://…".
 * extraRules are added to the rules file's (the shared fixture by default) in a copy written
 * to the guardian's own directory, which stop removes.
 * @param {{rules?: string, extraRules?: object[], extraArgs?: string[], startTimeoutMs?: number, users?: {name: string, role: string, password: string}[]}} [opts]
 */
export async function startGuardian(opts = {}) {
  const bin = process.env.VIGIL_BIN;
  const mock = process.env.VIGIL_MOCK === '1';
  if (!bin && !mock) throw new Error('Set VIGIL_BIN to the built vigil binary (or VIGIL_MOCK=1 to use the mock guardian in e2e/mock).');
  if (bin && !existsSync(bin)) throw new Error(`VIGIL_BIN=${bin} does not exist`);
  if (!bin && !existsSync(join(here, '..', '..', 'ui', 'dist', 'index.html'))) throw new Error('The mock serves the built console (ui/dist): run `npm run build` first.');
  const dir = mkdtempSync(join(tmpdir(), 'vigil-e2e-'));
  let rules = opts.rules ?? RULES_FIXTURE;
  if (opts.extraRules) {
    const set = JSON.parse(readFileSync(rules, 'utf8'));
    set.rules.push(...opts.extraRules);
    rules = join(dir, 'rules.json');
    writeFileSync(rules, JSON.stringify(set));
  }
  // Port 0: the guardian binds a port of its own and prints it, so no other test can take
  // it between a pick and the bind.
  const args = ['serve', '--addr', '127.0.0.1:0', '--db', join(dir, 'vigil.db'), '--rules', rules, ...(opts.extraArgs ?? [])];
  // Operator accounts (team mode): created in the database before the guardian starts.
  for (const u of opts.users ?? []) {
    if (!bin) throw new Error('users need the real guardian (VIGIL_BIN)');
    await new Promise((ok, bad) => {
      const p = spawn(bin, ['users', 'add', u.name, '--role', u.role, '--db', join(dir, 'vigil.db')], { stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (c) => (out += c));
      p.stderr.on('data', (c) => (out += c));
      p.stdin.end(`${u.password}\n`);
      p.on('exit', (code) => (code === 0 ? ok(undefined) : bad(new Error(`vigil users add ${u.name} exited with ${code}: ${out}`))));
    });
  }
  const cmd = bin ?? process.execPath;
  const argv = bin ? args : [join(here, 'mock', 'server.mjs'), ...args];
  const proc = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env } });
  // Never leave a guardian behind, even when a script dies half way.
  const reap = () => proc.exitCode === null && proc.kill('SIGKILL');
  process.once('exit', reap);
  let output = '';
  const url = await new Promise((ok, bad) => {
    const ms = opts.startTimeoutMs ?? 20_000;
    const timer = setTimeout(() => bad(new Error(`the guardian did not print "listening on" within ${ms / 1000} s:\n${output}`)), ms);
    const onData = (/** @type {Buffer} */ chunk) => {
      output += chunk.toString();
      const m = /listening on (https?:\/\/[^\s"]+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        ok(m[1].replace(/\/+$/, ''));
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    proc.on('exit', (code) => {
      clearTimeout(timer);
      bad(new Error(`the guardian exited with ${code}:\n${output}`));
    });
  });
  return {
    url,
    dir,
    output: () => output,
    /** Sends the guardian a signal, e.g. SIGSTOP to make it hang and SIGCONT to let it go on. @param {NodeJS.Signals} sig */
    signal: (sig) => proc.kill(sig),
    async stop() {
      if (proc.exitCode === null) {
        proc.kill('SIGCONT');
        const gone = new Promise((ok) => proc.once('exit', ok));
        proc.kill('SIGTERM');
        const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
        await gone;
        clearTimeout(t);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Launches chromium headless with a fresh profile. */
export async function startBrowser() {
  const profile = mkdtempSync(join(tmpdir(), 'vigil-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-quic', '--disable-sync'],
    viewport: { width: 1440, height: 900 },
    colorScheme: /** @type {'dark'|'light'} */ (process.env.E2E_SCHEME ?? 'dark'),
  });
  return {
    context,
    async stop() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a screenshot to e2e/artifacts/NAME.png. @param {import('playwright-core').Page} page @param {string} name */
export async function shot(page, name) {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
}

// ---------------------------------------------------------------- accessibility

let axeSource = '';

/**
 * Runs axe-core (from node_modules, injected as a script: no CDN) on the page and resolves with
 * its violations, each as "rule: help (n nodes: selector …)".
 * @param {import('playwright-core').Page} page
 */
export async function axeViolations(page) {
  axeSource ||= readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
  if (!(await page.evaluate(() => 'axe' in window))) {
    await page.addScriptTag({ content: axeSource }).catch(() => undefined);
    // A Content-Security-Policy without inline scripts blocks the tag; evaluating the source
    // through the DevTools protocol is not subject to it.
    if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(axeSource);
  }
  const found = await page.evaluate(async () => {
    // @ts-ignore injected above
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((/** @type {any} */ v) => ({
      id: v.id,
      help: v.help,
      nodes: v.nodes.map((/** @type {any} */ n) => `${n.target.join(' ')}${n.any?.[0]?.message ? ` — ${n.any[0].message}` : ''}`),
    }));
  });
  return found.map((v) => `${v.id}: ${v.help} (${v.nodes.length}: ${v.nodes.slice(0, 4).join(' | ')})`);
}

// ---------------------------------------------------------------- the agent

/**
 * One AOS step as an agent sends it.
 * @param {{session: string, turn?: number, step: number, agent?: {id: string, name: string}, user?: string}} who
 * @param {string} method
 * @param {Record<string, unknown>} params
 */
export function aosRequest(who, method, params) {
  const agent = who.agent ?? { id: 'e2e-agent', name: 'E2E agent' };
  return {
    jsonrpc: '2.0',
    id: who.step,
    method,
    params: {
      context: {
        agent: { ...agent, instructions: 'Test agent', version: '1.0.0', provider: { name: 'Vigil tests', url: 'https://example.com' } },
        session: { id: who.session },
        turnId: `turn-${who.turn ?? 1}`,
        stepId: `step-${who.step}`,
        timestamp: new Date().toISOString(),
        user: { id: who.user ?? 'tester', name: 'Tess Ter', organization: { id: 'org-1' } },
      },
      ...params,
    },
  };
}

export const userMessage = (/** @type {string} */ text) => ({ message: { id: `m-${Math.random().toString(36).slice(2)}`, role: 'user', content: [{ kind: 'text', text }] }, citations: [] });

export const toolCall = (/** @type {string} */ tool, /** @type {Record<string, unknown>} */ inputs, reasoning = '') => ({
  toolCallRequest: { executionId: `x-${Math.random().toString(36).slice(2)}`, toolId: tool, inputs: Object.entries(inputs).map(([name, value]) => ({ name, value })) },
  ...(reasoning ? { reasoning } : {}),
});

/**
 * Calls the console API as an operator (X-Vigil-Operator) and resolves with the JSON answer;
 * fails the test on a status other than 2xx.
 * @param {string} base @param {string} method @param {string} path @param {unknown} [body] @param {string} [operator]
 */
export async function apiCall(base, method, path, body, operator = 'rita') {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { 'content-type': 'application/json', 'x-vigil-operator': operator },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path} answered ${res.status}: ${text}`);
  return text ? JSON.parse(text) : null;
}

/** POSTs one request to /aos and resolves with the JSON-RPC response. @param {string} base @param {unknown} req */
export async function post(base, req) {
  const res = await fetch(`${base}/aos`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(req) });
  const text = await res.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`/aos answered ${res.status}: ${text}`);
  }
}

/**
 * Waits until a locator matches exactly n elements, and fails saying how many it matched.
 * @param {import('playwright-core').Locator} locator @param {number} n
 */
export async function assertCount(locator, n, timeout = 15_000) {
  const end = Date.now() + timeout;
  let c = -1;
  while (Date.now() < end) {
    c = await locator.count();
    if (c === n) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(c, n);
}
