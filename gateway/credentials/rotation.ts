// KEK rotation: re-wraps every managed secret's data key under the keyring's current KEK.
// Plaintext and ciphertext are untouched and `version` stays (the secret did not change).
// Each row is updated only if it still holds the wrapping that was read, so a concurrent
// PUT (which writes a new envelope under the current KEK anyway) is never overwritten.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Keyring } from './config.ts';
import { CredentialSchema } from './entity.ts';
import { rewrap } from './envelope.ts';
import { sealedOf } from './secrets.ts';

export type RotationReport = { rewrapped: number; alreadyCurrent: number; changedMeanwhile: number; failed: string[] };

export async function rewrapAll(orm: MikroORM, keyring: Keyring, batchSize = 200): Promise<RotationReport> {
  if (!keyring.current) throw new Error('no current key-encryption key (VAULT_KEKS, VAULT_KEK_CURRENT)');
  const report: RotationReport = { rewrapped: 0, alreadyCurrent: 0, changedMeanwhile: 0, failed: [] };
  let after = '';
  for (;;) {
    const em = orm.em.fork();
    const rows = await em.find(
      CredentialSchema,
      { source: 'managed', wrappedKey: { $ne: null }, id: { $gt: after } },
      { orderBy: { id: 'asc' }, limit: batchSize },
    );
    if (rows.length === 0) return report;
    for (const row of rows) {
      after = row.id;
      if (row.kekId === keyring.current) {
        report.alreadyCurrent += 1;
        continue;
      }
      const sealed = sealedOf(row);
      if (!sealed) continue;
      let next: { kekId: string; wrappedKey: Buffer };
      try {
        next = rewrap(keyring, { tenantId: row.tenantId, credentialId: row.id, version: row.version }, sealed);
      } catch {
        report.failed.push(row.id);
        continue;
      }
      const updated = await em.nativeUpdate(
        CredentialSchema,
        { id: row.id, kekId: sealed.kekId, wrappedKey: sealed.wrappedKey, version: row.version },
        { kekId: next.kekId, wrappedKey: next.wrappedKey },
      );
      if (updated === 1) report.rewrapped += 1;
      else report.changedMeanwhile += 1;
    }
  }
}
