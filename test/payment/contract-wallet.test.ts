// Contract-wallet (ERC-1271) payers on the real stack: a SmartWallet (contracts/SmartWallet.sol,
// one owner key) pays a priced agent through the gateway and the facilitator. The gateway asks
// the wallet (isValidSignature, an eth_call) instead of recovering the signer; the facilitator
// submits through the token's `bytes signature` overload, which asks the wallet the same
// question on chain. Balances move exactly once. A signature the wallet refuses is a coarse 402
// at the gate and `settlement_failed` at the facilitator, with nothing on chain; a node that
// does not answer in time fails closed at the gate.
import assert from 'node:assert/strict';
import { randomUUID, randomBytes } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { AbiCoder, Wallet, getAddress, hexlify } from 'ethers';
import { stack } from '../support/stack.ts';
import { call, waitForInvocation, uniqueName } from '../support/http.ts';
import { waitFor } from '../support/wait.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import {
  balanceOf,
  chainProvider,
  domain,
  encodePayment,
  newAccount,
  newPayTo,
  requirements,
  settleBody,
  settlingTenant,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';
import { deploySmartWallet, fund, tokenContract } from '../../scripts/dev/chain.ts';
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from '../../x402/schemes/exact/eip3009.ts';
import type { ExactPayment as Payment } from '../../x402/schemes/exact/schemas.ts';
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';
import { finalRecord } from '../support/facilitator.ts';
import { verifyGatePayment } from '../../gateway/payment/schemes/exact/verify.ts';

const BYTES_OVERLOAD = tokenContract(getAddress('0x' + '11'.repeat(20)), null).interface.getFunction(
  'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)',
)!.selector;

/** An authorization `from` the wallet, signed by `signer` (the wallet's owner, or not), in the wallet's 65-byte or wrapped format. */
async function walletPayment(
  wallet: string,
  signer: Wallet,
  terms: { payTo: string; value: bigint },
  format: 'plain' | 'wrapped' = 'plain',
): Promise<Payment> {
  const now = Math.floor(Date.now() / 1000);
  const authorization = {
    from: wallet,
    to: getAddress(terms.payTo),
    value: String(terms.value),
    validAfter: String(now - 600),
    validBefore: String(now + 120),
    nonce: hexlify(randomBytes(32)),
  };
  const ownerSignature = await signer.signTypedData(domain(), TRANSFER_WITH_AUTHORIZATION_TYPES, authorization);
  const signature =
    format === 'plain' ? ownerSignature : AbiCoder.defaultAbiCoder().encode(['bytes'], [ownerSignature]);
  return { x402Version: 1, scheme: 'exact', network: 'base', payload: { signature, authorization } };
}

describe('contract-wallet (ERC-1271) payers', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let upstream: TestUpstream;
  let facilitatorAccount: TestAccount;
  let token: string;
  let owner: Wallet;
  let wallet: string;

  before(async () => {
    provider = chainProvider();
    upstream = await startUpstream();
    owner = new Wallet(hexlify(randomBytes(32)));
    wallet = await deploySmartWallet(stack().infra.chainRpcUrl, owner.address, resolve('.test-data', 'contracts'));
    await fund(stack().infra.chainRpcUrl, stack().infra.tokenAddress, wallet, { usdc: 1_000_000n });
    facilitatorAccount = await newAccount(`contract-wallet-${randomUUID()}`);
    token = await settlingTenant(`tenant-1271-${randomUUID()}`, facilitatorAccount);
  });
  after(async () => {
    await upstream.close();
    await facilitatorAccount.client.close();
    provider.destroy();
  });

  async function pricedAgent(payTo: string, amount: string): Promise<string> {
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('priced-1271'),
        upstream_url: upstream.url,
        capture_body: true,
        pricing: { amount, asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(created.status, 201, created.text);
    return created.json.id;
  }
  const received = (marker: string) => upstream.received.filter((r) => r.body.toString().includes(marker)).length;

  it('a contract wallet pays a priced agent through the gateway and the facilitator: forwarded once, balances moved exactly once, via the bytes overload', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(payTo, '40000');
    const before = await balanceOf(provider, wallet);
    // 65 bytes, like an EOA's signature, but it recovers the owner, not `from`: only ERC-1271 accepts it.
    const payment = await walletPayment(wallet, owner, { payTo, value: 40_000n });
    assert.equal((payment.payload.signature.length - 2) / 2, 65);
    const marker = `1271 ${randomUUID()}`;

    const res = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: marker,
      headers: { 'content-type': 'text/plain', 'x-payment': encodePayment(payment) },
    });
    assert.equal(res.status, 202, res.text);
    const receipt = JSON.parse(Buffer.from(String(res.headers['x-payment-response']), 'base64').toString());
    assert.equal(receipt.success, true);
    assert.equal(getAddress(receipt.payer), wallet);
    const done = await waitForInvocation(token, agentId, res.json.invocation_id);
    assert.equal(done.status, 'succeeded');
    assert.equal(done.payment_payer, wallet);
    assert.equal(received(marker), 1, 'forwarded exactly once');

    assert.equal(await balanceOf(provider, payTo), 40_000n);
    assert.equal(await balanceOf(provider, wallet), before - 40_000n);
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: receipt.transaction, value: 40_000n }]);
    const tx = await provider.getTransaction(receipt.transaction);
    assert.equal(
      tx?.data.slice(0, 10),
      BYTES_OVERLOAD,
      'submitted through transferWithAuthorization(..., bytes signature)',
    );
    const record = await finalRecord(
      stack().facilitator.pool,
      settlementKey(8453, stack().infra.tokenAddress, wallet, payment.payload.authorization.nonce),
    );
    assert.equal(record?.status, 'settled');

    // The same X-PAYMENT again: refused, never forwarded, nothing moves.
    const replay = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body: marker,
      headers: { 'content-type': 'text/plain', 'x-payment': encodePayment(payment) },
    });
    assert.equal(replay.status, 402);
    assert.equal(received(marker), 1);
    assert.equal(await balanceOf(provider, payTo), 40_000n);
  });

  it('settles a wallet signature longer than 65 bytes at the facilitator, once for concurrent copies', async () => {
    const payTo = newPayTo();
    const payment = await walletPayment(wallet, owner, { payTo, value: 15_000n }, 'wrapped');
    const body = settleBody(payment, requirements(payTo, 15_000n));
    const replies = await Promise.all(Array.from({ length: 5 }, () => facilitatorAccount.client.post('/settle', body)));
    for (const reply of replies) {
      assert.equal(reply.status, 200, JSON.stringify(reply.json));
      assert.equal(reply.json.success, true);
      assert.equal(reply.json.transaction, replies[0].json.transaction);
      assert.equal(getAddress(reply.json.payer), wallet);
    }
    assert.deepEqual(await transfersTo(provider, payTo), [{ hash: replies[0].json.transaction, value: 15_000n }]);
  });

  it('refuses what the wallet does not accept: 402 at the gate, settlement_failed at the facilitator, nothing on chain', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(payTo, '10000');
    const stranger = new Wallet(hexlify(randomBytes(32)));
    const marker = `1271-forged ${randomUUID()}`;
    for (const format of ['plain', 'wrapped'] as const) {
      const forged = await walletPayment(wallet, stranger, { payTo, value: 10_000n }, format);
      const res = await call('POST', `/v1/proxy/${agentId}`, {
        token,
        body: marker,
        headers: { 'content-type': 'text/plain', 'x-payment': encodePayment(forged) },
      });
      assert.equal(res.status, 402);
      assert.deepEqual(res.json, { error: 'invalid payment' });
      const settled = await facilitatorAccount.client.post('/settle', settleBody(forged, requirements(payTo, 10_000n)));
      assert.equal(settled.status, 200);
      assert.equal(settled.json.success, false);
      assert.equal(settled.json.errorReason, 'settlement_failed');
      assert.equal(
        await findSettlement(
          stack().facilitator.pool,
          settlementKey(8453, stack().infra.tokenAddress, wallet, forged.payload.authorization.nonce),
        ),
        null,
      );
    }
    assert.equal(received(marker), 0);
    assert.equal(await balanceOf(provider, payTo), 0n);
  });

  describe('the gate without an answering node', () => {
    let silent: Server;
    const sockets = new Set<Socket>();
    const closed = new Set<Socket>();
    before(async () => {
      // A node that accepts connections and never answers.
      silent = createServer((socket) => {
        sockets.add(socket);
        socket.once('close', () => closed.add(socket));
        socket.on('error', () => undefined);
        socket.resume();
      });
      await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    });
    after(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((r) => silent.close(r));
    });

    it('fails closed within the deadline for a contract wallet, and still verifies an EOA without the node', async () => {
      const config = {
        ...stack().config.payment,
        contractSignatures: { rpcUrl: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, timeoutMs: 300 },
      };
      const payTo = newPayTo();
      const reqs = requirements(payTo, 10_000n);
      // A check with a far longer deadline against the same node, started first: the short one
      // must end while it still waits, so it is its own deadline that ended it (the node never
      // answers nor hangs up), not some other bound.
      const longer = { ...config, contractSignatures: { ...config.contractSignatures, timeoutMs: 120_000 } };
      let longerEnded = false;
      const longerCheck = verifyGatePayment(
        longer,
        await walletPayment(wallet, owner, { payTo, value: 10_000n }),
        reqs,
      ).finally(() => (longerEnded = true));
      const [longerSocket] = await waitFor(() => (sockets.size ? [...sockets] : null), {
        what: 'the longer check to reach the node',
      });
      const result = await verifyGatePayment(
        config,
        await walletPayment(wallet, owner, { payTo, value: 10_000n }),
        reqs,
      );
      assert.deepEqual(result, { ok: false, cause: 'signature_check_unavailable' });
      assert.equal(longerEnded, false, 'the check with the longer deadline still waits');
      const [shortSocket] = [...sockets].filter((s) => s !== longerSocket);
      assert.ok(shortSocket, 'the short check reached the node');
      await waitFor(() => closed.has(shortSocket), { what: 'the gate to close its connection at the deadline' });
      assert.equal(closed.has(longerSocket), false);
      // The node hangs up on the other: also a refusal, never a pass.
      longerSocket.destroy();
      assert.deepEqual(await longerCheck, { ok: false, cause: 'signature_check_unavailable' });

      const eoa = new Wallet(hexlify(randomBytes(32)));
      const eoaPayment = await walletPayment(eoa.address, eoa, { payTo, value: 10_000n });
      const verified = await verifyGatePayment(config, eoaPayment, reqs);
      assert.equal(verified.ok, true);
      assert.equal(verified.ok && verified.signer, 'eoa');
    });
  });
});
