// `npm run rotate-kek`: re-wraps every managed credential's data key, and every tenant's budget
// alert secret's, under VAULT_KEK_CURRENT.
// Deploy order: add the new key to VAULT_KEKS everywhere (API and workers keep the old one
// too), set VAULT_KEK_CURRENT to it, run this, then the old key may be dropped from VAULT_KEKS.
// Reads DATABASE_URL, VAULT_KEKS and VAULT_KEK_CURRENT; prints counts, never key material.
import { loadVaultConfig } from '../gateway/credentials/config.ts';
import { rewrapAll, type RotationReport } from '../gateway/credentials/rotation.ts';
import { rewrapAlertSecrets } from '../gateway/budgets/alert-secret-rotation.ts';
import { openOrm } from '../gateway/db/orm.ts';
import { parseCommand } from './lib/cli.ts';

parseCommand({
  usage: `usage: npm run rotate-kek
  Re-wraps every managed credential's and budget alert secret's data key under VAULT_KEK_CURRENT (reads DATABASE_URL,
  VAULT_KEKS and VAULT_KEK_CURRENT); prints counts, never key material.`,
});

const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/gateway';
let exitCode = 0;
try {
  const { keyring } = loadVaultConfig(process.env);
  const orm = await openOrm(databaseUrl, { poolMax: 2 });
  try {
    const parts: RotationReport[] = [await rewrapAll(orm, keyring), await rewrapAlertSecrets(orm, keyring)];
    const report: RotationReport = {
      rewrapped: parts.reduce((n, r) => n + r.rewrapped, 0),
      alreadyCurrent: parts.reduce((n, r) => n + r.alreadyCurrent, 0),
      changedMeanwhile: parts.reduce((n, r) => n + r.changedMeanwhile, 0),
      failed: parts.flatMap((r) => r.failed),
    };
    process.stdout.write(
      `rotate-kek: current key ${keyring.current}; re-wrapped ${report.rewrapped}, already current ${report.alreadyCurrent}, ` +
        `changed meanwhile ${report.changedMeanwhile}, failed ${report.failed.length}\n`,
    );
    if (report.failed.length > 0) {
      process.stderr.write(
        `rotate-kek: these secrets could not be unwrapped (is their key in VAULT_KEKS?): ${report.failed.join(', ')}\n`,
      );
      exitCode = 1;
    }
  } finally {
    await orm.close();
  }
} catch (err) {
  const message = (err as Error).message.split('\n')[0];
  process.stderr.write(`rotate-kek failed: ${message}\n`);
  exitCode = /^invalid configuration/.test(message) ? 2 : 1;
}
process.exit(exitCode);
