// x402 `exact` payments off-chain (x402/): the wire schemas and X-PAYMENT decoding, the
// EIP-3009 typed data a payer signs and the recovery of its signer, and verification of every
// term against what the gateway asks. Payers are ethers Wallets signing locally; no chain. The
// contract-wallet (ERC-1271) check is an injected function here, named as the stand-in it is.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Signature, TypedDataEncoder, Wallet, getAddress, hexlify, randomBytes } from 'ethers';
import {
  TRANSFER_WITH_AUTHORIZATION_TYPES,
  authorizationDigest,
  recoverAuthorizer,
} from '../../x402/schemes/exact/eip3009.ts';
import type { TokenDomain } from '../../x402/token.ts';
import {
  Payment,
  SettleRequest,
  TokenAddressSetting,
  Uint256String,
  decodePaymentHeader,
  encodeBase64Json,
} from '../../x402/schemas.ts';
import { asExactPayment, type ExactPayment, type TransferAuthorization } from '../../x402/schemes/exact/schemas.ts';
import { PaymentPayloadV2, caip2Network, decodeBase64JsonHeader } from '../../x402/v2.ts';
import { contractSignatureCheck, type EthCall } from '../../x402/erc1271.ts';
import {
  authorizationSigner,
  signerKindOf,
  termsMismatch,
  verifyExactPayment,
  verifyPayment,
  type VerifyExpectation,
} from '../../x402/schemes/exact/verify.ts';

const TOKEN = getAddress('0x833589fcd6edb6e08f4c7c32d4f71b54bda02913');
const DOMAIN: TokenDomain = { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: TOKEN };
const NOW = 1_800_000_000;
const payer = new Wallet('0x' + '11'.repeat(32));
const payTo = getAddress('0x' + '22'.repeat(20));

function authorization(over: Partial<TransferAuthorization> = {}): TransferAuthorization {
  return {
    from: payer.address,
    to: payTo,
    value: '1000',
    validAfter: '0',
    validBefore: String(NOW + 600),
    nonce: '0x' + 'ab'.repeat(32),
    ...over,
  };
}

async function signed(
  over: Partial<TransferAuthorization> = {},
  wallet: Wallet = payer,
  domain: TokenDomain = DOMAIN,
): Promise<ExactPayment> {
  const a = authorization(over);
  const signature = await wallet.signTypedData(domain, TRANSFER_WITH_AUTHORIZATION_TYPES, a);
  return { x402Version: 1, scheme: 'exact', network: 'base', payload: { signature, authorization: a } };
}

const expectation = (over: Partial<VerifyExpectation> = {}): VerifyExpectation => ({
  network: 'base',
  domain: DOMAIN,
  asset: TOKEN,
  payTo,
  amount: { exact: 1000n },
  now: NOW,
  marginSeconds: 6,
  ...over,
});

/** Stand-in for the ERC-1271 eth_call: accepts what `accept` says and records what it was asked. */
function fakeContractCheck(accept: boolean) {
  const asked: Array<{ from: string; digest: string; signature: string }> = [];
  const check = async (from: string, digest: string, signature: string) => {
    asked.push({ from, digest, signature });
    return accept;
  };
  return Object.assign(check, { asked });
}

describe('x402 wire schemas', () => {
  it('takes uint256 decimal strings only, up to 2^256 - 1', () => {
    const max = ((1n << 256n) - 1n).toString();
    for (const ok of ['0', '1', '001', max]) assert.ok(Uint256String.safeParse(ok).success, ok);
    for (const bad of ['', '-1', '1.5', '1e3', '0x10', ' 1', (1n << 256n).toString(), '9'.repeat(79), 12])
      assert.ok(!Uint256String.safeParse(bad).success, String(bad));
  });

  it('takes a token address in one case or with its EIP-55 checksum right, and names a wrong checksum', () => {
    assert.ok(TokenAddressSetting.safeParse(TOKEN).success);
    assert.ok(TokenAddressSetting.safeParse(TOKEN.toLowerCase()).success);
    assert.ok(TokenAddressSetting.safeParse('0x' + TOKEN.slice(2).toUpperCase()).success);
    const flipped = TOKEN.replace(/[a-f]/, (c) => c.toUpperCase());
    const parsed = TokenAddressSetting.safeParse(flipped);
    assert.ok(!parsed.success);
    assert.match(parsed.error.issues[0].message, /EIP-55 checksum/);
    assert.ok(!TokenAddressSetting.safeParse('0x1234').success);
  });

  it('decodes an X-PAYMENT header to the Payment it encodes, and anything else to null', async () => {
    const payment = await signed();
    // The envelope, then the `exact` payload inside it.
    const decodeExact = (header: string) => {
      const envelope = decodePaymentHeader(header);
      return envelope && asExactPayment(envelope);
    };
    assert.deepEqual(decodeExact(encodeBase64Json(payment)), payment);
    assert.deepEqual(decodeExact(`  ${encodeBase64Json(payment)}\t`), payment);
    const tooLong = encodeBase64Json({ ...payment, padding: 'x'.repeat(8192) });
    for (const header of [
      '',
      'not base64!',
      Buffer.from('{').toString('base64'),
      encodeBase64Json({ ...payment, x402Version: '1' }),
      encodeBase64Json({ ...payment, payload: { ...payment.payload, signature: '0x1234' } }),
      encodeBase64Json({ ...payment, payload: { ...payment.payload, authorization: authorization({ value: '-1' }) } }),
      tooLong,
    ])
      assert.equal(decodeExact(header), null, header.slice(0, 40));
  });

  it('never throws while decoding, whatever the header', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.jsonValue().map(encodeBase64Json)), (header) => {
        const decoded = decodePaymentHeader(header);
        assert.ok(decoded === null || Payment.safeParse(decoded).success);
      }),
      { numRuns: 500 },
    );
  });

  it('reads a v2 PAYMENT-SIGNATURE envelope around the same authorization', async () => {
    const v1 = await signed();
    const accepted = {
      scheme: 'exact',
      network: caip2Network(8453),
      amount: '1000',
      asset: TOKEN,
      payTo,
      maxTimeoutSeconds: 60,
      extra: { name: 'USD Coin', version: '2' },
    };
    const header = encodeBase64Json({ x402Version: 2, accepted, payload: v1.payload });
    const decoded = PaymentPayloadV2.safeParse(decodeBase64JsonHeader(header, 8192));
    assert.ok(decoded.success);
    assert.equal(decoded.data.accepted.network, 'eip155:8453');
    assert.equal(decodeBase64JsonHeader(header, header.length - 1), null);
    assert.equal(decodeBase64JsonHeader('   ', 100), null);
    assert.ok(
      !PaymentPayloadV2.safeParse({ x402Version: 2, accepted: { ...accepted, network: 'base' }, payload: v1.payload })
        .success,
    );
    assert.ok(!PaymentPayloadV2.safeParse({ x402Version: 1, accepted, payload: v1.payload }).success);
  });

  it('requires the requirements and payload of a settle request', async () => {
    const payment = await signed();
    const requirements = {
      scheme: 'exact',
      network: 'base',
      maxAmountRequired: '1000',
      asset: TOKEN,
      payTo,
      resource: 'https://gw.example/v1/agents/x/invoke',
      maxTimeoutSeconds: 60,
    };
    assert.ok(
      SettleRequest.safeParse({ x402Version: 1, paymentPayload: payment, paymentRequirements: requirements }).success,
    );
    assert.ok(!SettleRequest.safeParse({ x402Version: 1, paymentPayload: payment }).success);
    assert.ok(
      !SettleRequest.safeParse({
        x402Version: 1,
        paymentPayload: payment,
        paymentRequirements: { ...requirements, maxTimeoutSeconds: -1 },
      }).success,
    );
  });
});

describe('EIP-3009 typed data', () => {
  it('hashes the TransferWithAuthorization struct in the token domain, as ethers encodes EIP-712', () => {
    const a = authorization();
    assert.equal(authorizationDigest(DOMAIN, a), TypedDataEncoder.hash(DOMAIN, TRANSFER_WITH_AUTHORIZATION_TYPES, a));
    // Every field of the domain and of the struct is in the digest.
    const digest = authorizationDigest(DOMAIN, a);
    for (const domain of [
      { ...DOMAIN, name: 'USDC' },
      { ...DOMAIN, version: '1' },
      { ...DOMAIN, chainId: 84532 },
      { ...DOMAIN, verifyingContract: payTo },
    ])
      assert.notEqual(authorizationDigest(domain, a), digest);
    for (const over of [
      { from: payTo },
      { to: payer.address },
      { value: '1001' },
      { validAfter: '1' },
      { validBefore: '1' },
      { nonce: '0x' + 'cd'.repeat(32) },
    ])
      assert.notEqual(authorizationDigest(DOMAIN, authorization(over)), digest, JSON.stringify(over));
    // The address's case is not part of what was signed.
    assert.equal(authorizationDigest({ ...DOMAIN, verifyingContract: TOKEN.toLowerCase() }, a), digest);
  });

  it('recovers the wallet that signed, and another address (or null) for anything else', async () => {
    const payment = await signed();
    const a = payment.payload.authorization;
    const signature = payment.payload.signature;
    assert.equal(recoverAuthorizer(DOMAIN, a, signature), payer.address);
    assert.notEqual(recoverAuthorizer({ ...DOMAIN, chainId: 1 }, a, signature), payer.address);
    assert.notEqual(recoverAuthorizer(DOMAIN, { ...a, value: '1001' }, signature), payer.address);
    assert.equal(recoverAuthorizer(DOMAIN, a, '0x' + '00'.repeat(65)), null);
    assert.equal(recoverAuthorizer(DOMAIN, a, '0x1234'), null);
    // A signature with s in the upper half of the curve order (malleated) is refused.
    const sig = Signature.from(signature);
    const n = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;
    const high = hexlify(
      new Uint8Array([
        ...Buffer.from(sig.r.slice(2), 'hex'),
        ...Buffer.from((n - BigInt(sig.s)).toString(16).padStart(64, '0'), 'hex'),
        sig.v === 27 ? 28 : 27,
      ]),
    );
    assert.equal(recoverAuthorizer(DOMAIN, a, high), null);
  });

  it('recovers any signer of any authorization (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.bigInt({ min: 0n, max: (1n << 256n) - 1n }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        async (key, value, nonce) => {
          fc.pre(key.some((b) => b !== 0));
          let wallet: Wallet;
          try {
            wallet = new Wallet(hexlify(key));
          } catch {
            return; // beyond the curve order
          }
          const payment = await signed(
            { from: wallet.address, value: value.toString(), nonce: hexlify(nonce) },
            wallet,
          );
          assert.equal(
            recoverAuthorizer(DOMAIN, payment.payload.authorization, payment.payload.signature),
            wallet.address,
          );
        },
      ),
      { numRuns: 40 },
    );
  });
});

describe('verifying an exact payment', () => {
  it('accepts a payment that meets every term, naming the payer as signer', async () => {
    const result = verifyExactPayment(await signed(), expectation());
    assert.deepEqual(result, {
      ok: true,
      signer: 'eoa',
      payment: {
        payer: payer.address,
        payTo,
        value: 1000n,
        validAfter: 0n,
        validBefore: BigInt(NOW + 600),
        nonce: '0x' + 'ab'.repeat(32),
      },
    });
  });

  it('names the first term a payment breaks', async () => {
    const good = await signed();
    const cases: Array<[string, ExactPayment | Promise<ExactPayment>, Partial<VerifyExpectation>]> = [
      ['unsupported_version', { ...good, x402Version: 2 }, {}],
      ['unsupported_scheme', { ...good, scheme: 'upto' }, {}],
      ['network_mismatch', good, { network: 'base-sepolia' }],
      ['asset_mismatch', good, { asset: payTo }],
      ['asset_mismatch', good, { asset: TOKEN.replace(/[a-f]/, (c) => c.toUpperCase()) }],
      ['recipient_mismatch', good, { payTo: payer.address }],
      ['amount_mismatch', good, { amount: { exact: 999n } }],
      ['amount_mismatch', good, { amount: { atMost: 999n } }],
      ['amount_mismatch', signed({ value: '0' }), { amount: { atMost: 1000n } }],
      ['not_yet_valid', signed({ validAfter: String(NOW + 6) }), {}],
      ['expired', signed({ validBefore: String(NOW + 6) }), {}],
      ['expired', good, { now: NOW + 600 }],
      ['invalid_nonce', signed({ nonce: '0x' + '00'.repeat(32) }), {}],
      [
        'invalid_signature',
        {
          ...good,
          payload: { ...good.payload, authorization: authorization({ value: '1000', nonce: '0x' + 'ac'.repeat(32) }) },
        },
        {},
      ],
      ['invalid_signature', signed({}, new Wallet('0x' + '33'.repeat(32))), {}],
      ['invalid_signature', signed({}, payer, { ...DOMAIN, chainId: 1 }), {}],
    ];
    for (const [cause, payment, over] of cases)
      assert.deepEqual(verifyExactPayment(await payment, expectation(over)), { ok: false, cause }, cause);
  });

  it('takes an amount up to maxAmountRequired, a start at most 5 s ahead, an end past the margin', async () => {
    assert.ok(verifyExactPayment(await signed({ value: '1' }), expectation({ amount: { atMost: 1000n } })).ok);
    assert.ok(verifyExactPayment(await signed(), expectation({ amount: { atMost: 1000n } })).ok);
    assert.ok(verifyExactPayment(await signed({ validAfter: String(NOW + 5) }), expectation()).ok);
    assert.ok(verifyExactPayment(await signed({ validBefore: String(NOW + 7) }), expectation()).ok);
  });

  it('checks the terms alone, before a settlement is opened', async () => {
    const good = await signed();
    assert.equal(termsMismatch(good, expectation()), null);
    assert.equal(termsMismatch({ ...good, network: 'eth' }, expectation()), 'network_mismatch');
    // The signature is not a term.
    assert.equal(
      termsMismatch({ ...good, payload: { ...good.payload, signature: '0x' + '00'.repeat(65) } }, expectation()),
      null,
    );
  });

  it('asks a contract wallet (ERC-1271) only when the signature does not recover the payer, about the signed digest', async () => {
    const eoa = fakeContractCheck(false);
    assert.equal((await verifyPayment(await signed(), expectation(), eoa)).ok, true);
    assert.equal(eoa.asked.length, 0);

    const wallet = getAddress('0x' + '44'.repeat(20));
    const contractSigned = await signed({ from: wallet }); // the payer's key signs for its wallet
    const signature = contractSigned.payload.signature;
    const accepts = fakeContractCheck(true);
    const accepted = await verifyPayment(contractSigned, expectation(), accepts);
    assert.ok(accepted.ok);
    assert.equal(accepted.signer, 'contract');
    assert.equal(accepted.payment.payer, wallet);
    assert.deepEqual(accepts.asked, [
      { from: wallet, digest: authorizationDigest(DOMAIN, contractSigned.payload.authorization), signature },
    ]);
    assert.deepEqual(await verifyPayment(contractSigned, expectation(), fakeContractCheck(false)), {
      ok: false,
      cause: 'invalid_signature',
    });
    // Terms are checked first: a broken term never costs a contract call.
    const unasked = fakeContractCheck(true);
    assert.deepEqual(await verifyPayment(contractSigned, expectation({ amount: { exact: 1n } }), unasked), {
      ok: false,
      cause: 'amount_mismatch',
    });
    assert.equal(unasked.asked.length, 0);
  });

  it('tells how an authorization was signed', async () => {
    const payment = await signed();
    const a = payment.payload.authorization;
    assert.equal(signerKindOf(DOMAIN, a, payment.payload.signature), 'eoa');
    assert.equal(signerKindOf(DOMAIN, { ...a, from: payTo }, payment.payload.signature), 'contract');
    assert.equal(await authorizationSigner(DOMAIN, a, payment.payload.signature, fakeContractCheck(false)), 'eoa');
    assert.equal(
      await authorizationSigner(DOMAIN, { ...a, from: payTo }, payment.payload.signature, fakeContractCheck(true)),
      'contract',
    );
    assert.equal(
      await authorizationSigner(DOMAIN, { ...a, from: payTo }, payment.payload.signature, fakeContractCheck(false)),
      null,
    );
  });

  it('accepts only the transfer that was signed: changing any signed field breaks it (property)', async () => {
    const good = await signed({ nonce: hexlify(randomBytes(32)) });
    const fields = ['from', 'to', 'value', 'validAfter', 'validBefore', 'nonce'] as const;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...fields),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        async (field, bytes) => {
          const a = { ...good.payload.authorization };
          const original = a[field];
          if (field === 'from' || field === 'to') a[field] = getAddress(hexlify(bytes.slice(0, 20)));
          else if (field === 'nonce') a[field] = hexlify(bytes);
          else a[field] = String(BigInt(hexlify(bytes.slice(0, 4))));
          fc.pre(a[field].toLowerCase() !== original.toLowerCase());
          const result = verifyExactPayment(
            { ...good, payload: { ...good.payload, authorization: a } },
            expectation({ amount: { atMost: 1n << 64n } }),
          );
          assert.equal(result.ok, false);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('ERC-1271 check of a contract wallet', () => {
  const wallet = getAddress('0x' + '44'.repeat(20));
  const digest = '0x' + '12'.repeat(32);
  const signature = '0x' + '34'.repeat(65);
  const MAGIC = '0x1626ba7e' + '0'.repeat(56);
  /** Stand-in for the node's eth_call: answers `result` (or throws it) and keeps what it was asked. */
  const node = (result: string | Error) => {
    const asked: Array<{ to: string; data: string }> = [];
    const call: EthCall = async (tx) => {
      asked.push(tx);
      if (result instanceof Error) throw result;
      return result;
    };
    return Object.assign(call, { asked });
  };

  it('asks the wallet isValidSignature(digest, signature) and accepts only the magic word', async () => {
    const accepting = node(MAGIC);
    assert.equal(await contractSignatureCheck(accepting)(wallet, digest, signature), true);
    assert.equal(accepting.asked.length, 1);
    assert.equal(accepting.asked[0].to, wallet);
    assert.equal(accepting.asked[0].data.slice(0, 10), '0x1626ba7e');
    // Extra return data after the word is tolerated, as OpenZeppelin's SignatureChecker does.
    assert.equal(await contractSignatureCheck(node(MAGIC + '00'.repeat(32)))(wallet, digest, signature), true);
    assert.equal(
      await contractSignatureCheck(node(MAGIC.toUpperCase().replace('0X', '0x')))(wallet, digest, signature),
      true,
    );
    for (const answer of [
      '0x',
      '0x1626ba7e',
      '0xffffffff' + '0'.repeat(56),
      '0x' + '0'.repeat(64),
      '0x0000001626ba7e' + '0'.repeat(50),
    ])
      assert.equal(await contractSignatureCheck(node(answer))(wallet, digest, signature), false, answer);
  });

  it('takes a revert for a refusal and throws anything else, for its caller to fail closed or retry', async () => {
    const revert = Object.assign(new Error('execution reverted'), { code: 'CALL_EXCEPTION' });
    assert.equal(await contractSignatureCheck(node(revert))(wallet, digest, signature), false);
    await assert.rejects(
      contractSignatureCheck(node(new Error('connect ECONNREFUSED')))(wallet, digest, signature),
      /ECONNREFUSED/,
    );
  });
});
