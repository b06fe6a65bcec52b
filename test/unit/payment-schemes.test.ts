// The payment scheme registries (docs/ARCHITECTURE.md, "A new payment scheme"): the protocol's
// (x402/schemes/), the gateway's (challenge entries of a price, the scheme that verifies an
// offered payment) and the facilitator's (/supported, /settle by scheme and network): what each
// finds for a known scheme, an unknown scheme and an unknown network. Payments are signed
// locally; no chain, no database.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Wallet, getAddress } from 'ethers';
import { encodeBase64Json } from '../../x402/schemas.ts';
import { schemeProtocol } from '../../x402/schemes/index.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from '../../x402/schemes/exact/eip3009.ts';
import type { ExactPayment } from '../../x402/schemes/exact/schemas.ts';
import { caip2Network } from '../../x402/v2.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';
import { decodeOffer, requirementsV2 } from '../../gateway/payment/dialect.ts';
import { priceOf } from '../../gateway/payment/pricing.ts';
import { challengeEntries, gatewayScheme } from '../../gateway/payment/schemes/index.ts';
import type { FacilitatorConfig } from '../../facilitator/config.ts';
import { settlersFor, supportedKinds } from '../../facilitator/schemes/index.ts';
import type { SchemeDeps } from '../../facilitator/schemes/scheme.ts';
import type { Account } from '../../facilitator/accounts.ts';

const TOKEN = getAddress('0x833589fcd6edb6e08f4c7c32d4f71b54bda02913');
const DOMAIN = { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: TOKEN };
const payer = new Wallet('0x' + '11'.repeat(32));
const payTo = getAddress('0x' + '22'.repeat(20));
const RESOURCE = 'https://gateway.test/v1/proxy/agt_x';

const config = {
  network: 'base',
  domain: DOMAIN,
  maxTimeoutSeconds: 60,
  validityMarginSeconds: 6,
  contractSignatures: { rpcUrl: 'http://127.0.0.1:1', timeoutMs: 100 },
} as PaymentConfig;

const agent = {
  name: 'a',
  protocol: 'http' as const,
  pricing: { amount: '1000', asset: 'USDC' as const, network: 'base' as const, pay_to: payTo.toLowerCase() },
};
const price = priceOf({ agent, mcp: null })!;

async function signedPayment(validBefore = Math.floor(Date.now() / 1000) + 600): Promise<ExactPayment> {
  const authorization = {
    from: payer.address,
    to: payTo,
    value: '1000',
    validAfter: '0',
    validBefore: String(validBefore),
    nonce: '0x' + 'ab'.repeat(32),
  };
  const signature = await payer.signTypedData(DOMAIN, TRANSFER_WITH_AUTHORIZATION_TYPES, authorization);
  return { x402Version: 1, scheme: 'exact', network: 'base', payload: { signature, authorization } };
}

describe('the protocol registry', () => {
  it('knows exact, upto and batch-settlement by name, parses exact’s payload and names its payer; an unknown scheme is null', async () => {
    const exact = schemeProtocol('exact');
    assert.equal(exact?.name, 'exact');
    const { payload } = await signedPayment();
    assert.deepEqual(exact.parsePayload({ ...payload, extra: 1 }), payload, 'unknown keys dropped');
    assert.equal(exact.parsePayload({ signature: '0x12' }), null);
    assert.equal(exact.payerOf(payload), payer.address);
    assert.equal(exact.payerOf({}), '');
    assert.equal(schemeProtocol('upto')?.name, 'upto');
    const batch = schemeProtocol(SCHEME_BATCH_SETTLEMENT);
    assert.equal(batch?.name, SCHEME_BATCH_SETTLEMENT);
    assert.equal(batch.parsePayload(payload), null, 'an exact payload is no batch-settlement one');
    assert.equal(batch.payerOf({}), '');
    assert.equal(schemeProtocol('streaming'), null);
    assert.equal(schemeProtocol(''), null);
  });
});

describe("the gateway's registry", () => {
  it('offers one challenge entry per scheme for a price, with the terms every x402 v1 client insists on', () => {
    assert.deepEqual(challengeEntries(config, price, RESOURCE), [
      {
        scheme: 'exact',
        network: 'base',
        maxAmountRequired: '1000',
        resource: RESOURCE,
        description: 'Call of agent a',
        mimeType: '',
        payTo,
        maxTimeoutSeconds: 60,
        asset: TOKEN,
        extra: { name: 'USD Coin', version: '2' },
      },
    ]);
  });

  it('finds the scheme a payment is verified by, and none for an unknown name', () => {
    assert.equal(gatewayScheme('exact')?.protocol.name, 'exact');
    assert.equal(gatewayScheme('upto')?.protocol.name, 'upto');
    assert.equal(gatewayScheme('streaming'), null);
    assert.equal(gatewayScheme('EXACT'), null);
  });

  it('dispatches an offer to the scheme of the entry it pays, and verifies it there', async () => {
    const entries = challengeEntries(config, price, RESOURCE);
    const payment = await signedPayment();
    const decoded = decodeOffer(config, { dialect: 'v1', header: encodeBase64Json(payment) }, entries);
    assert.ok(decoded);
    assert.equal(decoded.scheme.protocol.name, 'exact');
    assert.deepEqual(decoded.requirements, entries[0]);
    assert.deepEqual(await decoded.scheme.verify(config, decoded.payment, decoded.requirements), {
      ok: true,
      payer: payer.address,
      nonce: '0x' + 'ab'.repeat(32),
    });
    const validBefore = Number(payment.payload.authorization.validBefore);
    assert.equal(decoded.scheme.momentInside(config, decoded.payment), validBefore - 6 - 1);
  });

  it('verifies a v1 payment naming an unknown scheme against the first entry, which names the mismatch', async () => {
    const entries = challengeEntries(config, price, RESOURCE);
    const payment = { ...(await signedPayment()), scheme: 'upto' };
    const decoded = decodeOffer(config, { dialect: 'v1', header: encodeBase64Json(payment) }, entries);
    assert.ok(decoded);
    assert.deepEqual(await decoded.scheme.verify(config, decoded.payment, decoded.requirements), {
      ok: false,
      cause: 'unsupported_scheme',
    });
  });

  it('takes no v2 offer whose accepted entry is of an unknown scheme or network, or whose payload is not its scheme’s', async () => {
    const entries = challengeEntries(config, price, RESOURCE);
    const { payload } = await signedPayment();
    const accepted = requirementsV2(config, entries[0]);
    const offer = (over: Record<string, unknown>, body: unknown = payload) => ({
      dialect: 'v2' as const,
      header: encodeBase64Json({ x402Version: 2, accepted: { ...accepted, ...over }, payload: body }),
    });
    assert.ok(decodeOffer(config, offer({}), entries));
    assert.equal(accepted.network, caip2Network(8453));
    assert.equal(decodeOffer(config, offer({ scheme: 'upto' }), entries), null);
    assert.equal(decodeOffer(config, offer({ network: 'eip155:1' }), entries), null);
    assert.equal(decodeOffer(config, offer({}, { signature: payload.signature }), entries), null);
  });
});

describe("the facilitator's registry", () => {
  // The gas wallet's keystore: only its public address field is read (upto's facilitatorAddress).
  const gasWallet = getAddress('0x' + '33'.repeat(20));
  const keystoreFile = join(mkdtempSync(join(tmpdir(), 'schemes-')), 'keystore.json');
  writeFileSync(keystoreFile, JSON.stringify({ address: gasWallet.slice(2).toLowerCase() }));
  const facilitatorConfig = {
    network: 'base',
    tokenAddress: TOKEN,
    domain: DOMAIN,
    chainRpcUrl: 'http://127.0.0.1:1',
    keystore: { file: keystoreFile },
    guardrails: { maxPerTx: 10_000n, dailyCeiling: 10_000n },
    extraSchemes: ['upto'],
  } as unknown as FacilitatorConfig;
  const deps = (): SchemeDeps & { handedOver: number; readinessAsked: number } => {
    const state = {
      handedOver: 0,
      readinessAsked: 0,
      config: facilitatorConfig,
      log: { info: () => undefined, warn: () => undefined } as unknown as SchemeDeps['log'],
      readiness: {
        current: async () => {
          state.readinessAsked++;
          return { ready: true };
        },
      },
      settlements: {
        read: () => undefined,
        settle: async () => {
          state.handedOver++;
          return 'in_flight' as const;
        },
      },
      // No scheme these tests settle reads the chain before it hands over.
      chain: undefined as unknown as SchemeDeps['chain'],
      pool: undefined as unknown as SchemeDeps['pool'],
    };
    return state;
  };
  const account = {
    id: 'acct',
    active: true,
    allowedKinds: [{ network: 'base', asset: TOKEN }],
    maxPerTx: null,
    dailyCeiling: null,
  } as unknown as Account;

  it("settles and lists only exact, the spec's one kind, unless the deployment opts in to more", () => {
    const specOnly = { ...facilitatorConfig, extraSchemes: undefined } as FacilitatorConfig;
    assert.deepEqual(supportedKinds(specOnly), [{ x402Version: 1, scheme: 'exact', network: 'base', asset: TOKEN }]);
    const settlerOf = settlersFor({ ...deps(), config: specOnly });
    assert.equal(typeof settlerOf('exact', 'base'), 'function');
    assert.equal(settlerOf('upto', 'eip155:8453'), null);
  });

  it('lists one kind per scheme in /supported, the extra ones opted in', () => {
    assert.deepEqual(supportedKinds(facilitatorConfig), [
      { x402Version: 1, scheme: 'exact', network: 'base', asset: TOKEN },
      {
        x402Version: 2,
        scheme: 'upto',
        network: 'eip155:8453',
        asset: TOKEN,
        extra: { facilitatorAddress: gasWallet },
      },
    ]);
  });

  it('finds the handler of a known (scheme, network), and none for an unknown scheme or network', () => {
    const settlerOf = settlersFor(deps());
    assert.equal(typeof settlerOf('exact', 'base'), 'function');
    assert.equal(settlerOf('exact', 'base-sepolia'), null);
    assert.equal(settlerOf('exact', 'eip155:8453'), null);
    // upto takes the deployment's network by either name (its v1 name and CAIP-2).
    assert.equal(typeof settlerOf('upto', 'base'), 'function');
    assert.equal(typeof settlerOf('upto', 'eip155:8453'), 'function');
    assert.equal(settlerOf('upto', 'eip155:1'), null);
    assert.equal(settlerOf('permit', 'base'), null);
  });

  it("dispatches to the scheme's handling: a payload not the scheme's is malformed before anything is asked", async () => {
    const d = deps();
    const settle = settlersFor(d)('exact', 'base')!;
    const payment = await signedPayment();
    const requirements = { ...challengeEntries(config, price, RESOURCE)[0] };
    const answer = await settle(
      {
        x402Version: 1,
        paymentPayload: { ...payment, payload: { signature: '0x12' } },
        paymentRequirements: requirements,
      },
      { account, deadline: Date.now() + 1_000 },
    );
    assert.deepEqual(answer, { answer: 'malformed' });
    assert.equal(d.readinessAsked, 0);
    assert.equal(d.handedOver, 0);
  });

  it("hands a request the scheme admits to the settlement's owner", async () => {
    const d = deps();
    const settle = settlersFor(d)('exact', 'base')!;
    const requirements = { ...challengeEntries(config, price, RESOURCE)[0] };
    const answer = await settle(
      { x402Version: 1, paymentPayload: await signedPayment(), paymentRequirements: requirements },
      { account, deadline: Date.now() + 1_000 },
    );
    assert.deepEqual(answer, { answer: 'in_progress' });
    assert.equal(d.readinessAsked, 1);
    assert.equal(d.handedOver, 1);
  });
});
