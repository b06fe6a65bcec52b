// A payer is charged only for a call it gets: every check that can still refuse a paid call runs
// before the payment is settled. Each case sends a valid payment that the facilitator would
// collect, and the refusal leaves the payee's balance on chain untouched.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { stack } from '../support/stack.ts';
import { call, callAt, uniqueName } from '../support/http.ts';
import { tenantVaultRef } from '../support/catalog.ts';
import { closedPort, startProxyApp } from '../support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import {
  balanceOf,
  chainProvider,
  encodePayment,
  newAccount,
  newPayTo,
  newPayer,
  signPayment,
  type TestAccount,
} from '../support/x402.ts';
import { connectClient } from '../../temporal/client.ts';
import { startTemporalDevServer } from '../../scripts/dev/temporal-dev-server.ts';
import { ensureTool } from '../../scripts/lib/tools.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import type { GatewayConfig } from '../../gateway/config.ts';

describe('payer: refused calls are never charged', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let upstream: TestUpstream;
  let account: TestAccount;
  let token: string;
  const tenant = `payer-refusals-${randomUUID()}`;

  before(async () => {
    provider = chainProvider();
    upstream = await startUpstream();
    account = await newAccount(`refusals-${randomUUID()}`);
    token = await stack().token(tenant);
    const credential = await call('POST', '/v1/credentials', {
      token,
      json: {
        name: 'facilitator-client',
        auth_type: 'none',
        source: 'managed',
        plaintext: `${account.cert.certPem}\n${account.cert.keyPem}`,
      },
    });
    assert.equal(credential.status, 201, credential.text);
    const config = await call('PUT', '/v1/settlement/config', {
      token,
      json: { facilitator_url: stack().facilitator.url, facilitator_credential_ref: credential.json.id },
    });
    assert.equal(config.status, 201, config.text);
  });
  after(async () => {
    await upstream.close();
    await account.client.close();
    provider.destroy();
  });

  async function pricedAgent(fields: Record<string, unknown> = {}): Promise<{ id: string; payTo: string }> {
    const payTo = newPayTo();
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('paid'),
        upstream_url: upstream.url,
        pricing: { amount: '4000', asset: 'USDC', network: 'base', pay_to: payTo },
        ...fields,
      },
    });
    assert.equal(created.status, 201, created.text);
    return { id: created.json.id, payTo };
  }
  async function header(payTo: string): Promise<string> {
    return encodePayment(await signPayment(await newPayer(100_000n), { payTo, value: 4_000n }));
  }

  it('a credential that cannot be resolved refuses the call before payment, on both endpoints', async () => {
    const missing = await call('POST', '/v1/credentials', {
      token,
      json: {
        name: `gone-${randomUUID()}`,
        auth_type: 'bearer',
        source: 'vault',
        vault_ref: tenantVaultRef(tenant, `nothing-here-${randomUUID()}`, 'token'),
      },
    });
    assert.equal(missing.status, 201, missing.text);
    for (const path of ['', '/stream']) {
      const agent = await pricedAgent({ credential_ref: missing.json.id });
      const res = await call('POST', `/v1/proxy/${agent.id}${path}`, {
        token,
        body: 'x',
        headers: { 'content-type': 'text/plain', 'x-payment': await header(agent.payTo) },
      });
      assert.equal(res.status, 502, `${path}: ${res.status} ${res.text}`);
      assert.equal(await balanceOf(provider, agent.payTo), 0n, `${path}: nothing collected`);
    }
    assert.equal(upstream.received.length, 0);
  });

  it('an upstream address the SSRF guard no longer admits refuses the call before payment, on both endpoints', async () => {
    const agent = await pricedAgent();
    // An API whose allow-list has narrowed since the agent was created to the facilitator alone:
    // the agent's loopback upstream is blocked, the payment could still be collected.
    const allow = [new URL(stack().facilitator.url).host];
    const narrowed = await startProxyApp({ upstream: { ...stack().config.upstream, allow } });
    try {
      for (const path of ['', '/stream']) {
        const res = await callAt(narrowed.url, 'POST', `/v1/proxy/${agent.id}${path}`, {
          token,
          body: 'x',
          headers: { 'content-type': 'text/plain', 'x-payment': await header(agent.payTo) },
        });
        assert.equal(res.status, 502, `${path}: ${res.status} ${res.text}`);
        assert.deepEqual(res.json, { error: 'upstream unreachable' });
        assert.equal(res.headers['x-payment-response'], undefined);
        assert.equal(await balanceOf(provider, agent.payTo), 0n, `${path}: nothing collected`);
      }
    } finally {
      await narrowed.close();
    }
  });

  it('a streaming call settled and then failed upstream still tells the payer its transaction (X-PAYMENT-RESPONSE)', async () => {
    const agent = await pricedAgent({ upstream_url: `http://127.0.0.1:${await closedPort()}/agent` });
    const res = await call('POST', `/v1/proxy/${agent.id}/stream`, {
      token,
      body: 'x',
      headers: { 'content-type': 'text/plain', 'x-payment': await header(agent.payTo) },
    });
    assert.equal(res.status, 502, res.text);
    const receipt = JSON.parse(Buffer.from(String(res.headers['x-payment-response']), 'base64').toString('utf8')) as {
      success: boolean;
      transaction: string;
    };
    assert.equal(receipt.success, true);
    assert.match(receipt.transaction, /^0x[0-9a-f]{64}$/);
    assert.equal(await balanceOf(provider, agent.payTo), 4_000n, 'collected once, and the payer can see where');
  });

  it('while Temporal is away a paid call is accepted into the start backlog, and one past its bound is refused (503) before payment', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-payer-outage-'));
    const dev = await startTemporalDevServer({
      binary: ensureTool('temporal'),
      dbFile: join(dir, 'temporal.db'),
      port: await freePort(),
      namespace: stack().config.temporal.namespace,
    });
    const temporal = await connectClient(dev.address, stack().config.temporal.namespace);
    const config: GatewayConfig = {
      ...stack().config,
      port: 0,
      temporal: { ...stack().config.temporal, address: dev.address },
      startBacklog: { process: 1, tenant: 1 },
    };
    const server: Server = await startGateway(config, stack().orm, temporal, createLogger('api', 'silent'));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const agent = await pricedAgent();
      await dev.stop();
      // The first call is accepted and paid (its row commits; its start waits for Temporal) and
      // holds the backlog's one place.
      const first = await pricedAgent();
      const kept = await callAt(url, 'POST', `/v1/proxy/${first.id}`, {
        token,
        body: 'x',
        headers: { 'content-type': 'text/plain', 'x-payment': await header(first.payTo) },
      });
      assert.equal(kept.status, 202, kept.text);
      assert.ok(kept.headers['x-payment-response']);
      assert.equal(await balanceOf(provider, first.payTo), 4_000n, 'the accepted call is paid');
      const res = await callAt(url, 'POST', `/v1/proxy/${agent.id}`, {
        token,
        body: 'x',
        headers: { 'content-type': 'text/plain', 'x-payment': await header(agent.payTo) },
      });
      assert.equal(res.status, 503, res.text);
      assert.deepEqual(res.json, { error: 'service temporarily unavailable' });
      assert.equal(res.headers['retry-after'], '1');
      assert.equal(await balanceOf(provider, agent.payTo), 0n, 'nothing collected for the refused call');
      await stack().orm.em.getConnection().execute('delete from invocations where id = ?', [kept.json.invocation_id]);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      // The start cut off at its deadline keeps SDK retries pending for up to ~20 s, which throw
      // on a closed channel: the connection is closed only once they have run out, in the background.
      setTimeout(() => void temporal.connection.close().catch(() => undefined), 25_000).unref();
      await dev.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
