// KEK rotation of the tenants' budget alert secrets (`npm run rotate-kek`, beside the managed
// credentials' in gateway/credentials/rotation.ts, and the same way): each data key re-wrapped
// under the keyring's current KEK, the secret's ciphertext untouched, and a row updated only if
// it still holds the wrapping that was read (a secret is never rewritten, but the rule costs
// nothing and keeps the two rotations alike).
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Keyring } from '../credentials/config.ts';
import { rewrap } from '../credentials/envelope.ts';
import type { RotationReport } from '../credentials/rotation.ts';
import { BudgetAlertSecretSchema } from './entity.ts';
import { alertSecretAddress } from './alerts.ts';

/** Re-wraps every alert secret not under the current KEK; a failure names `budget-alerts:<tenant>`. */
export async function rewrapAlertSecrets(orm: MikroORM, keyring: Keyring, batchSize = 200): Promise<RotationReport> {
  if (!keyring.current) throw new Error('no current key-encryption key (VAULT_KEKS, VAULT_KEK_CURRENT)');
  const report: RotationReport = { rewrapped: 0, alreadyCurrent: 0, changedMeanwhile: 0, failed: [] };
  let after = '';
  for (;;) {
    const em = orm.em.fork();
    const rows = await em.find(
      BudgetAlertSecretSchema,
      { tenantId: { $gt: after } },
      { orderBy: { tenantId: 'asc' }, limit: batchSize },
    );
    if (rows.length === 0) return report;
    for (const row of rows) {
      after = row.tenantId;
      if (row.kekId === keyring.current) {
        report.alreadyCurrent += 1;
        continue;
      }
      const sealed = {
        kekId: row.kekId,
        wrappedKey: Buffer.from(row.wrappedKey),
        ciphertext: Buffer.from(row.secretCiphertext),
      };
      let next: { kekId: string; wrappedKey: Buffer };
      try {
        next = rewrap(keyring, alertSecretAddress(row.tenantId), sealed);
      } catch {
        report.failed.push(`budget-alerts:${row.tenantId}`);
        continue;
      }
      const updated = await em.nativeUpdate(
        BudgetAlertSecretSchema,
        { tenantId: row.tenantId, kekId: sealed.kekId, wrappedKey: sealed.wrappedKey },
        { kekId: next.kekId, wrappedKey: next.wrappedKey },
      );
      if (updated === 1) report.rewrapped += 1;
      else report.changedMeanwhile += 1;
    }
  }
}
