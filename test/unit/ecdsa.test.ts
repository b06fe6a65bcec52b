// The signature recovery every voucher-paid call runs (x402/ecdsa.ts): libsecp256k1 must name the
// signer ethers names, and refuse what OpenZeppelin's ECDSA.recover refuses (the channel contract
// checks a voucher with it), so a voucher the contract would reject is never accepted.
import assert from 'node:assert/strict';
import { Signature, Wallet, hexlify, randomBytes, recoverAddress } from 'ethers';
import { recoverAddress as viemRecover, type Hex } from 'viem';
import { recoverStrict as recoverWith, recoveries } from '../../x402/ecdsa.ts';
import { highS } from '../support/batch-settlement.ts';

const N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;
const P = 0xfffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc2fn;
const hex32 = (n: bigint) => n.toString(16).padStart(64, '0');

function modPow(base: bigint, exponent: bigint, modulus: bigint): bigint {
  let result = 1n;
  for (let b = base % modulus, e = exponent; e > 0n; e >>= 1n, b = (b * b) % modulus)
    if (e & 1n) result = (result * b) % modulus;
  return result;
}

/** The signature with its recovery byte `v` replaced. */
const withV = (signature: string, v: number) => `${signature.slice(0, 130)}${v.toString(16).padStart(2, '0')}`;

// The native build must load on the platforms CI and the images run (linux-x64): else every
// voucher pays the slower recovery without anyone noticing.
it('loads libsecp256k1’s native build on linux-x64 (x402/ecdsa.ts)', function () {
  if (process.platform !== 'linux' || process.arch !== 'x64') this.skip();
  assert.ok(recoveries.native, 'the secp256k1 addon did not load');
});

for (const [name, recovery] of Object.entries(recoveries)) {
  describe(`ECDSA recovery as OpenZeppelin checks it, ${name} (x402/ecdsa.ts)`, function () {
    before(function () {
      if (!recovery) this.skip();
    });
    const recoverStrict = (digest: string, signature: string) => recoverWith(digest, signature, recovery!);

    it('names the signer ethers names, for many keys and digests, both recovery ids', function () {
      const seen = new Set<number>();
      for (let i = 0; i < 64; i++) {
        const wallet = Wallet.createRandom();
        const digest = hexlify(randomBytes(32));
        const signature = wallet.signingKey.sign(digest);
        seen.add(signature.v);
        assert.equal(recoverStrict(digest, signature.serialized), wallet.address);
        assert.equal(recoverStrict(digest, signature.serialized), recoverAddress(digest, signature));
      }
      assert.deepEqual([...seen].sort(), [27, 28]);
    });

    it('refuses a flipped v, the high-s twin, a v other than 27 or 28, and r or s out of range', async function () {
      const wallet = Wallet.createRandom();
      const digest = hexlify(randomBytes(32));
      const good = wallet.signingKey.sign(digest).serialized;
      const sig = Signature.from(good);
      // The other recovery id names another key (or none): never the signer.
      const flipped = withV(good, sig.v === 27 ? 28 : 27);
      assert.notEqual(recoverStrict(digest, flipped), wallet.address);
      // The malleable twin (n - s, v flipped) recovers the same key (the precompile ecrecover takes
      // it, as viem does); OpenZeppelin refuses it, and so do we.
      const twin = highS(good);
      assert.equal(await viemRecover({ hash: digest as Hex, signature: twin as Hex }), wallet.address);
      assert.equal(recoverStrict(digest, twin), null);
      for (const v of [0, 1, 26, 29, 35]) assert.equal(recoverStrict(digest, withV(good, v)), null, `v ${v}`);
      const r = good.slice(2, 66);
      const s = good.slice(66, 130);
      const v = good.slice(130);
      assert.equal(recoverStrict(digest, `0x${hex32(0n)}${s}${v}`), null, 'r zero');
      assert.equal(recoverStrict(digest, `0x${r}${hex32(0n)}${v}`), null, 's zero');
      assert.equal(recoverStrict(digest, `0x${hex32(N)}${s}${v}`), null, 'r the order');
      assert.equal(recoverStrict(digest, `0x${hex32(N + 1n)}${s}${v}`), null, 'r above the order');
      // Not 65 bytes, or a digest that is not 32.
      assert.equal(recoverStrict(digest, good.slice(0, 130)), null);
      assert.equal(recoverStrict(digest, `${good}00`), null);
      assert.equal(recoverStrict(digest.slice(0, 64), good), null);
    });

    it('names nobody for an r that is no point’s x', function () {
      const digest = hexlify(randomBytes(32));
      // The least x for which x^3 + 7 is no square mod p (Euler's criterion): no point has it.
      let x = 1n;
      while (modPow(x ** 3n + 7n, (P - 1n) / 2n, P) === 1n) x++;
      assert.equal(recoverStrict(digest, `0x${hex32(x)}${hex32(1n)}1b`), null);
      assert.equal(recoverStrict(digest, `0x${hex32(x)}${hex32(1n)}1c`), null);
    });
  });
}
