// `npm run migrate`: applies the committed migrations to DATABASE_URL (creating the database
// when missing), and with FACILITATOR_DATABASE_URL set, the facilitator's to its database too
// (its processes also migrate it at start, but none creates it). `npm start` does this itself;
// this is for external databases.
import { openOrm, migrate } from '../gateway/db/orm.ts';
import { openFacilitatorPool } from '../facilitator/db/pool.ts';
import { migrateFacilitator } from '../facilitator/db/migrations.ts';
import { ensureDatabase } from './lib/postgres.ts';
import { parseCommand, runCommand, UsageError } from './lib/cli.ts';

parseCommand({
  usage: `usage: npm run migrate
  Applies the committed migrations to DATABASE_URL and, when FACILITATOR_DATABASE_URL is set,
  the facilitator's to that database, creating each database when missing.`,
});

function databaseUrl(variable: string, example: string): string | undefined {
  const url = process.env[variable];
  if (url === undefined || url === '') return undefined;
  try {
    new URL(url);
  } catch {
    throw new UsageError(`${variable} is not a URL (expected ${example})`);
  }
  return url;
}

await runCommand('migrate', async () => {
  const url = databaseUrl('DATABASE_URL', 'postgres://user@host:5432/gateway');
  const facilitatorUrl = databaseUrl('FACILITATOR_DATABASE_URL', 'postgres://user@host:5432/facilitator');
  if (!url && !facilitatorUrl)
    throw new UsageError(
      'set DATABASE_URL to the gateway database (e.g. postgres://user@host:5432/gateway), FACILITATOR_DATABASE_URL to the facilitator database, or both',
    );
  if (url) {
    await ensureDatabase(url);
    const orm = await openOrm(url, { poolMax: 1 });
    try {
      const applied = await migrate(orm);
      console.log(`gateway: ${applied.length ? `applied: ${applied.join(', ')}` : 'up to date'}`);
    } finally {
      await orm.close();
    }
  }
  if (facilitatorUrl) {
    await ensureDatabase(facilitatorUrl);
    const pool = openFacilitatorPool(facilitatorUrl, 1);
    try {
      const applied = await migrateFacilitator(pool);
      console.log(`facilitator: ${applied.length ? `applied: ${applied.join(', ')}` : 'up to date'}`);
    } finally {
      await pool.end();
    }
  }
});
