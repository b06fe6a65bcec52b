// The web console (/console) in a real browser: Playwright driving the system's Chromium
// (test/support/browser.ts; a missing Chromium fails here, it is never skipped) against the
// test stack. A tenant with a free agent and a priced public one, called and paid through the
// gateway with its token and, on the public URL, by a payer with none (an unmodified x402
// client, the stack's facilitator and chain): a bad token is refused, a good
// one signs in for the browser session only, an agent's chart shows what GET /v1/analytics
// answers for the same window, invocations filter as GET /v1/invocations does, an invocation
// shows its payment and receipt and links to its workflow in the Temporal Web UI, which the test
// follows. The page loads nothing but its own assets and /v1, breaks no CSP rule, and fits a phone.
// Screenshots go to .test-data/console-screenshots, or to CONSOLE_SCREENSHOTS (docs/console for
// the ones docs/CONSOLE.md shows).
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { withPayingTenant, type PayingTenant } from '../support/settling.ts';
import { payingFetch } from '../support/paying-client.ts';
import { newPayer, newPayTo } from '../support/x402.ts';
import { waitFor } from '../support/wait.ts';
import { launchChromium } from '../support/browser.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import { mintToken } from '../../scripts/lib/tokens.ts';

const SHOTS = resolve(process.env.CONSOLE_SCREENSHOTS ?? resolve('.test-data', 'console-screenshots'));
const LAPTOP = { width: 1366, height: 860 };
const PHONE = { width: 390, height: 844 };
/** How much wider than the window the page is (in the page: this file is typed for node, not the DOM). */
const OVERFLOW = 'document.documentElement.scrollWidth - window.innerWidth';

type Opened = {
  context: BrowserContext;
  page: Page;
  violations: string[];
  requests: string[];
  /** Closes the session once no request of its pages is in flight (a refresh cut short is noise in the API's log). */
  close(): Promise<void>;
};

describe('the web console in a real browser', function () {
  this.timeout(180_000);
  let paying: PayingTenant;
  withPayingTenant('console', (p) => (paying = p));
  let browser: Browser;
  let upstream: TestUpstream;
  /** Another user of the tenant: its analytics queries take tokens from a bucket of their own, not the browser's. */
  let checker: string;
  const echo = { id: '', name: uniqueName('echo') };
  const priced = { id: '', name: uniqueName('priced') };
  let paidInvocation: any;
  /** The public call's: its caller is `x402:<payer>`. */
  let publicInvocation: any;
  let publicPayer = '';
  let failedMarker = '';

  before(async function () {
    this.timeout(180_000);
    mkdirSync(SHOTS, { recursive: true });
    browser = await launchChromium();
    const { token } = paying;
    // The free agent's upstream refuses one marker (422): one error among its calls.
    upstream = await startUpstream((req, res) => {
      res.statusCode = req.body.toString().startsWith('fail-') ? 422 : 200;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ echo: req.body.toString() }));
    });
    checker = await stack().token(paying.tenant, 'console-checker');
    failedMarker = `fail-${uniqueName()}`;
    const created = await call('POST', '/v1/agents', {
      token,
      json: { name: echo.name, upstream_url: upstream.url, emit_receipts: true },
    });
    assert.equal(created.status, 201, created.text);
    echo.id = created.json.id;
    const pricedAgent = await call('POST', '/v1/agents', {
      token,
      json: {
        name: priced.name,
        upstream_url: paying.upstream.url,
        emit_receipts: true,
        pricing: { amount: '25000', asset: 'USDC', network: 'base', pay_to: newPayTo() },
        // Public too: one call comes from a payer with no token.
        public: true,
      },
    });
    assert.equal(pricedAgent.status, 201, pricedAgent.text);
    priced.id = pricedAgent.json.id;

    const calls = [];
    for (const body of ['one', 'two', 'three']) calls.push(call('POST', `/v1/proxy/${echo.id}`, { token, body }));
    calls.push(call('POST', `/v1/proxy/${echo.id}`, { token, body: failedMarker }));
    const accepted = await Promise.all(calls);
    for (const res of accepted) assert.equal(res.status, 202, res.text);
    await Promise.all(accepted.map((res) => waitForInvocation(token, echo.id, res.json.invocation_id)));

    const { pay } = payingFetch('x402-fetch', await newPayer(1_000_000n));
    const paid = await pay(`${stack().apiUrl}/v1/proxy/${priced.id}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
      body: 'paid call',
    });
    assert.equal(paid.status, 202, await paid.clone().text());
    const { invocation_id: paidId } = (await paid.json()) as { invocation_id: string };
    await waitForInvocation(token, priced.id, paidId);
    paidInvocation = await waitFor(
      async () => {
        const list = await call('GET', `/v1/invocations?agent_id=${priced.id}`, { token });
        const row = list.json.data.find((r: any) => r.invocation_id === paidId);
        return row?.payment_transaction && row;
      },
      { timeoutMs: 30_000, what: 'the paid call to be settled' },
    );
    // A payer with no token, on the public URL.
    const payer = await newPayer(1_000_000n);
    publicPayer = payer.address;
    const open_ = await payingFetch('x402-fetch', payer).pay(`${stack().apiUrl}/public/agents/${priced.id}`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'public call',
    });
    assert.equal(open_.status, 202, await open_.clone().text());
    const { invocation_id: publicId } = (await open_.json()) as { invocation_id: string };
    await waitForInvocation(token, priced.id, publicId);
    publicInvocation = await waitFor(
      async () => {
        const list = await call('GET', `/v1/invocations?agent_id=${priced.id}`, { token });
        const row = list.json.data.find((r: any) => r.invocation_id === publicId);
        return row?.payment_transaction && row;
      },
      { timeoutMs: 30_000, what: 'the public call to be settled' },
    );
    // The rollups count a call once it is terminal: the charts have all six to show.
    await waitFor(
      async () => {
        const res = await call(
          'GET',
          `/v1/analytics?since=${encodeURIComponent(new Date(Date.now() - 86_400_000).toISOString())}&group_by=agent_id`,
          {
            token: checker,
          },
        );
        const count = (id: string) =>
          (res.json?.groups ?? []).filter((g: any) => g.agent_id === id).reduce((n: number, g: any) => n + g.count, 0);
        return count(echo.id) === 4 && count(priced.id) === 2;
      },
      { timeoutMs: 30_000, everyMs: 2_500, what: "the analytics to count the agents' calls" },
    );
  });

  after(async () => {
    await browser?.close();
    await upstream?.close();
  });

  /** A new browser session (its own sessionStorage) at /console, recording what it loads and every CSP report. */
  async function open(viewport = LAPTOP, path = '/console'): Promise<Opened> {
    const context = await browser.newContext({ viewport, reducedMotion: 'reduce' });
    const page = await context.newPage();
    const violations: string[] = [];
    const requests: string[] = [];
    page.on('console', (msg) => {
      if (/Content Security Policy/i.test(msg.text())) violations.push(msg.text());
    });
    page.on('pageerror', (err) => violations.push(`page error: ${err.message}`));
    let inFlight = 0;
    context.on('request', () => inFlight++);
    context.on('requestfinished', () => inFlight--);
    context.on('requestfailed', () => inFlight--);
    page.on('request', (req) => requests.push(req.url()));
    await page.goto(`${stack().apiUrl}${path}`);
    const close = async () => {
      await waitFor(() => inFlight === 0, { what: 'the pages to finish their requests' });
      await context.close();
    };
    return { context, page, violations, requests, close };
  }

  async function signIn(opened: Opened, token = paying.token): Promise<void> {
    const { page } = opened;
    await page.getByLabel('Bearer token').fill(token);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('navigation', { name: 'Console' }).waitFor();
  }

  const shoot = (page: Page, name: string) => page.screenshot({ path: resolve(SHOTS, `${name}.png`), fullPage: true });

  /** The rows of a chart's number table: bucket start → the value of each line (null where none). */
  async function chartTable(page: Page, chart: string): Promise<Map<string, (number | null)[]>> {
    const rows = await page
      .locator(`figure[data-chart="${chart}"] table.chart-data tbody tr`)
      .evaluateAll((trs) =>
        trs.map((tr) => [
          tr.getAttribute('data-bucket')!,
          [...tr.querySelectorAll('td')].map((td) => td.getAttribute('data-value') || null),
        ]),
      );
    return new Map(
      rows.map(([bucket, values]) => [
        bucket as string,
        (values as (string | null)[]).map((v) => (v === null ? null : Number(v))),
      ]),
    );
  }

  it('serves the page under a strict Content-Security-Policy, revalidated on each load, and its hashed assets for a year', async () => {
    for (const path of ['/console', '/console/']) {
      const page = await call('GET', path);
      assert.equal(page.status, 200, `${path}: ${page.text}`);
      assert.match(String(page.headers['content-type']), /^text\/html/);
      assert.equal(page.headers['cache-control'], 'no-cache');
      const csp = String(page.headers['content-security-policy']);
      const directives = new Map(
        csp
          .split(';')
          .map((d) => d.trim().split(/\s+/))
          .map(([name, ...values]) => [name, values]),
      );
      assert.deepEqual(directives.get('default-src'), ["'none'"]);
      for (const name of ['script-src', 'style-src', 'connect-src'])
        assert.deepEqual(directives.get(name), ["'self'"], name);
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:|\*|data:/, 'no inline code and no other origin');
      assert.deepEqual(directives.get('frame-ancestors'), ["'none'"]);
      assert.doesNotMatch(page.text, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script');
      assert.doesNotMatch(page.text, /<style|\sstyle=/, 'no inline style');
      assert.doesNotMatch(
        page.text,
        /https?:\/\/(?!127\.0\.0\.1)/,
        'nothing from another origin (only the Temporal UI link target in the config)',
      );
      const assets = [...page.text.matchAll(/(?:src|href)="([^"]*assets\/[^"]+)"/g)].map((m) => m[1]);
      assert.equal(assets.length, 2, `a script and a stylesheet: ${assets.join(', ')}`);
      for (const asset of assets) {
        assert.match(asset, /main-[A-Z0-9]{8}\.(js|css)$/, 'content-hashed names');
        const url = new URL(asset, `${stack().apiUrl}${path}`);
        assert.equal(
          url.pathname.startsWith('/console/assets/'),
          true,
          `${asset} resolves under /console/assets from ${path}`,
        );
        const res = await call('GET', url.pathname);
        assert.equal(res.status, 200, asset);
        assert.equal(res.headers['cache-control'], 'public, max-age=31536000, immutable');
        assert.match(String(res.headers['content-type']), asset.endsWith('.js') ? /^text\/javascript/ : /^text\/css/);
        assert.equal(res.headers['x-content-type-options'], 'nosniff');
      }
    }
    for (const missing of [
      '/console/assets/main-AAAAAAAA.js',
      '/console/assets/..%2Fmanifest.json',
      '/console/assets/manifest.json',
    ]) {
      const res = await call('GET', missing);
      assert.equal(res.status, 404, missing);
      assert.equal(typeof res.json.error, 'string');
    }
    assert.equal((await call('GET', '/console/manifest.json')).status, 404);
    assert.equal((await call('GET', '/console/index.html')).status, 404);
  });

  it('refuses a bad token, saying so, and keeps nothing', async () => {
    const opened = await open();
    const { page } = opened;
    for (const bad of [
      'not-a-token',
      await stack()
        .token(paying.tenant)
        .then((t) => `${t.slice(0, -4)}AAAA`),
    ]) {
      await page.getByLabel('Bearer token').fill(bad);
      await page.getByRole('button', { name: 'Sign in', exact: true }).click();
      const alert = page.getByRole('alert');
      await alert.waitFor();
      assert.match(await alert.innerText(), /The API refused this token/);
      assert.equal(await page.getByRole('navigation', { name: 'Console' }).count(), 0, 'still signing in');
      assert.equal(await page.evaluate(() => sessionStorage.length + localStorage.length), 0, 'nothing kept');
    }
    await shoot(page, 'signin-refused');
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it('signs in with a token kept for this browser session only; a refused token later signs out', async () => {
    const opened = await open();
    const { page, context } = opened;
    await signIn(opened);
    assert.equal(await page.evaluate(() => localStorage.length), 0, 'nothing in localStorage');
    assert.deepEqual(await context.cookies(), [], 'no cookie');
    assert.equal(await page.evaluate(() => sessionStorage.length), 1);
    // A reload is the same session: still signed in.
    await page.reload();
    await page.getByRole('navigation', { name: 'Console' }).waitFor();
    // Another browser session starts at sign-in.
    const other = await open();
    await other.page.getByLabel('Bearer token').waitFor();
    await other.close();
    // The overview of the last day: both agents among the busiest, the calls counted.
    await page.locator('[data-total="calls"]').waitFor();
    await page.locator('figure[data-chart="Calls and errors"] canvas').waitFor();
    const busiest = page.getByRole('region', { name: 'Busiest agents' });
    await busiest.getByRole('link', { name: echo.name }).waitFor();
    await busiest.getByRole('link', { name: priced.name }).waitFor();
    const callers = page.getByRole('region', { name: 'Busiest callers' });
    await callers.getByRole('link', { name: 'user-1' }).waitFor();
    await callers.getByRole('link', { name: `x402:${publicPayer}` }).waitFor();
    // Revenue: the two paid calls' charges, chart and total, as GET /v1/analytics answers them for the page's window.
    const range = page.locator('p.range[data-since]');
    const api = await call(
      'GET',
      `/v1/analytics?since=${encodeURIComponent((await range.getAttribute('data-since'))!)}&until=${encodeURIComponent(
        (await range.getAttribute('data-until'))!,
      )}&bucket=${await range.getAttribute('data-bucket')}&group_by=agent_id`,
      { token: checker },
    );
    assert.equal(api.status, 200, api.text);
    const revenueAt = new Map<string, number>();
    for (const g of api.json.groups)
      revenueAt.set(
        new Date(g.bucket_start).toISOString(),
        (revenueAt.get(new Date(g.bucket_start).toISOString()) ?? 0) + Number(g.revenue.amount),
      );
    assert.equal(
      [...revenueAt.values()].reduce((a, b) => a + b, 0),
      50_000,
      'the API: two calls at 25000',
    );
    const drawn = await chartTable(page, 'Revenue');
    for (const [start, [amount]] of drawn) assert.equal(amount, revenueAt.get(start) ?? 0, `revenue at ${start}`);
    assert.equal(await page.locator('[data-total="revenue"]').innerText(), '0.05 USDC');
    await shoot(page, 'overview');
    // A token the API stops taking (here: one that was never good, put where the console keeps its token) signs out.
    await page.evaluate(() => sessionStorage.setItem('gateway-console-token', 'revoked'));
    await page.getByRole('link', { name: 'Invocations' }).click();
    await page.getByText('Signed out: the API refused the token').waitFor();
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it("draws an agent's chart from the numbers GET /v1/analytics answers for the same window", async () => {
    const opened = await open(LAPTOP, `/console#/agents/${echo.id}?window=day`);
    const { page } = opened;
    await signIn(opened);
    const range = page.locator('p.range[data-since]');
    await range.waitFor();
    const since = (await range.getAttribute('data-since'))!;
    const until = (await range.getAttribute('data-until'))!;
    const bucket = (await range.getAttribute('data-bucket'))!;
    const api = await call(
      'GET',
      `/v1/analytics?since=${encodeURIComponent(since)}&until=${encodeURIComponent(until)}&bucket=${bucket}&group_by=agent_id`,
      { token: checker },
    );
    assert.equal(api.status, 200, api.text);
    const groups = api.json.groups.filter((g: any) => g.agent_id === echo.id);
    assert.equal(
      groups.reduce((n: number, g: any) => n + g.count, 0),
      4,
      'the API counts the four calls',
    );

    const calls = await chartTable(page, 'Calls and errors');
    const latency = await chartTable(page, 'Latency');
    assert.equal(calls.size, 25, 'a bucket for every hour the day touches');
    for (const [start, [count, errors]] of calls) {
      const group = groups.find((g: any) => new Date(g.bucket_start).toISOString() === start);
      assert.equal(count, group?.count ?? 0, `calls at ${start}`);
      assert.equal(errors, group ? Math.round(group.count * group.error_rate) : 0, `errors at ${start}`);
      assert.deepEqual(
        latency.get(start),
        [group?.latency_ms.p50 ?? null, group?.latency_ms.p95 ?? null],
        `latency at ${start}`,
      );
    }
    assert.equal(
      [...calls.values()].reduce((n, [c]) => n + (c ?? 0), 0),
      4,
    );
    assert.equal(
      [...calls.values()].reduce((n, [, e]) => n + (e ?? 0), 0),
      1,
      'the one call its upstream failed',
    );
    assert.equal(await page.locator('[data-total="calls"]').innerText(), '4');

    // The chart itself is drawn: its canvas has painted pixels.
    const painted = await page.evaluate<number>(`(() => {
      const canvas = document.querySelector('figure[data-chart="Calls and errors"] canvas');
      const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
      let n = 0;
      for (let i = 3; i < data.length; i += 4) if (data[i] > 0) n++;
      return n;
    })()`);
    assert.ok(painted > 500, `the canvas is drawn (${painted} pixels)`);
    // Its recent invocations are the agent's own.
    const region = page.getByRole('region', { name: 'Recent invocations' });
    await region.locator('tr[data-invocation]').first().waitFor();
    assert.equal(await region.locator('tr[data-invocation]').count(), 4);
    await shoot(page, 'agent');
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it('filters invocations by agent, status and caller as the API does', async () => {
    const opened = await open(LAPTOP, '/console#/invocations');
    const { page } = opened;
    await signIn(opened);
    await page.locator('tr[data-invocation]').first().waitFor();
    assert.equal(await page.locator('tr[data-invocation]').count(), 6, 'every call of the tenant');

    await page.getByLabel('Agent').selectOption({ label: echo.name });
    await page.getByLabel('Status').selectOption('succeeded');
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.waitForFunction("location.hash.includes('status=succeeded')");
    const expected = await call('GET', `/v1/invocations?agent_id=${echo.id}&status=succeeded`, { token: paying.token });
    const want = expected.json.data.map((r: any) => r.invocation_id).sort();
    await waitFor(
      async () =>
        JSON.stringify(
          (
            await page
              .locator('tr[data-invocation]')
              .evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-invocation')))
          ).sort(),
        ) === JSON.stringify(want),
      { what: 'the filtered rows to be the API answer' },
    );
    assert.ok(want.length >= 3, 'the three plain calls at least');
    await shoot(page, 'invocations');

    // A payer's calls, by its address in lower case (the API records it checksummed): the public call alone.
    const upper = await call('GET', `/v1/invocations?caller=x402:0x${publicPayer.slice(2).toUpperCase()}`, {
      token: paying.token,
    });
    assert.deepEqual(
      upper.json.data.map((r: any) => r.invocation_id),
      [publicInvocation.invocation_id],
      'the API reads a payer in any letter case',
    );
    await page.getByLabel('Agent').selectOption({ label: 'any' });
    await page.getByLabel('Status').selectOption({ label: 'any' });
    await page.getByLabel('Caller').fill(publicPayer.toLowerCase());
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.locator(`tr[data-invocation="${publicInvocation.invocation_id}"]`).waitFor();
    await waitFor(async () => (await page.locator('tr[data-invocation]').count()) === 1, {
      what: "the payer's one call alone",
    });
    // A caller with no calls.
    await page.getByLabel('Caller').fill('nobody');
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.getByText('No invocation matches.').waitFor();
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it("shows a paid invocation's payment and receipt, and follows it to its workflow in the Temporal Web UI", async () => {
    const id = paidInvocation.invocation_id as string;
    const opened = await open(LAPTOP, `/console#/invocations?agent_id=${priced.id}`);
    const { page, context } = opened;
    await signIn(opened);
    const row = page.locator(`tr[data-invocation="${id}"]`);
    await row.getByRole('button', { name: 'Details' }).click();
    const detail = page.locator(`[data-detail="${id}"]`);
    await detail.waitFor();
    assert.equal(await detail.locator('[data-field="scheme"]').innerText(), 'exact');
    assert.equal(await detail.locator('[data-field="charge"]').innerText(), '0.025 USDC');
    assert.equal(await detail.locator('[data-field="transaction"]').innerText(), paidInvocation.payment_transaction);
    const receipt = await call('GET', `/v1/invocations/${id}/receipt`, { token: paying.token });
    assert.equal(receipt.status, 200, receipt.text);
    await waitFor(async () => (await detail.getByLabel('Receipt (JWS)').inputValue()) === receipt.json.receipt, {
      what: 'the receipt',
    });
    await shoot(page, 'invocation');

    const link = detail.getByRole('link', { name: 'Open in the Temporal Web UI' });
    assert.equal(await link.getAttribute('href'), `${stack().infra.temporalUiUrl}/namespaces/default/workflows/${id}`);
    const [temporal] = await Promise.all([context.waitForEvent('page'), link.click()]);
    await temporal.waitForURL((url) => url.pathname.includes(`/workflows/${id}`), { timeout: 30_000 });
    // The Temporal Web UI's own page of that workflow: its id shown, its run completed.
    await temporal.getByText(id).first().waitFor({ timeout: 30_000 });
    await temporal
      .getByText(/completed/i)
      .first()
      .waitFor({ timeout: 30_000 });
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it('shows charges by scheme and agent, settlements with their transactions, and channels and budgets as the API serves them', async () => {
    const opened = await open(LAPTOP, '/console#/money?window=day');
    const { page } = opened;
    await signIn(opened);
    await page.locator('[data-total="charged"]').getByText('0.05 USDC').waitFor();
    const byScheme = page.getByRole('region', { name: 'Charges by scheme' });
    assert.match(await byScheme.locator('tr[data-key="exact"]').innerText(), /2\s+0\.05 USDC/);
    const byAgent = page.getByRole('region', { name: 'Charges by agent' });
    await byAgent.getByRole('link', { name: priced.name }).waitFor();
    const settlement = page
      .getByRole('region', { name: 'Settlements' })
      .locator(`tr[data-invocation="${paidInvocation.invocation_id}"]`);
    await settlement.waitFor();
    assert.equal(
      await settlement.locator('td[title]').first().getAttribute('title'),
      paidInvocation.payment_transaction,
    );
    // Channels and budgets: "not available" while the API answers 404, their rows once it serves them.
    for (const [path, panel] of [
      ['/v1/channels', 'Channels'],
      ['/v1/budgets', 'Budgets'],
    ]) {
      const served = await call('GET', path, { token: paying.token });
      const region = page.getByRole('region', { name: panel });
      if (served.status === 404) await region.locator(`[data-not-available="GET ${path}"]`).waitFor();
      else {
        assert.equal(served.status, 200, served.text);
        await region.locator('table, ul.budgets, p.empty').first().waitFor();
      }
    }
    await shoot(page, 'money');
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it('draws each budget as bars of used against limit, one per limited measure, from GET /v1/budgets', async () => {
    const name = `console-budget-${randomUUID().slice(0, 8)}`;
    const created = await call('POST', '/v1/budgets', {
      token: paying.token,
      json: { name, scope: {}, limit: { calls: 1000, amount: '5000000' }, window: 'month', mode: 'soft' },
    });
    assert.equal(created.status, 201, created.text);
    const opened = await open(LAPTOP, '/console#/money');
    const { page } = opened;
    await signIn(opened);
    const calls = page.getByRole('meter', { name: `${name} · month · soft · calls` });
    const amount = page.getByRole('meter', { name: `${name} · month · soft · amount` });
    await calls.waitFor();
    await amount.waitFor();
    const budget = (await call('GET', `/v1/budgets/${created.json.id}`, { token: paying.token })).json;
    assert.equal(await calls.getAttribute('aria-valuemax'), '1000');
    assert.equal(await calls.getAttribute('aria-valuenow'), String(budget.used.calls));
    assert.equal(await amount.getAttribute('aria-valuemax'), '5000000');
    assert.equal(await amount.getAttribute('aria-valuenow'), String(Number(budget.used.amount)));
    await page
      .locator(`[data-budget="${created.json.id}-amount"]`)
      .getByText(/of 5 USDC/)
      .waitFor();
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it('reads nothing but its own assets and /v1 lists, never a body or a secret', async () => {
    const opened = await open();
    const { page, requests } = opened;
    await signIn(opened);
    for (const view of ['overview', `agents/${echo.id}`, 'agents', 'invocations', 'money']) {
      await page.evaluate(`location.hash = '#/${view}'`);
      await page.locator('.poll-state').first().waitFor();
      await page.waitForLoadState('networkidle');
    }
    await page.locator('tr[data-invocation]').first().waitFor();
    const origin = new URL(stack().apiUrl).origin;
    const allowed =
      /^\/(console|console\/assets\/main-\w+\.(js|css)|v1\/(agents|analytics|analytics\/callers|invocations|policy\/decisions|channels|budgets|invocations\/inv_[\w-]+\/receipt))$/;
    for (const url of requests) {
      const parsed = new URL(url);
      assert.equal(parsed.origin, origin, `${url}: this origin only`);
      assert.match(parsed.pathname, allowed, `${url}: a list the token reads, never a poll with its body`);
    }
    const text = await page.locator('body').innerText();
    assert.ok(!text.includes(paying.token), 'the token is never shown');
    assert.doesNotMatch(text, /BEGIN (CERTIFICATE|PRIVATE KEY)|response_body/, 'no credential, no body');
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it('fits a phone screen and is usable with the keyboard alone', async () => {
    const opened = await open(PHONE);
    const { page } = opened;
    // Keyboard only: to the token field, type, to the button, Enter.
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate('document.activeElement?.id'), 'token');
    await page.keyboard.insertText(paying.token);
    await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await page.getByRole('navigation', { name: 'Console' }).waitFor();
    // The skip link first, then the navigation; Enter on "Agents" opens the catalog.
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate('document.activeElement?.textContent'), 'Skip to content');
    for (const _link of ['Overview', 'Agents']) await page.keyboard.press('Tab');
    assert.equal(await page.evaluate('document.activeElement?.textContent'), 'Agents');
    await page.keyboard.press('Enter');
    await page.getByRole('region', { name: 'Catalog' }).getByRole('link', { name: echo.name }).waitFor();
    // Nothing wider than the screen but the tables, which scroll inside their panel.
    const overflow = await page.evaluate<number>(OVERFLOW);
    assert.ok(overflow <= 0, `the page is ${overflow} px wider than the phone`);
    await page.evaluate("location.hash = '#/overview'");
    await page.locator('figure[data-chart="Calls and errors"] canvas').waitFor();
    assert.ok((await page.evaluate<number>(OVERFLOW)) <= 0);
    await shoot(page, 'overview-phone');
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it('shows what a tenant wrote as text, never as markup (an agent named with HTML)', async () => {
    const name = `<img src=x onerror="document.body.dataset.pwned='yes'"> ${uniqueName('html')}`;
    const created = await call('POST', '/v1/agents', {
      token: paying.token,
      json: { name, upstream_url: upstream.url },
    });
    assert.equal(created.status, 201, created.text);
    const opened = await open(LAPTOP, '/console#/agents');
    const { page } = opened;
    await signIn(opened);
    await page.getByRole('link', { name }).waitFor();
    assert.equal(await page.locator('img').count(), 0, 'no element made of the name');
    assert.equal(await page.evaluate('document.body.dataset.pwned'), undefined);
    await page.getByRole('link', { name }).click();
    await page.getByRole('heading', { name: new RegExp(name.slice(-10)) }).waitFor();
    assert.equal(await page.locator('img').count(), 0);
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });

  it('refreshes while open: a new call appears in the open table without a reload', async () => {
    const opened = await open(LAPTOP, `/console#/agents/${echo.id}`);
    const { page } = opened;
    await signIn(opened);
    const region = page.getByRole('region', { name: 'Recent invocations' });
    await region.locator('tr[data-invocation]').first().waitFor();
    const before = await region.locator('tr[data-invocation]').count();
    await page.evaluate('window.notReloaded = true');
    const res = await call('POST', `/v1/proxy/${echo.id}`, { token: paying.token, body: 'while open' });
    assert.equal(res.status, 202, res.text);
    // The table refreshes every 10 s: the new row within two rounds, the page never reloaded.
    await region.locator(`tr[data-invocation="${res.json.invocation_id}"]`).waitFor({ timeout: 25_000 });
    assert.equal(await region.locator('tr[data-invocation]').count(), before + 1);
    assert.equal(await page.evaluate('window.notReloaded'), true, 'the same page, refreshed in place');
    assert.deepEqual(opened.violations, []);
    await opened.close();
  });
});

/**
 * FAKE: an OpenID provider (no real one runs here) that signs every user in at once. It serves
 * its discovery document and token endpoint with CORS, as providers do for browser clients, and
 * checks the PKCE exchange: a code is exchanged once, by the client and redirect URI it was given
 * to, with the verifier whose S256 hash is the challenge it was asked with.
 */
async function startFakeProvider(tenant: string) {
  const codes = new Map<string, { challenge: string; redirectUri: string; clientId: string }>();
  const exchanged: { clientId: string; verified: boolean }[] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', issuer);
    res.setHeader('access-control-allow-origin', '*');
    if (url.pathname === '/.well-known/openid-configuration') {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({ issuer, authorization_endpoint: `${issuer}/authorize`, token_endpoint: `${issuer}/token` }),
      );
      return;
    }
    if (url.pathname === '/authorize') {
      const q = url.searchParams;
      assert.equal(q.get('response_type'), 'code');
      assert.equal(q.get('code_challenge_method'), 'S256');
      const code = randomUUID();
      codes.set(code, {
        challenge: q.get('code_challenge')!,
        redirectUri: q.get('redirect_uri')!,
        clientId: q.get('client_id')!,
      });
      const back = new URL(q.get('redirect_uri')!);
      back.searchParams.set('code', code);
      back.searchParams.set('state', q.get('state')!);
      res.writeHead(302, { location: back.toString() }).end();
      return;
    }
    if (url.pathname === '/token' && req.method === 'POST') {
      let body = '';
      req.on('data', (c: Buffer) => (body += c));
      req.on('end', async () => {
        const form = new URLSearchParams(body);
        const grant = codes.get(form.get('code') ?? '');
        codes.delete(form.get('code') ?? '');
        const verified =
          !!grant &&
          grant.redirectUri === form.get('redirect_uri') &&
          grant.clientId === form.get('client_id') &&
          createHash('sha256')
            .update(form.get('code_verifier') ?? '')
            .digest('base64url') === grant.challenge;
        exchanged.push({ clientId: form.get('client_id') ?? '', verified });
        res.setHeader('content-type', 'application/json');
        if (!verified) return res.writeHead(400).end(JSON.stringify({ error: 'invalid_grant' }));
        const token = await mintToken({ secret: stack().infra.secrets.jwtSecret, tenant, user: 'oidc-user', issuer });
        res.end(JSON.stringify({ access_token: token, token_type: 'Bearer', expires_in: 3600 }));
      });
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    issuer,
    exchanged,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe('the console signs in with the OpenID provider that issues the tokens (AUTH_ISSUER)', function () {
  this.timeout(120_000);
  let browser: Browser;
  let provider: Awaited<ReturnType<typeof startFakeProvider>>;
  let gateway: ExtraGateway;
  const tenant = `tenant-console-oidc-${randomUUID()}`;

  before(async () => {
    browser = await launchChromium();
    provider = await startFakeProvider(tenant);
    // An API whose tokens are the provider's (their issuer checked) and whose console is its client.
    const { config } = stack();
    gateway = await startCapturedGateway({
      auth: { ...config.auth, issuer: provider.issuer },
      console: { ...config.console, oidcClientId: 'gateway-console' },
    });
  });

  after(async () => {
    await browser?.close();
    await gateway?.close();
    await provider?.close();
  });

  it("signs in through the provider's code flow with PKCE, the page allowing that origin only", async () => {
    const page_ = await call('GET', '/console');
    assert.doesNotMatch(
      String(page_.headers['content-security-policy']),
      /127\.0\.0\.1/,
      'no provider, no other origin',
    );
    const res = await fetch(`${gateway.url}/console`);
    const csp = res.headers.get('content-security-policy') ?? '';
    assert.match(csp, new RegExp(`connect-src 'self' ${provider.issuer.replace(/[.]/g, '\\.')}(;|$)`));
    assert.doesNotMatch(csp, /unsafe-inline/);

    const context = await browser.newContext({ viewport: LAPTOP });
    const page = await context.newPage();
    const violations: string[] = [];
    page.on('console', (msg) => {
      if (/Content Security Policy/i.test(msg.text())) violations.push(msg.text());
    });
    await page.goto(`${gateway.url}/console#/agents`);
    await page.getByRole('button', { name: `Sign in with 127.0.0.1:${new URL(provider.issuer).port}` }).click();
    await page.getByRole('navigation', { name: 'Console' }).waitFor();
    assert.deepEqual(provider.exchanged, [{ clientId: 'gateway-console', verified: true }]);
    assert.equal(new URL(page.url()).search, '', 'the code left the address bar');
    const kept = await page.evaluate(() => sessionStorage.getItem('gateway-console-token'));
    const claims = JSON.parse(Buffer.from(kept!.split('.')[1], 'base64url').toString());
    assert.equal(claims.iss, provider.issuer);
    assert.equal(claims.tenant_id, tenant);
    await page.getByRole('region', { name: 'Catalog' }).waitFor();
    assert.deepEqual(violations, []);

    // A code this page did not ask for (a forged state) is refused, nothing exchanged.
    const fresh = await browser.newContext();
    const forged = await fresh.newPage();
    await forged.goto(`${gateway.url}/console?code=stolen&state=forged`);
    const alert = forged.getByRole('alert');
    await alert.waitFor();
    assert.match(await alert.innerText(), /state mismatch/);
    assert.equal(provider.exchanged.length, 1);
    await fresh.close();
    await context.close();
  });
});
