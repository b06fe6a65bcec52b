// SSRF through real connections: the agents API refusing an internal upstream_url, the upstream
// client never connecting to an address a name rebinds to (a resolver that answers differently
// on each lookup), one HTTP path through a gateway whose allow-list is empty, the facilitator
// client, and the budget alert's delivery to a webhook_url whose name resolves inside. The tests' resolver is a fake DNS (named so): it only decides which
// address a name resolves to; connecting is real. The rules themselves, address by address,
// are unit tests (test/unit/ssrf.test.ts).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import {
  createAgent,
  rawUpstream,
  readAll,
  startProxyApp,
  waitForRow,
  type RawUpstream,
} from '../support/proxy-helpers.ts';
import { createUpstreamClient, UpstreamError, type UpstreamClient } from '../../gateway/upstream/client.ts';
import { readFile } from 'node:fs/promises';
import { createFacilitatorClient } from '../../gateway/payment/facilitator-client.ts';
import { devCa, newAccount, newPayTo, newPayer, requirements, settleBody, signPayment } from '../support/x402.ts';
import { issueClientCert } from '../../scripts/dev/pki.ts';
import { rebindingResolver } from '../support/fake-dns.ts';
import { createUpstreamDispatcher } from '../../gateway/upstream/dispatcher.ts';
import { createBudgetAlertActivities } from '../../activities/budget-alerts.ts';
import { call } from '../support/http.ts';

describe('SSRF guard', () => {
  describe('create time: the upstream URL', () => {
    it('agrees with the agents API: an internal upstream_url is refused with 400', async () => {
      // The stack allows 127.0.0.1 for the tests' own upstreams; everything else internal is refused.
      const token = await stack().token(`tenant-ssrf-${randomUUID()}`);
      for (const upstream_url of [
        'http://169.254.169.254/',
        'http://[::1]/',
        'http://localhost:8080/',
        'http://10.0.0.1/',
      ]) {
        const { call } = await import('../support/http.ts');
        const res = await call('POST', '/v1/agents', { token, json: { name: `ssrf-${randomUUID()}`, upstream_url } });
        assert.equal(res.status, 400, upstream_url);
      }
    });
  });

  describe('connect time: the resolved address', () => {
    describe('through the upstream client', () => {
      let inside: RawUpstream;
      let client: UpstreamClient;
      before(async () => {
        inside = await rawUpstream((req, res) => void readAll(req).then(() => res.end('inside')));
      });
      afterEach(() => client?.close());
      after(() => inside.close());

      const open = (url: string) =>
        client.open({
          url,
          headers: {},
          body: Buffer.from('x'),
          deadlineMs: 2_000,
          deadlineCoversBody: true,
          resendAllowed: false,
        });

      it('never connects to an internal address a name rebinds to, and connects only to the address it checked', async () => {
        // First lookup public (nothing listens there: the connect fails, but not as blocked); then the inside.
        const dns = rebindingResolver({ 'rebind.test': [['93.184.216.34'], ['127.0.0.1']] });
        client = createUpstreamClient({ allow: [], resolver: dns, connectTimeoutMs: 300, retry: { maxAttempts: 1 } });
        const first = await open(`http://rebind.test:${inside.port}/agent`).catch((e: unknown) => e);
        assert.ok(first instanceof UpstreamError && first.errorClass !== 'blocked', `first: ${String(first)}`);
        const second = await open(`http://rebind.test:${inside.port}/agent`).catch((e: unknown) => e);
        assert.ok(second instanceof UpstreamError);
        assert.equal(second.errorClass, 'blocked');
        assert.equal(second.reached, false);
        assert.ok(!second.message.includes('127.0.0.1'));
        assert.equal(inside.hits.length, 0, 'nothing reached the inside');
        assert.deepEqual(dns.lookups, ['rebind.test', 'rebind.test'], 'resolved once per connection, by the guard');
      });

      it('refuses literal internal addresses at connect time too (e.g. an allow-list narrowed after the agent was created)', async () => {
        client = createUpstreamClient({ allow: [], resolver: rebindingResolver({}) });
        for (const url of [inside.url, `http://[::1]:${inside.port}/`, `http://[::ffff:127.0.0.1]:${inside.port}/`]) {
          const err = await open(url).catch((e: unknown) => e);
          assert.ok(err instanceof UpstreamError && err.errorClass === 'blocked', url);
        }
        assert.equal(inside.hits.length, 0);
      });

      it('connects to an allowed address with the original Host header', async () => {
        client = createUpstreamClient({
          allow: ['127.0.0.1'],
          resolver: rebindingResolver({ 'named.test': [['127.0.0.1']] }),
        });
        const res = await open(`http://named.test:${inside.port}/agent`);
        assert.equal(res.status, 200);
        assert.equal(await res.body.text(), 'inside');
        assert.equal(inside.hits.at(-1)?.headers.host, `named.test:${inside.port}`);
      });
    });
  });

  describe('one HTTP path under an empty allow-list', () => {
    it('answers 502 with a coarse body and records blocked, the inside never reached', async () => {
      const inside = await rawUpstream((req, res) => void readAll(req).then(() => res.end('inside')));
      const dns = rebindingResolver({ 'rebind.test': [['127.0.0.1']] });
      const gateway = await startProxyApp(
        { upstream: { ...stack().config.upstream, allow: [] } },
        { upstream: createUpstreamClient({ allow: [], resolver: dns }) },
      );
      try {
        const token = await stack().token(`tenant-ssrf-http-${randomUUID()}`);
        // A public-looking name passes the create-time check; what it resolves to is judged at connect time.
        const agentId = await createAgent(token, { upstream_url: `http://rebind.test:${inside.port}/agent` });
        const res = await request(`${gateway.url}/v1/proxy/${agentId}/stream`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
          body: 'x',
        });
        const text = await res.body.text();
        assert.equal(res.statusCode, 502);
        assert.deepEqual(JSON.parse(text), { error: 'upstream unreachable' });
        assert.ok(!/127\.0\.0\.1|rebind|\d{4,5}/.test(text));
        const row = await waitForRow(String(res.headers['x-gateway-invocation-id']));
        assert.equal(row.status, 'failed');
        assert.equal(row.errorClass, 'blocked');
        assert.equal(inside.hits.length, 0);
      } finally {
        await gateway.close();
        await inside.close();
      }
    });
  });

  describe('the facilitator client', () => {
    const target = async (url: string) => ({
      facilitatorUrl: url,
      ...(await issueClientCert(await devCa(), `ssrf-facilitator-${randomUUID()}`)),
    });
    const port = () => new URL(stack().facilitator.url).port;
    async function body() {
      const payTo = newPayTo();
      return settleBody(
        await signPayment(await newPayer(10_000n), { payTo, value: 1_000n }),
        requirements(payTo, 1_000n),
      );
    }

    it('never connects to a facilitator whose name resolves to an internal address, unless UPSTREAM_ALLOW names it', async () => {
      const inside = await rawUpstream((_req, res) => void res.end('inside'));
      const dns = rebindingResolver({ 'rebind.test': [['127.0.0.1']] });
      const client = createFacilitatorClient({
        caPem: await readFile(stack().infra.pki.files.ca, 'utf8'),
        timeoutMs: 3_000,
        allow: [],
        resolver: dns,
      });
      try {
        const outcome = await client.settle(await target(`https://rebind.test:${inside.port}/`), await body());
        assert.deepEqual(outcome, { ok: false, error: 'settlement_refused' }, 'known not sent, so known not collected');
        assert.equal(inside.hits.length, 0);
        assert.deepEqual(dns.lookups, ['rebind.test']);
      } finally {
        await client.close();
        await inside.close();
      }
    });

    it('settles through the address it checked, the facilitator exempt by UPSTREAM_ALLOW', async () => {
      const dns = rebindingResolver({ localhost: [['127.0.0.1']] });
      const client = createFacilitatorClient({
        caPem: await readFile(stack().infra.pki.files.ca, 'utf8'),
        timeoutMs: 10_000,
        allow: [`127.0.0.1:${port()}`],
        resolver: dns,
      });
      try {
        const account = await newAccount(`ssrf-facilitator-${randomUUID()}`);
        const outcome = await client.settle(
          { facilitatorUrl: `https://localhost:${port()}/`, ...account.cert },
          await body(),
        );
        assert.equal(outcome.ok, true, JSON.stringify(outcome));
        assert.deepEqual(dns.lookups, ['localhost'], 'resolved by the guard, not by plain DNS');
        await account.client.close();
      } finally {
        await client.close();
      }
    });
  });
  describe('the budget alert webhook', () => {
    it('never delivers to a webhook_url whose name resolves to a loopback or private address at delivery time', async () => {
      const inside = await rawUpstream((req, res) => void readAll(req).then(() => res.end()), '/hook');
      const token = await stack().token(`tenant-ssrf-webhook-${randomUUID()}`);
      try {
        // A public-looking name passes the create-time check; what it resolves to is judged when the alert is sent.
        const created = await call('POST', '/v1/budgets', {
          token,
          json: {
            name: `ssrf-${randomUUID()}`,
            limit: { calls: 10 },
            window: 'day',
            mode: 'soft',
            alerts: { thresholds: [0.5], webhook_url: `http://rebind.test:${inside.port}/hook` },
          },
        });
        assert.equal(created.status, 201, created.text);
        const alert = {
          budgetId: created.json.id,
          windowStartMs: Date.parse(created.json.window_start),
          threshold: 0.5,
        };
        const deliverThrough = (resolver: ReturnType<typeof rebindingResolver>, allow: string[]) => {
          const dispatcher = createUpstreamDispatcher({ allow, resolver });
          const activities = createBudgetAlertActivities({
            orm: stack().orm,
            keyring: stack().config.vault.keyring,
            dispatcher,
            timeoutMs: 2_000,
          });
          return activities.deliverBudgetAlert(alert).finally(() => dispatcher.close());
        };

        for (const address of ['127.0.0.1', '10.0.0.1', '::1']) {
          const dns = rebindingResolver({ 'rebind.test': [[address]] });
          const refused = await deliverThrough(dns, []).catch((err: unknown) => err as Error & { type?: string });
          assert.ok(refused instanceof Error, `${address}: not delivered`);
          assert.equal(refused.type, 'AlertNotDelivered', `${address}: a failure the workflow retries`);
          assert.ok(!refused.message.includes(address), 'the address is not named');
          assert.deepEqual(dns.lookups, ['rebind.test'], 'resolved by the guard');
        }
        assert.equal(inside.hits.length, 0, 'nothing reached the inside');

        // The same delivery to an allowed address arrives: the refusals above were the guard's.
        const allowed = await deliverThrough(rebindingResolver({ 'rebind.test': [['127.0.0.1']] }), ['127.0.0.1']);
        assert.deepEqual(allowed, { outcome: 'delivered', status: 200 });
        assert.equal(inside.hits.length, 1);
      } finally {
        await inside.close();
      }
    });
  });
});
