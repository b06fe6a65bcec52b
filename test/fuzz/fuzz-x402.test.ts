// Hostile input, x402: property-based cases (fast-check, seed printed, FC_SEED to replay) over
// X-PAYMENT decoding and verification as pure functions (arbitrary text, base64 of anything,
// real signed payments with one field mutated, in several encodings), and over the
// facilitator's /settle body through its mutual-TLS listener. Nothing may throw; /settle
// answers 200/400/429/503 only, a collection failure carries the one coarse errorReason,
// and a malformed request never leaves a settle request behind.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { hexlify, type Wallet } from 'ethers';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import {
  newAccount,
  newPayTo,
  newPayer,
  requirements,
  settleBody,
  signPayment,
  type TestAccount,
} from '../support/x402.ts';
import { assertErrorBody, forAllCases, show } from '../support/fuzz.ts';
import { anyJson, queryPairs, queryString, wrongType } from '../support/fuzz-arbitraries.ts';
import {
  applyMutation,
  encodeHeader,
  encoding,
  garbageHeader,
  mutation,
  type Mutation,
} from '../support/fuzz-payments.ts';
import { decodePaymentHeader, Payment, SettleRequest } from '../../x402/schemas.ts';
import { asExactPayment, type ExactPayment } from '../../x402/schemes/exact/schemas.ts';
import { verifyExactPayment } from '../../x402/schemes/exact/verify.ts';
import { settlementKey } from '../../facilitator/store/records.ts';

const PRICE = 1000n;

describe('hostile input: x402 payments and /settle (property-based)', function () {
  this.timeout(300_000);
  let payer: Wallet;
  const payTo = newPayTo();
  let signed: ExactPayment;

  before(async () => {
    // Unfunded: nothing this file sends can ever be collected.
    payer = await newPayer(0n);
    signed = await signPayment(payer, { payTo, value: PRICE, validBefore: Math.floor(Date.now() / 1000) + 3600 });
  });

  const expectation = () => ({
    network: 'base',
    domain: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: stack().infra.tokenAddress },
    asset: stack().infra.tokenAddress,
    payTo,
    amount: { exact: PRICE },
    now: Math.floor(Date.now() / 1000),
    marginSeconds: 6,
  });

  describe('decoding and verifying X-PAYMENT (pure)', () => {
    it('decodePaymentHeader never throws, and returns null or a Payment', async () => {
      const header = fc.oneof(
        { weight: 3, arbitrary: garbageHeader },
        { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
        { weight: 4, arbitrary: fc.tuple(mutation, encoding).map(([m, e]) => ({ m, e })) },
      );
      await forAllCases('decodePaymentHeader', header, 4000, async (h) => {
        const text = typeof h === 'string' ? h : encodeHeader(applyMutation(signed, h.m), h.e);
        let decoded: unknown;
        assert.doesNotThrow(() => (decoded = decodePaymentHeader(text)), 'decodePaymentHeader threw');
        if (decoded !== null)
          assert.ok(Payment.safeParse(decoded).success, `decoded to a non-Payment: ${show(decoded)}`);
        if (typeof h !== 'string' && h.m.how === 'none' && h.e === 'base64')
          assert.ok(decoded, 'a valid payment did not decode');
      });
    });

    it('verifyExactPayment never throws on anything that decodes; what verifies is the transfer the payer signed', async () => {
      await forAllCases(
        'verifyExactPayment',
        mutation,
        2500,
        async (m) => {
          const envelope = decodePaymentHeader(encodeHeader(applyMutation(signed, m), 'base64'));
          const decoded = envelope && asExactPayment(envelope);
          if (!decoded) return;
          let result: ReturnType<typeof verifyExactPayment> | undefined;
          assert.doesNotThrow(() => (result = verifyExactPayment(decoded, expectation())), 'verifyExactPayment threw');
          const changed = JSON.stringify(decoded) !== JSON.stringify(signed);
          if (!changed) assert.ok(result!.ok, 'the untouched payment did not verify');
          // What verifies authorizes exactly the transfer the payer signed: a mutation may only
          // pass when it changes nothing signed (an extra key, hex case, an equivalent v byte).
          if (result!.ok) {
            const a = signed.payload.authorization;
            assert.deepEqual(
              result!.payment,
              {
                payer: payer.address,
                payTo,
                value: PRICE,
                validAfter: BigInt(a.validAfter),
                validBefore: BigInt(a.validBefore),
                nonce: a.nonce.toLowerCase(),
              },
              `a mutated payment verified as another transfer: ${show(m)}`,
            );
          }
        },
        {
          examples: [
            { path: ['payload', 'authorization', 'to'], how: 'flip-case', value: null, at: 0, numeric: '0' },
            { path: ['payload', 'authorization', 'value'], how: 'numeric', value: null, at: 0, numeric: '1e3' },
          ],
        },
      );
    });

    it('SettleRequest parsing never throws', async () => {
      const body = fc.oneof(
        { weight: 1, arbitrary: anyJson },
        {
          weight: 3,
          arbitrary: fc
            .tuple(mutation, fc.constantFrom('payload', 'requirements', 'top'), wrongType)
            .map(([m, where, v]) => ({ m, where, v })),
        },
      );
      await forAllCases('SettleRequest.safeParse', body, 2000, async (b) => {
        const doc = isCase(b) ? mutateSettle(settleBody(signed, requirements(payTo, PRICE)), b) : b;
        assert.doesNotThrow(() => SettleRequest.safeParse(doc), 'SettleRequest.safeParse threw');
      });
    });
  });

  describe("the facilitator's open endpoints", () => {
    it('GET /supported and /healthz with any query: 200 (or 503 when not ready), never a 5xx of their own', async () => {
      const arb = fc.record({
        path: fc.constantFrom('/supported', '/healthz'),
        query: queryPairs({ ready: fc.constantFrom('1', '0', 'true', '', 'yes') }),
      });
      await forAllCases('facilitator open endpoints', arb, 300, async ({ path, query }) => {
        const res = await request(`${stack().facilitator.publicUrl}${path}${queryString(query.pairs, query.raw)}`);
        const body = (await res.body.json()) as Record<string, unknown>;
        assert.ok(
          path === '/healthz' ? [200, 503].includes(res.statusCode) : res.statusCode === 200,
          `${path}: ${res.statusCode}`,
        );
        assert.ok(path === '/supported' ? Array.isArray(body.kinds) : typeof body.status === 'string');
      });
    });
  });

  describe('POST /settle over mutual TLS', () => {
    let account: TestAccount;
    before(async () => {
      account = await newAccount(`fuzz-settle-${Date.now()}`);
    });
    after(() => account.client.close());

    it('answers 200 (never collected from an unfunded payer), 400, 429 or 503; a malformed request is never stored', async () => {
      const body = fc.oneof(
        {
          weight: 1,
          arbitrary: fc
            .oneof(
              anyJson.map((j) => JSON.stringify(j) ?? 'null'),
              fc.string({ maxLength: 100 }),
              fc.constantFrom('', '{', '[]', 'x'.repeat(70_000)),
            )
            .map((raw) => ({ raw })),
        },
        {
          weight: 4,
          arbitrary: fc
            .tuple(
              mutation,
              fc.constantFrom('payload', 'payload', 'requirements', 'top'),
              wrongType,
              fc.uint8Array({ minLength: 32, maxLength: 32 }),
            )
            .map(([m, where, v, nonce]) => ({ m, where, v, nonce })),
        },
      );
      const refused: string[] = [];
      let collectionFailures = 0;
      await forAllCases('POST /settle', body, 700, async (c) => {
        let sent: unknown;
        if ('raw' in c) {
          sent = c.raw;
        } else {
          const payment = await signPayment(payer, { payTo, value: PRICE, nonce: hexlify(c.nonce) });
          sent = mutateSettle(settleBody(payment, requirements(payTo, PRICE)), c);
        }
        const res = await account.client.post('/settle', sent);
        assert.ok(res.status < 500 || res.status === 503, `/settle: ${res.status} ${show(res.json)}`);
        assert.ok([200, 400, 429, 503].includes(res.status), `/settle: status ${res.status}`);
        if (res.status === 200) {
          const keys = Object.keys(res.json);
          assert.ok(
            keys.every((k) =>
              ['success', 'errorReason', 'transaction', 'network', 'payer', 'facilitatorFee'].includes(k),
            ),
            `unexpected keys ${keys}`,
          );
          assert.equal(res.json.success, false, 'an unfunded payer was collected from');
          assert.equal(res.json.errorReason, 'settlement_failed', 'one coarse reason');
          collectionFailures += 1;
        } else {
          assertErrorBody(
            { status: res.status, headers: res.headers, text: JSON.stringify(res.json), json: res.json },
            `/settle ${res.status}`,
          );
        }
        if (res.status === 400 && typeof sent === 'object' && sent) {
          const auth = (sent as any).paymentPayload?.payload?.authorization;
          if (typeof auth?.from === 'string' && typeof auth?.nonce === 'string')
            refused.push(settlementKey(8453, stack().infra.tokenAddress, auth.from, auth.nonce));
        }
      });
      const stored = await stack().facilitator.pool.query<{ n: string }>(
        'select count(*) as n from settle_requests where settlement_key = any($1)',
        [refused],
      );
      assert.equal(Number(stored.rows[0].n), 0, 'a malformed settle request was stored');
      assert.ok(
        collectionFailures > 0 && refused.length > 0,
        `cases: ${collectionFailures} collection failures, ${refused.length} refused`,
      );
    });
  });
});

type SettleCase = { m: Mutation; where: string; v: unknown };
const isCase = (b: unknown): b is SettleCase => typeof b === 'object' && b !== null && 'm' in b && 'where' in b;

/** One thing wrong in a settle request: in the payment, in the requirements, or at the top. */
function mutateSettle(body: ReturnType<typeof settleBody>, c: SettleCase): unknown {
  if (c.where === 'payload') return { ...body, paymentPayload: applyMutation(body.paymentPayload, c.m) };
  const copy = JSON.parse(JSON.stringify(body)) as Record<string, any>;
  if (c.where === 'requirements') {
    const keys = Object.keys(copy.paymentRequirements);
    const key = keys[c.m.at % keys.length];
    if (c.m.how === 'drop') delete copy.paymentRequirements[key];
    else copy.paymentRequirements[key] = c.m.how === 'numeric' ? c.m.numeric : c.v;
    return copy;
  }
  const key = ['x402Version', 'paymentPayload', 'paymentRequirements'][c.m.at % 3];
  if (c.m.how === 'drop') delete copy[key];
  else copy[key] = c.v;
  return copy;
}
