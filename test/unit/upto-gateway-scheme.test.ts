// The gateway's `upto` scheme (gateway/payment/schemes/upto/, docs/SETTLEMENT.md "The upto
// scheme"): the registry offers the entry of the price's scheme (exact challenges unchanged); the
// upto entry names the maximum and the tenant facilitator's address, its 402 declares
// eip2612GasSponsoring, and the unmodified @x402/evm upto client pays it; the gate's verification
// refuses a payment for another facilitator or payee, below the maximum, expired or tampered, and
// asks the chain (a stand-in JSON-RPC node here) for the nonce, the balance and the allowance,
// failing closed when the node does not answer. The facilitator kinds are cached per facilitator.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Interface, Wallet, getAddress } from 'ethers';
import { PERMIT2_ABI } from '../../contracts/permit2.ts';
import { TOKEN_ABI } from '../../contracts/token.ts';
import { encodeBase64Json, type ChallengeEntry } from '../../x402/schemas.ts';
import { EIP2612_GAS_SPONSORING } from '../../x402/schemes/upto/schemas.ts';
import { UPTO_PROXY_ADDRESS } from '../../x402/schemes/upto/typed-data.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';
import { decodeOffer, paymentRequiredV2, type DecodedOffer } from '../../gateway/payment/dialect.ts';
import { priceOf } from '../../gateway/payment/pricing.ts';
import { PaymentUnavailable } from '../../gateway/payment/unavailable.ts';
import { challengeEntries, gatewayScheme } from '../../gateway/payment/schemes/index.ts';
import { createSupportedKinds, type SupportedKind } from '../../gateway/payment/supported.ts';
import { payUptoChallenge } from '../support/upto.ts';

const TOKEN = getAddress('0x5fbdb2315678afecb367f032d93f642f64180aa3');
const DOMAIN = { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: TOKEN };
const payer = new Wallet('0x' + '11'.repeat(32));
const payTo = getAddress('0x' + '22'.repeat(20));
const FACILITATOR = getAddress('0x' + '33'.repeat(20));
const RESOURCE = 'https://gateway.test/v1/proxy/agt_x';
const MAX = 5_000_000n;

const KINDS: SupportedKind[] = [
  { x402Version: 1, scheme: 'exact', network: 'base', asset: TOKEN },
  { x402Version: 2, scheme: 'upto', network: 'eip155:8453', asset: TOKEN, extra: { facilitatorAddress: FACILITATOR } },
];

const configAt = (rpcUrl: string) =>
  ({
    network: 'base',
    domain: DOMAIN,
    maxTimeoutSeconds: 60,
    validityMarginSeconds: 6,
    contractSignatures: { rpcUrl, timeoutMs: 500 },
    chargedAfterCall: { timeoutSeconds: 3600, minWindowSeconds: 900 },
  }) as PaymentConfig;

const pricing = { amount: String(MAX), asset: 'USDC' as const, network: 'base' as const, pay_to: payTo.toLowerCase() };
const exactPrice = priceOf({ agent: { name: 'a', protocol: 'http', pricing }, mcp: null })!;
const uptoPrice = priceOf({
  agent: {
    name: 'a',
    protocol: 'http',
    pricing: { ...pricing, scheme: 'upto', meter: { kind: 'header', header: 'x-charge' } },
  },
  mcp: null,
})!;

/** A JSON-RPC node answering the gate's three reads from `state`; `silent`: it never answers. */
function standInNode(state: { used: boolean; balance: bigint; allowance: bigint; silent?: boolean }) {
  const permit2 = new Interface(PERMIT2_ABI);
  const token = new Interface(TOKEN_ABI);
  const word = (value: bigint) => '0x' + value.toString(16).padStart(64, '0');
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      if (state.silent) return;
      const { id, params } = JSON.parse(body) as { id: number; params: [{ data: string }] };
      const selector = params[0].data.slice(0, 10);
      let result: string;
      if (selector === permit2.getFunction('nonceBitmap')!.selector) {
        // Every nonce of the word used, or none.
        result = word(state.used ? (1n << 256n) - 1n : 0n);
      } else if (selector === token.getFunction('balanceOf')!.selector) result = word(state.balance);
      else result = word(state.allowance);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ jsonrpc: '2.0', id, result }));
    });
  });
  return server;
}

describe("the gateway's upto scheme", () => {
  let node: Server;
  const state = { used: false, balance: MAX, allowance: MAX, silent: false };
  let config: PaymentConfig;

  before(async () => {
    node = standInNode(state);
    await new Promise<void>((resolve) => node.listen(0, '127.0.0.1', resolve));
    config = configAt(`http://127.0.0.1:${(node.address() as AddressInfo).port}`);
  });
  after(async () => {
    node.closeAllConnections();
    await new Promise((resolve) => node.close(resolve));
  });
  beforeEach(() => Object.assign(state, { used: false, balance: MAX, allowance: MAX, silent: false }));

  /** What the unmodified client signs for the gate's own 402 of `entries` (a reader: the sponsoring permit's reads). */
  async function paid(entries: ChallengeEntry[], reader?: Parameters<typeof payUptoChallenge>[2]) {
    const required = paymentRequiredV2(config, entries, 'payment required');
    const { wire } = await payUptoChallenge(payer.privateKey, JSON.parse(JSON.stringify(required)), reader);
    const decoded = decodeOffer(config, { dialect: 'v2', header: encodeBase64Json(wire) }, entries);
    assert.ok(decoded, 'the gate decodes what the client sent for its own challenge');
    return decoded;
  }
  const verify = (decoded: DecodedOffer, requirements: ChallengeEntry = decoded.requirements, at?: number) =>
    decoded.scheme.verify(config, decoded.payment, requirements, at);

  it('the price names its scheme: exact by default, the upto maximum as its amount', () => {
    assert.equal(exactPrice.scheme, 'exact');
    assert.equal(uptoPrice.scheme, 'upto');
    assert.equal(uptoPrice.amount, String(MAX));
  });

  it('offers the entry of the price’s scheme: an exact price’s 402 is unchanged and declares no upto extension', () => {
    const entries = challengeEntries(config, exactPrice, RESOURCE, KINDS);
    assert.deepEqual(entries, challengeEntries(config, exactPrice, RESOURCE));
    assert.deepEqual(
      entries.map((entry) => entry.scheme),
      ['exact'],
    );
    assert.deepEqual(Object.keys(paymentRequiredV2(config, entries, 'payment required').extensions!), [
      'payment-identifier',
    ]);
  });

  it('offers upto with the maximum and the facilitator /supported names; its 402 declares eip2612GasSponsoring', () => {
    const entries = challengeEntries(config, uptoPrice, RESOURCE, KINDS);
    assert.deepEqual(entries, [
      {
        scheme: 'upto',
        network: 'base',
        maxAmountRequired: String(MAX),
        resource: RESOURCE,
        description: 'Call of agent a',
        mimeType: '',
        payTo,
        maxTimeoutSeconds: 3600,
        asset: TOKEN,
        extra: { name: 'USD Coin', version: '2', facilitatorAddress: FACILITATOR },
      },
    ]);
    const required = paymentRequiredV2(config, entries, 'payment required');
    assert.deepEqual(required.accepts, [
      {
        scheme: 'upto',
        network: 'eip155:8453',
        amount: String(MAX),
        asset: TOKEN,
        payTo,
        maxTimeoutSeconds: 3600,
        extra: { name: 'USD Coin', version: '2', facilitatorAddress: FACILITATOR },
      },
    ]);
    assert.deepEqual(Object.keys(required.extensions!), [EIP2612_GAS_SPONSORING, 'payment-identifier']);
  });

  it('offers no upto entry without the facilitator’s upto kind: PaymentUnavailable (fail closed)', () => {
    assert.throws(() => challengeEntries(config, uptoPrice, RESOURCE), PaymentUnavailable);
    assert.throws(() => challengeEntries(config, uptoPrice, RESOURCE, null), PaymentUnavailable);
    assert.throws(() => challengeEntries(config, uptoPrice, RESOURCE, [KINDS[0]]), PaymentUnavailable);
    const otherChain = [{ ...KINDS[1], network: 'eip155:1' }];
    assert.throws(() => challengeEntries(config, uptoPrice, RESOURCE, otherChain), PaymentUnavailable);
    const noAddress = [{ ...KINDS[1], extra: {} }];
    assert.throws(() => challengeEntries(config, uptoPrice, RESOURCE, noAddress), PaymentUnavailable);
  });

  it('verifies what the unmodified client signs for its challenge; the nonce names the Permit2 nonce apart from EIP-3009 ones', async () => {
    const entries = challengeEntries(config, uptoPrice, RESOURCE, KINDS);
    const decoded = await paid(entries);
    assert.equal(decoded.scheme, gatewayScheme('upto'));
    // The client echoes the declaration of eip2612GasSponsoring; signing no permit, it adds nothing.
    assert.equal(decoded.payment.extensions, undefined, 'an echoed declaration is dropped');
    const a = decoded.payment.payload.permit2Authorization as { spender: string; nonce: string; deadline: string };
    assert.equal(getAddress(a.spender), UPTO_PROXY_ADDRESS);
    const verified = await verify(decoded);
    assert.deepEqual(verified, {
      ok: true,
      payer: payer.address,
      nonce: `upto-0x${BigInt(a.nonce).toString(16).padStart(64, '0')}`,
    });
    assert.equal(decoded.scheme.momentInside(config, decoded.payment), Number(a.deadline) - 6 - 1);
  });

  it('carries a sponsoring permit the client signs for a payer without allowance, and takes it instead of the allowance', async () => {
    const entries = challengeEntries(config, uptoPrice, RESOURCE, KINDS);
    const reader = {
      // No allowance to Permit2; the token's permit nonce 0.
      readContract: async () => 0n,
    };
    const decoded = await paid(entries, reader);
    assert.ok(decoded.payment.extensions?.[EIP2612_GAS_SPONSORING], 'the permit rides beside the payload');
    state.allowance = 0n;
    assert.equal((await verify(decoded)).ok, true);
    // Without it, the same authorization needs the allowance.
    const { extensions: _dropped, ...bare } = decoded.payment;
    assert.deepEqual(await decoded.scheme.verify(config, bare, decoded.requirements), {
      ok: false,
      cause: 'permit2_allowance_required',
    });
  });

  it('refuses another facilitator, another payee, a maximum above the permitted amount, an expired or tampered authorization', async () => {
    const entries = challengeEntries(config, uptoPrice, RESOURCE, KINDS);
    const decoded = await paid(entries);
    const entry = decoded.requirements;
    const refused = async (cause: string, requirements: ChallengeEntry, payment = decoded.payment, at?: number) =>
      assert.deepEqual(await decoded.scheme.verify(config, payment, requirements, at), { ok: false, cause });

    const other = getAddress('0x' + '44'.repeat(20));
    await refused('facilitator_mismatch', { ...entry, extra: { ...entry.extra, facilitatorAddress: other } });
    await refused('facilitator_unknown', { ...entry, extra: { name: 'USD Coin', version: '2' } });
    await refused('recipient_mismatch', { ...entry, payTo: other });
    await refused('amount_mismatch', { ...entry, maxAmountRequired: String(MAX + 1n) });
    const deadline = Number((decoded.payment.payload.permit2Authorization as { deadline: string }).deadline);
    await refused('expired', entry, decoded.payment, deadline - 6);
    const payload = decoded.payment.payload as { signature: string };
    const flipped =
      payload.signature.slice(0, 10) + (payload.signature[10] === 'a' ? 'b' : 'a') + payload.signature.slice(11);
    await refused('invalid_signature', entry, { ...decoded.payment, payload: { ...payload, signature: flipped } });
    await refused('unsupported_scheme', entry, { ...decoded.payment, scheme: 'exact' });
  });

  it('refuses a deadline nearer than the charge window: the call and its settle after it must fit before it', async () => {
    // A payer signing for an entry whose maxTimeoutSeconds it shortened: its deadline is 10 minutes ahead.
    const entries = challengeEntries(config, uptoPrice, RESOURCE, KINDS).map((e) => ({ ...e, maxTimeoutSeconds: 600 }));
    const decoded = await paid(entries);
    assert.deepEqual(await verify(decoded), { ok: false, cause: 'deadline_too_near' });
    const roomy = { ...config, chargedAfterCall: { timeoutSeconds: 3600, minWindowSeconds: 300 } };
    assert.equal((await decoded.scheme.verify(roomy, decoded.payment, decoded.requirements)).ok, true);
  });

  it('refuses on the chain’s word: a used nonce, a balance below the maximum, no allowance; a silent node fails closed', async () => {
    const entries = challengeEntries(config, uptoPrice, RESOURCE, KINDS);
    const decoded = await paid(entries);
    state.used = true;
    assert.deepEqual(await verify(decoded), { ok: false, cause: 'nonce_used' });
    state.used = false;
    state.balance = MAX - 1n;
    assert.deepEqual(await verify(decoded), { ok: false, cause: 'insufficient_balance' });
    state.balance = MAX;
    state.allowance = MAX - 1n;
    assert.deepEqual(await verify(decoded), { ok: false, cause: 'permit2_allowance_required' });
    state.allowance = MAX;
    state.silent = true;
    assert.deepEqual(await verify(decoded), { ok: false, cause: 'chain_check_unavailable' });
    const closed = { ...config, contractSignatures: { rpcUrl: 'http://127.0.0.1:1', timeoutMs: 500 } };
    assert.deepEqual(await decoded.scheme.verify(closed, decoded.payment, decoded.requirements), {
      ok: false,
      cause: 'chain_check_unavailable',
    });
  });
});

describe('the facilitator kinds cache', () => {
  const target = { facilitatorUrl: 'https://facilitator.test' };

  it('reads a facilitator once while fresh, shares a read in flight, and does not keep a failed read', async () => {
    let reads = 0;
    let answer: SupportedKind[] | null = null;
    const kinds = createSupportedKinds(async (_: typeof target) => {
      reads++;
      return answer;
    });
    assert.equal(await kinds.of(target), null);
    assert.equal(await kinds.of(target), null);
    assert.equal(reads, 2, 'a failed read is asked again');
    answer = KINDS;
    const [first, second] = await Promise.all([kinds.of(target), kinds.of(target)]);
    assert.equal(reads, 3, 'one read for two callers');
    assert.deepEqual(first, KINDS);
    assert.deepEqual(second, KINDS);
    answer = null;
    assert.deepEqual(await kinds.of(target), KINDS, 'kept while fresh');
    assert.equal(reads, 3);
    assert.equal(await kinds.of({ facilitatorUrl: 'https://other.test' }), null, 'per facilitator');
  });

  it('reads again once the kinds are older than the TTL', async () => {
    let reads = 0;
    const kinds = createSupportedKinds(async () => {
      reads++;
      return KINDS;
    }, 1);
    await kinds.of(target);
    const readAt = Date.now();
    // The LRU's TTL is in ms: wait until a later millisecond without sleeping on a timer.
    while (Date.now() <= readAt + 1) await new Promise((resolve) => setImmediate(resolve));
    await kinds.of(target);
    assert.equal(reads, 2);
  });
});
