// Envelope encryption of managed secrets (gateway/credentials/envelope.ts) with keys made here:
// a secret opens only at the address it was sealed for (tenant, credential, version), under
// the key-encryption key that wrapped it; a KEK rotation re-wraps the data key and leaves the
// ciphertext as it was; a blob changed by one bit, or a KEK that is missing, fails with an
// error that carries no key material.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import type { Keyring } from '../../gateway/credentials/config.ts';
import { rewrap, seal, unseal, type SecretAddress } from '../../gateway/credentials/envelope.ts';

const oldKey = randomBytes(32);
const newKey = randomBytes(32);
const keyring = (current: string | undefined, ids: string[] = ['old', 'new']): Keyring => ({
  current,
  keys: new Map(ids.map((id) => [id, id === 'old' ? oldKey : newKey])),
});
const address: SecretAddress = { tenantId: 'acme', credentialId: 'cred_1', version: 1 };
const SECRET = 'sk-live-0123456789';

/** Asserts that `fn` fails with an EnvelopeError whose message names no key material. */
function failsCleanly(fn: () => unknown, message: RegExp) {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof Error);
    assert.equal(err.name, 'EnvelopeError');
    assert.match(err.message, message);
    for (const key of [oldKey, newKey])
      for (const form of [key.toString('base64'), key.toString('hex')]) assert.ok(!err.message.includes(form));
    return true;
  });
}

describe('envelope encryption of managed secrets', () => {
  it('opens what it sealed, under the KEK it names, and never stores the secret in the clear', () => {
    const sealed = seal(keyring('old'), address, SECRET);
    assert.equal(sealed.kekId, 'old');
    assert.equal(unseal(keyring('old'), address, sealed), SECRET);
    assert.ok(!sealed.ciphertext.includes(Buffer.from(SECRET)));
    // Fresh randomness each time: the same secret never seals to the same bytes.
    const again = seal(keyring('old'), address, SECRET);
    assert.ok(!again.ciphertext.equals(sealed.ciphertext));
    assert.ok(!again.wrappedKey.equals(sealed.wrappedKey));
  });

  it('refuses to open a blob at any other address: another tenant, credential or version', () => {
    const sealed = seal(keyring('old'), address, SECRET);
    for (const other of [
      { ...address, tenantId: 'acme2' },
      { ...address, credentialId: 'cred_2' },
      { ...address, version: 2 },
    ])
      failsCleanly(() => unseal(keyring('old'), other, sealed), /failed authentication/);
  });

  it('fails on a single flipped bit anywhere in either blob, and on a blob of another format', () => {
    const sealed = seal(keyring('old'), address, SECRET);
    fc.assert(
      fc.property(fc.boolean(), fc.nat(), fc.integer({ min: 0, max: 7 }), (inKey, at, bit) => {
        const blob = Buffer.from(inKey ? sealed.wrappedKey : sealed.ciphertext);
        const index = at % blob.length;
        blob[index] ^= 1 << bit;
        const tampered = inKey ? { ...sealed, wrappedKey: blob } : { ...sealed, ciphertext: blob };
        failsCleanly(() => unseal(keyring('old'), address, tampered), /failed authentication|unrecognised envelope/);
      }),
      { numRuns: 300 },
    );
    failsCleanly(
      () => unseal(keyring('old'), address, { ...sealed, ciphertext: sealed.ciphertext.subarray(0, 20) }),
      /unrecognised envelope/,
    );
  });

  it('names a KEK that is not in the keyring, or none configured, without key material', () => {
    const sealed = seal(keyring('old'), address, SECRET);
    failsCleanly(
      () => unseal(keyring('new', ['new']), address, sealed),
      /key-encryption key old is not in the keyring/,
    );
    failsCleanly(() => seal(keyring(undefined, []), address, SECRET), /no key-encryption key is configured/);
    // A blob claiming another KEK than the one that wrapped it does not open.
    failsCleanly(() => unseal(keyring('old'), address, { ...sealed, kekId: 'new' }), /failed authentication/);
  });

  it('rotates: rewrap moves the data key to the current KEK, the ciphertext untouched, and the old KEK can go', () => {
    const sealed = seal(keyring('old'), address, SECRET);
    const moved = rewrap(keyring('new'), address, sealed);
    assert.equal(moved.kekId, 'new');
    const rotated = { ...sealed, ...moved };
    assert.ok(rotated.ciphertext.equals(sealed.ciphertext));
    assert.equal(unseal(keyring('new', ['new']), address, rotated), SECRET);
    // A rewrap at the wrong address proves nothing and changes nothing.
    failsCleanly(() => rewrap(keyring('new'), { ...address, version: 9 }, sealed), /failed authentication/);
  });

  it('opens any secret text it sealed, at its own address only (property)', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 200 }),
        fc.stringMatching(/^[a-z0-9-]{1,20}$/),
        fc.nat({ max: 1000 }),
        (secret, tenantId, version) => {
          const at = { tenantId, credentialId: 'cred_x', version };
          const sealed = seal(keyring('new'), at, secret);
          assert.equal(unseal(keyring('new'), at, sealed), secret);
          assert.throws(() => unseal(keyring('new'), { ...at, version: version + 1 }, sealed));
        },
      ),
      { numRuns: 200 },
    );
  });
});
