// The gateway's side of x402 `upto` before the call (docs/SETTLEMENT.md, "The upto scheme"): the
// challenge names the facilitator address the tenant's facilitator lists in /supported, read
// through the facilitator client over mutual TLS and cached; the gate verifies what the
// unmodified @x402/evm upto client signs for that challenge (an approved payer, and a payer
// without allowance whose payment carries the EIP-2612 sponsoring permit), and refuses on the
// chain's word: a balance below the maximum, a Permit2 nonce already used, an allowance revoked
// without a permit; a node that does not answer refuses too (fail closed). The facilitator client
// then charges a verified payment: exactly the charge moves, and a zero charge moves nothing and
// is a success. Real parts: the stack's anvil (Permit2 and the upto proxy at their canonical
// addresses), a facilitator of the test's own over mutual TLS.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { MaxUint256, parseEther, type Wallet } from 'ethers';
import { PERMIT2_ADDRESS } from '../../contracts/permit2.ts';
import { tokenContract } from '../../contracts/token.ts';
import { fund } from '../../scripts/dev/chain.ts';
import { encodeBase64Json } from '../../x402/schemas.ts';
import { loadPaymentConfig, type PaymentConfig } from '../../gateway/payment/config.ts';
import { decodeOffer, paymentRequiredV2, type DecodedOffer } from '../../gateway/payment/dialect.ts';
import { createFacilitatorClient, type FacilitatorClient } from '../../gateway/payment/facilitator-client.ts';
import { priceOf } from '../../gateway/payment/pricing.ts';
import { challengeEntries } from '../../gateway/payment/schemes/index.ts';
import { createSupportedKinds, type SupportedKind } from '../../gateway/payment/supported.ts';
import { stack } from '../support/stack.ts';
import { withOwnFacilitator, type OwnFacilitator } from '../support/settling.ts';
import { payUptoChallenge, rpcReader } from '../support/upto.ts';
import { balanceOf, newPayTo, newPayer } from '../support/x402.ts';

const MAX = 5_000_000n;
const RESOURCE = 'https://gateway.test/v1/proxy/agt_upto';

describe('gateway: upto challenge and verification before the call', function () {
  this.timeout(120_000);
  let own: OwnFacilitator;
  withOwnFacilitator('upto-gateway-verify', {}, (o) => (own = o));

  let client: FacilitatorClient;
  let config: PaymentConfig;
  let target: { facilitatorUrl: string; certPem: string; keyPem: string };
  let kinds: ReturnType<typeof createSupportedKinds<typeof target>>;
  let reads = 0;

  const token = () => stack().infra.tokenAddress;

  before(async () => {
    const facilitatorUrl = new URL(own.facilitator.url);
    client = createFacilitatorClient({
      caPem: await readFile(stack().infra.pki.files.ca, 'utf8'),
      timeoutMs: 30_000,
      allow: [facilitatorUrl.host],
    });
    target = { facilitatorUrl: own.facilitator.url, ...own.gateway.cert };
    kinds = createSupportedKinds((t: typeof target) => {
      reads++;
      return client.supported(t);
    });
    config = loadPaymentConfig({
      TOKEN_ADDRESS: token(),
      CHAIN_RPC_URL: stack().infra.chainRpcUrl,
      X402_MAX_TIMEOUT_SECONDS: '300',
    });
  });
  after(async () => {
    await client?.close();
  });

  /** The agent's price: upto, `MAX` at most, to `payTo`. */
  const uptoPrice = (payTo: string) =>
    priceOf({
      agent: {
        name: 'metered',
        protocol: 'http',
        pricing: {
          amount: String(MAX),
          asset: 'USDC',
          network: 'base',
          pay_to: payTo,
          scheme: 'upto',
          meter: { kind: 'header', header: 'x-charge' },
        },
      },
      mcp: null,
    })!;

  /** A payer holding `usdc`; `approved`: it approved Permit2 itself (with ETH for that). */
  async function uptoPayer(approved: boolean, usdc = 10_000_000n): Promise<Wallet> {
    const payer = await newPayer(usdc);
    if (!approved) return payer;
    await fund(stack().infra.chainRpcUrl, token(), payer.address, { eth: parseEther('1') });
    await (await tokenContract(token(), payer.connect(own.provider)).approve(PERMIT2_ADDRESS, MaxUint256)).wait();
    return payer;
  }

  /** What the unmodified client signs for the gate's 402 (the facilitator read through the cache), as the gate decodes it. */
  async function paid(payer: Wallet, payTo: string, opts: { reader?: boolean } = {}): Promise<DecodedOffer> {
    const entries = challengeEntries(config, uptoPrice(payTo), RESOURCE, await kinds.of(target));
    const required = JSON.parse(JSON.stringify(paymentRequiredV2(config, entries, 'payment required')));
    const reader = opts.reader ? rpcReader(stack().infra.chainRpcUrl) : undefined;
    const { wire } = await payUptoChallenge(payer.privateKey, required, reader);
    const decoded = decodeOffer(config, { dialect: 'v2', header: encodeBase64Json(wire) }, entries);
    assert.ok(decoded);
    return decoded;
  }
  const verify = (decoded: DecodedOffer, at: PaymentConfig = config) =>
    decoded.scheme.verify(at, decoded.payment, decoded.requirements);

  it('names the facilitator address its /supported lists, read once through the cache', async () => {
    const first = await kinds.of(target);
    const upto = first?.find((kind: SupportedKind) => kind.scheme === 'upto');
    assert.deepEqual(upto?.extra, { facilitatorAddress: own.facilitator.gasWallet });
    const [entry] = challengeEntries(config, uptoPrice(newPayTo()), RESOURCE, await kinds.of(target));
    assert.equal(entry.extra.facilitatorAddress, own.facilitator.gasWallet);
    assert.equal(entry.maxAmountRequired, String(MAX));
    assert.equal(await kinds.of(target), first, 'the cached kinds');
    assert.equal(reads, 1);
  });

  it('verifies an approved payer’s payment; after it is charged through the client, its nonce is used', async () => {
    const payer = await uptoPayer(true);
    const payTo = newPayTo();
    const decoded = await paid(payer, payTo);
    const verified = await verify(decoded);
    assert.ok(verified.ok, verified.ok ? '' : verified.cause);
    assert.equal(verified.payer, payer.address);
    assert.match(verified.nonce, /^upto-0x[0-9a-f]{64}$/);

    const before = await balanceOf(own.provider, payer.address);
    const charged = await client.settleCharge(target, decoded.payment, {
      requirements: decoded.requirements,
      amount: 1_234_567n,
    });
    assert.ok(charged.ok, JSON.stringify(charged));
    assert.match(charged.transaction, /^0x[0-9a-f]{64}$/);
    assert.equal(charged.payer, payer.address);
    assert.equal(await balanceOf(own.provider, payTo), 1_234_567n);
    assert.equal(await balanceOf(own.provider, payer.address), before - 1_234_567n);

    assert.deepEqual(await verify(decoded), { ok: false, cause: 'nonce_used' });
  });

  it('verifies a payer without allowance whose payment carries the sponsoring permit, and charges it', async () => {
    const payer = await uptoPayer(false);
    const payTo = newPayTo();
    const decoded = await paid(payer, payTo, { reader: true });
    assert.ok(decoded.payment.extensions?.eip2612GasSponsoring, 'the client signed a permit');
    const verified = await verify(decoded);
    assert.ok(verified.ok, verified.ok ? '' : verified.cause);

    const charged = await client.settleCharge(target, decoded.payment, {
      requirements: decoded.requirements,
      amount: 2_000_000n,
    });
    assert.ok(charged.ok, JSON.stringify(charged));
    assert.equal(await balanceOf(own.provider, payTo), 2_000_000n);
    assert.equal(await balanceOf(own.provider, payer.address), 8_000_000n);
  });

  it('a zero charge is a success with no transaction, and moves nothing', async () => {
    const payer = await uptoPayer(true);
    const payTo = newPayTo();
    const decoded = await paid(payer, payTo);
    assert.ok((await verify(decoded)).ok);
    const before = await balanceOf(own.provider, payer.address);
    const charged = await client.settleCharge(target, decoded.payment, {
      requirements: decoded.requirements,
      amount: 0n,
    });
    assert.deepEqual(charged, { ok: true, transaction: '', network: 'base', payer: payer.address });
    assert.equal(await balanceOf(own.provider, payer.address), before);
    assert.equal(await balanceOf(own.provider, payTo), 0n);
  });

  it('refuses a payer whose balance is below the maximum', async () => {
    const payer = await uptoPayer(true, MAX - 1n);
    const decoded = await paid(payer, newPayTo());
    assert.deepEqual(await verify(decoded), { ok: false, cause: 'insufficient_balance' });
  });

  it('refuses a payer that revoked its allowance and sent no permit', async () => {
    const payer = await uptoPayer(true);
    const decoded = await paid(payer, newPayTo());
    assert.ok((await verify(decoded)).ok);
    await (await tokenContract(token(), payer.connect(own.provider)).approve(PERMIT2_ADDRESS, 0n)).wait();
    assert.deepEqual(await verify(decoded), { ok: false, cause: 'permit2_allowance_required' });
  });

  it('refuses when the node does not answer (fail closed)', async () => {
    const payer = await uptoPayer(true);
    const decoded = await paid(payer, newPayTo());
    // A node that takes the request and never answers.
    const silent: Server = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const rpcUrl = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
      const down = { ...config, contractSignatures: { rpcUrl, timeoutMs: 300 } };
      assert.deepEqual(await verify(decoded, down), { ok: false, cause: 'chain_check_unavailable' });
    } finally {
      silent.closeAllConnections();
      await new Promise((resolve) => silent.close(resolve));
    }
  });
});
