// `npm start` registers the dev PKI's client certificate as the facilitator account
// `dev-gateway` (once), so a tenant whose facilitator credential holds that certificate and key
// can settle right away. Real deployments add accounts with `npm run facilitator -- accounts add`.
import { openFacilitatorPool } from '../../facilitator/db/pool.ts';
import { migrateFacilitator } from '../../facilitator/db/migrations.ts';
import { addAccount } from '../../facilitator/accounts.ts';
import { certFingerprint256 } from './pki.ts';

export async function ensureDevAccount(
  databaseUrl: string,
  clientCertPem: string,
  tokenAddress: string,
): Promise<void> {
  const pool = openFacilitatorPool(databaseUrl, 1);
  try {
    await migrateFacilitator(pool);
    const { rowCount } = await pool.query('select 1 from facilitator_accounts where cert_fingerprint = $1', [
      certFingerprint256(clientCertPem),
    ]);
    if (!rowCount)
      await addAccount(pool, {
        name: 'dev-gateway',
        certPem: clientCertPem,
        allowedKinds: [{ network: 'base', asset: tokenAddress }],
      });
  } finally {
    await pool.end();
  }
}
