// KEK rotation of the tenants' budget alert secrets (`npm run rotate-kek`, beside the managed
// credentials', through the same loop: gateway/credentials/rotation.ts rewrapEach): each data key re-wrapped
// under the keyring's current KEK, the secret's ciphertext untouched, and a row updated only if
// it still holds the wrapping that was read (a secret is never rewritten, but the rule costs
// nothing and keeps the two rotations alike).
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Keyring } from '../credentials/config.ts';
import { rewrapEach, type RotationReport } from '../credentials/rotation.ts';
import { BudgetAlertSecretSchema } from './entity.ts';
import { alertSecretAddress } from './alerts.ts';

/** Re-wraps every alert secret not under the current KEK; a failure names `budget-alerts:<tenant>`. */
export function rewrapAlertSecrets(orm: MikroORM, keyring: Keyring, batchSize = 200): Promise<RotationReport> {
  return rewrapEach(
    orm,
    keyring,
    {
      page: (em, after, limit) =>
        em.find(BudgetAlertSecretSchema, { tenantId: { $gt: after } }, { orderBy: { tenantId: 'asc' }, limit }),
      keyOf: (row) => row.tenantId,
      nameOf: (row) => `budget-alerts:${row.tenantId}`,
      sealedOf: (row) => ({
        kekId: row.kekId,
        wrappedKey: Buffer.from(row.wrappedKey),
        ciphertext: Buffer.from(row.secretCiphertext),
      }),
      addressOf: (row) => alertSecretAddress(row.tenantId),
      update: (em, row, read, next) =>
        em.nativeUpdate(
          BudgetAlertSecretSchema,
          { tenantId: row.tenantId, kekId: read.kekId, wrappedKey: read.wrappedKey },
          { kekId: next.kekId, wrappedKey: next.wrappedKey },
        ),
    },
    batchSize,
  );
}
