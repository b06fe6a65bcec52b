// A payer is never asked to sign again while its payment can still land. With mining paused on
// anvil, a paid call whose transfer is broadcast but not mined answers 503 "still settling"
// (never 402, which makes an x402 client sign a second authorization), and the same payment
// header resumes it:
// - the facilitator's answer is late (the gateway's deadline is shorter than the inclusion
//   wait): once mining resumes, the same header gets the call, charged once;
// - the transfer is still unmined at the facilitator's inclusion timeout: it is replaced by a
//   cancel at its gas nonce; once the cancel is mined too close to the authorization's
//   validBefore for the transfer to be submitted again (settlement-front-run.test.ts has the
//   re-submission) and the chain is past validBefore, the same header gets 402 (nothing was
//   collected, and nothing can be), and a fresh authorization then pays.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { stack } from '../support/stack.ts';
import { callAt, uniqueName } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { pastValidBefore, startFacilitatorStack, until, type FacilitatorStack } from '../support/facilitator.ts';
import {
  balanceOf,
  chainProvider,
  encodePayment,
  newAccount,
  newPayTo,
  newPayer,
  signPayment,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import type { GatewayConfig } from '../../gateway/config.ts';

describe('payer: a payment that can still land is never a 402', function () {
  this.timeout(120_000);
  const PRICE = 4_000n;
  let provider: ReturnType<typeof chainProvider>;
  let upstream: TestUpstream;
  let account: TestAccount;
  let facilitator: FacilitatorStack;
  let server: Server;
  let url: string;
  let token: string;

  before(async () => {
    provider = chainProvider();
    upstream = await startUpstream();
    account = await newAccount(`settling-${randomUUID()}`);
    facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
      overrides: {
        FACILITATOR_TASK_QUEUE: 'facilitator-payer-settling',
        FACILITATOR_SETTLE_DEADLINE_MS: '12000',
        FACILITATOR_INCLUSION_TIMEOUT_MS: '8000',
        // A payment 30 s from its validBefore is accepted, and its cancel, mined some 12 s later
        // (the settle deadline), leaves more than this margin but less than the margin plus an
        // inclusion timeout (20 s): a transfer submitted again could stall as long and land after
        // validBefore, so it is not submitted again.
        FACILITATOR_VALIDITY_MARGIN_S: '12',
      },
    });
    // A gateway whose wait for the facilitator (1.5 s) ends before the facilitator's inclusion wait.
    const config: GatewayConfig = {
      ...stack().config,
      port: 0,
      payment: { ...stack().config.payment, settlementTimeoutMs: 1_500 },
    };
    server = await startGateway(config, stack().orm, stack().temporal, createLogger('api', 'silent'));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const tenant = `payer-settling-${randomUUID()}`;
    token = await stack().token(tenant);
    const credential = await callAt(url, 'POST', '/v1/credentials', {
      token,
      json: {
        name: 'facilitator-client',
        auth_type: 'none',
        source: 'managed',
        plaintext: `${account.cert.certPem}\n${account.cert.keyPem}`,
      },
    });
    assert.equal(credential.status, 201, credential.text);
    const settlement = await callAt(url, 'PUT', '/v1/settlement/config', {
      token,
      json: { facilitator_url: facilitator.url, facilitator_credential_ref: credential.json.id },
    });
    assert.equal(settlement.status, 201, settlement.text);
  });
  after(async () => {
    await provider.send('evm_setAutomine', [true]).catch(() => undefined);
    await new Promise((resolve) => server.close(resolve));
    await facilitator.close();
    await upstream.close();
    await account.client.close();
    provider.destroy();
  });

  async function pricedAgent(): Promise<{ id: string; payTo: string }> {
    const payTo = newPayTo();
    const created = await callAt(url, 'POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('settling'),
        upstream_url: upstream.url,
        pricing: { amount: String(PRICE), asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(created.status, 201, created.text);
    return { id: created.json.id, payTo };
  }
  const paidCall = (agentId: string, header: string) =>
    callAt(url, 'POST', `/v1/proxy/${agentId}`, {
      token,
      body: 'x',
      headers: { 'content-type': 'text/plain', 'x-payment': header },
    });
  const keyOf = (payer: string, nonce: string) => settlementKey(8453, stack().infra.tokenAddress, payer, nonce);

  function assertStillSettling(res: Awaited<ReturnType<typeof paidCall>>): void {
    assert.equal(res.status, 503, res.text);
    assert.deepEqual(res.json, { error: 'payment is still settling; retry with the same payment header' });
    assert.ok(Number(res.headers['retry-after']) > 0);
  }

  it('a late answer is a 503, and the same header gets the call once the transfer is mined, charged once', async () => {
    const agent = await pricedAgent();
    const payer = await newPayer(100_000n);
    const payment = await signPayment(payer, { payTo: agent.payTo, value: PRICE });
    const header = encodePayment(payment);
    const key = keyOf(payer.address, payment.payload.authorization.nonce);
    const before = upstream.received.length;

    await provider.send('evm_setAutomine', [false]);
    assertStillSettling(await paidCall(agent.id, header));
    assertStillSettling(await paidCall(agent.id, header));
    const broadcast = await findSettlement(facilitator.pool, key);
    assert.ok(broadcast?.txHash, 'the transfer is out, not yet mined');

    await provider.send('evm_mine', []);
    await provider.send('evm_setAutomine', [true]);
    const res = await until('the resumed call', async () => {
      const r = await paidCall(agent.id, header);
      return r.status === 503 ? null : r;
    });
    assert.equal(res.status, 202, res.text);
    const receipt = JSON.parse(Buffer.from(String(res.headers['x-payment-response']), 'base64').toString('utf8')) as {
      success: boolean;
      transaction: string;
    };
    assert.equal(receipt.transaction, broadcast.txHash);
    await until('the call', async () => (upstream.received.length > before ? true : null));
    assert.equal(upstream.received.length, before + 1, 'the upstream was called once');
    assert.deepEqual(await transfersTo(provider, agent.payTo), [{ hash: broadcast.txHash, value: PRICE }]);
    assert.equal((await paidCall(agent.id, header)).status, 402, 'the payment bought one call');
  });

  it('a transfer cancelled after the inclusion timeout: 503 until the authorization can no longer land, then 402 for that header, and nothing collected', async () => {
    const agent = await pricedAgent();
    const payer = await newPayer(100_000n);
    const validBefore = Math.floor(Date.now() / 1000) + 30;
    const payment = await signPayment(payer, { payTo: agent.payTo, value: PRICE, validBefore });
    const header = encodePayment(payment);
    const key = keyOf(payer.address, payment.payload.authorization.nonce);
    const balanceBefore = await balanceOf(provider, payer.address);
    const before = upstream.received.length;

    await provider.send('evm_setAutomine', [false]);
    // Until the facilitator has given up on the transfer and sent its cancel, every answer is 503.
    await until('the cancel', async () => {
      assertStillSettling(await paidCall(agent.id, header));
      const record = await findSettlement(facilitator.pool, key);
      return record?.status === 'pending' ? record : null;
    });
    assertStillSettling(await paidCall(agent.id, header));

    await provider.send('evm_mine', []);
    await provider.send('evm_setAutomine', [true]);
    // The cancel is mined; the authorization could still be submitted by anyone until validBefore.
    assertStillSettling(await paidCall(agent.id, header));
    // The chain's clock, the one that decides whether the authorization can still land, is moved
    // past validBefore (and back after): the facilitator makes the failure final.
    const refused = await pastValidBefore(provider, validBefore + 1, async () => {
      await until('the cancel recorded', async () =>
        (await findSettlement(facilitator.pool, key))?.status === 'failed' ? true : null,
      );
      return paidCall(agent.id, header);
    });
    assert.equal(refused.status, 402, refused.text);
    assert.equal(refused.headers['x-payment-response'], undefined);
    assert.equal(await balanceOf(provider, payer.address), balanceBefore, 'nothing was collected');
    assert.deepEqual(await transfersTo(provider, agent.payTo), []);
    assert.equal(upstream.received.length, before, 'no call without the payment');

    const fresh = await paidCall(
      agent.id,
      encodePayment(await signPayment(payer, { payTo: agent.payTo, value: PRICE })),
    );
    assert.equal(fresh.status, 202, fresh.text);
    assert.equal(await balanceOf(provider, payer.address), balanceBefore - PRICE, 'charged once, for the call it got');
  });
});
