// The tenant's facilitator target as the upto challenge reads it (gateway/payment/targets.ts):
// read once per tenant and kept, until a write to the tenant's settlement configuration or to
// one of its credentials notifies the change feed (Migration20261206130000_settlement_cache_notify)
// on every replica, whatever wrote it. Through the API: a public upto agent's challenge follows
// its tenant's settlement configuration as soon as the change is applied (a facilitator that
// cannot be read: 503; back to the stack's: the upto 402 again).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { closedPort } from '../support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { newAccount, newPayTo, settlingTenant, type TestAccount } from '../support/x402.ts';
import { createFacilitatorTargets } from '../../gateway/payment/targets.ts';
import { loadSettlementClientTls } from '../../gateway/settlement/tls.ts';

describe('the tenant facilitator target of the upto challenge, kept until its settlement changes', function () {
  this.timeout(120_000);
  let account: TestAccount;
  let tenant: string;
  let token: string;
  let upstream: TestUpstream;
  before(async () => {
    upstream = await startUpstream();
    account = await newAccount(`targets-${randomUUID()}`);
    tenant = `tenant-targets-${randomUUID()}`;
    token = await settlingTenant(tenant, account);
  });
  after(async () => {
    await upstream.close();
    await account.client.close();
  });

  const deps = () => ({ orm: stack().orm, config: stack().config, vaultClient: stack().vaultClient });
  const sql = (query: string, params: unknown[]) => stack().orm.em.fork().getConnection().execute(query, params);

  it('is read once per tenant, and again after a write to its settlement configuration or a credential', async () => {
    const reads: string[] = [];
    const targets = createFacilitatorTargets(stack().feed, (d, tenantId) => {
      reads.push(tenantId);
      return loadSettlementClientTls(d, tenantId);
    });
    // The tenant's own setup wrote its configuration and credential: their notifications are
    // applied first, so none of them drops what the reads below keep.
    await stack().feed.sync();
    const first = await targets.of(deps(), tenant);
    assert.equal(first?.facilitatorUrl, stack().facilitator.url);
    assert.deepEqual(await targets.of(deps(), tenant), first);
    assert.equal(await targets.of(deps(), `tenant-none-${randomUUID()}`), null, 'no settlement configured');
    assert.equal(await targets.of(deps(), `tenant-none-${randomUUID()}`), null);
    assert.equal(reads.filter((t) => t === tenant).length, 1, 'kept');

    // A write by SQL notifies as one through the API does; applied here once the feed has caught up.
    await sql('update settlement_configs set updated_at = now() where tenant_id = ?', [tenant]);
    await stack().feed.sync();
    await targets.of(deps(), tenant);
    assert.equal(reads.filter((t) => t === tenant).length, 2, 'read again after the configuration changed');

    await sql('update credentials set updated_at = now() where tenant_id = ?', [tenant]);
    await stack().feed.sync();
    await targets.of(deps(), tenant);
    assert.equal(reads.filter((t) => t === tenant).length, 3, 'read again after a credential changed');

    // Another tenant's write leaves it kept.
    await sql('update credentials set updated_at = now() where tenant_id = ?', [`tenant-other-${randomUUID()}`]);
    await stack().feed.sync();
    await targets.of(deps(), tenant);
    assert.equal(reads.filter((t) => t === tenant).length, 3);
  });

  it("a public upto agent's challenge follows its tenant's settlement configuration once the change is applied", async () => {
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('targets'),
        upstream_url: upstream.url,
        public: true,
        pricing: {
          amount: '5000',
          asset: 'USDC',
          network: 'base',
          pay_to: newPayTo(),
          scheme: 'upto',
          meter: { kind: 'header', header: 'X-Usage-Cost' },
        },
      },
    });
    assert.equal(created.status, 201, created.text);
    const path = new URL(created.json.public_url as string).pathname;
    const unpaid = () => call('POST', path, { json: {} });
    const setFacilitator = async (facilitatorUrl: string) => {
      const config = (await call('GET', '/v1/settlement/config', { token })).json;
      const res = await call('PUT', '/v1/settlement/config', {
        token,
        json: { facilitator_url: facilitatorUrl, facilitator_credential_ref: config.facilitator_credential_ref },
      });
      assert.ok(res.status < 300, res.text);
      await stack().feed.sync();
    };

    assert.equal((await unpaid()).status, 402);
    await setFacilitator(`https://127.0.0.1:${await closedPort()}`);
    const unavailable = await unpaid();
    assert.equal(unavailable.status, 503, unavailable.text);
    await setFacilitator(stack().facilitator.url);
    const again = await unpaid();
    assert.equal(again.status, 402, again.text);
    assert.equal(again.json.accepts[0].scheme, 'upto');
  });
});
