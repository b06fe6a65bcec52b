// KEK rotation: re-wraps every managed secret's data key under the keyring's current KEK.
// Plaintext and ciphertext are untouched and `version` stays (the secret did not change).
// Each row is updated only if it still holds the wrapping that was read, so a concurrent
// PUT (which writes a new envelope under the current KEK anyway) is never overwritten.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { Keyring } from './config.ts';
import { CredentialSchema } from './entity.ts';
import { rewrap, type Sealed, type SecretAddress } from './envelope.ts';
import { sealedOf } from './secrets.ts';

export type RotationReport = { rewrapped: number; alreadyCurrent: number; changedMeanwhile: number; failed: string[] };

/**
 * One kind of sealed rows to re-wrap: a page of them after a key (ascending), each row's key,
 * envelope and address, and its conditional update (answers the rows updated: 0 when the row no
 * longer holds the wrapping that was read).
 */
export type RewrapSource<R> = {
  page(em: EntityManager, after: string, limit: number): Promise<R[]>;
  keyOf(row: R): string;
  /** The name a failure is reported under. */
  nameOf(row: R): string;
  sealedOf(row: R): Sealed | null | undefined;
  addressOf(row: R): SecretAddress;
  update(em: EntityManager, row: R, read: Sealed, next: Pick<Sealed, 'kekId' | 'wrappedKey'>): Promise<number>;
};

/** Re-wraps every row of `source` not under the keyring's current KEK, in pages of `batchSize`. */
export async function rewrapEach<R extends { kekId?: string | null }>(
  orm: MikroORM,
  keyring: Keyring,
  source: RewrapSource<R>,
  batchSize = 200,
): Promise<RotationReport> {
  if (!keyring.current) throw new Error('no current key-encryption key (VAULT_KEKS, VAULT_KEK_CURRENT)');
  const report: RotationReport = { rewrapped: 0, alreadyCurrent: 0, changedMeanwhile: 0, failed: [] };
  let after = '';
  for (;;) {
    const em = orm.em.fork();
    const rows = await source.page(em, after, batchSize);
    if (rows.length === 0) return report;
    for (const row of rows) {
      after = source.keyOf(row);
      if (row.kekId === keyring.current) {
        report.alreadyCurrent += 1;
        continue;
      }
      const sealed = source.sealedOf(row);
      if (!sealed) continue;
      let next: Pick<Sealed, 'kekId' | 'wrappedKey'>;
      try {
        next = rewrap(keyring, source.addressOf(row), sealed);
      } catch {
        report.failed.push(source.nameOf(row));
        continue;
      }
      if ((await source.update(em, row, sealed, next)) === 1) report.rewrapped += 1;
      else report.changedMeanwhile += 1;
    }
  }
}

type CredentialRow = Parameters<typeof sealedOf>[0];

/** The managed credentials' data keys. */
export function rewrapAll(orm: MikroORM, keyring: Keyring, batchSize = 200): Promise<RotationReport> {
  return rewrapEach<CredentialRow>(
    orm,
    keyring,
    {
      page: (em, after, limit) =>
        em.find(
          CredentialSchema,
          { source: 'managed', wrappedKey: { $ne: null }, id: { $gt: after } },
          { orderBy: { id: 'asc' }, limit },
        ),
      keyOf: (row) => row.id,
      nameOf: (row) => row.id,
      sealedOf,
      addressOf: (row) => ({ tenantId: row.tenantId, credentialId: row.id, version: row.version }),
      update: (em, row, read, next) =>
        em.nativeUpdate(
          CredentialSchema,
          { id: row.id, kekId: read.kekId, wrappedKey: read.wrappedKey, version: row.version },
          { kekId: next.kekId, wrappedKey: next.wrappedKey },
        ),
    },
    batchSize,
  );
}
