// `npm run migrate`: applies the committed migrations to DATABASE_URL (creating the
// database when missing). `npm start` does this itself; this is for external databases.
import { openOrm, migrate } from '../gateway/db/orm.ts';
import { ensureDatabase } from './lib/postgres.ts';
import { parseCommand, runCommand, UsageError } from './lib/cli.ts';

parseCommand({
  usage: `usage: npm run migrate
  Applies the committed migrations to DATABASE_URL, creating the database when missing.`,
});

await runCommand('migrate', async () => {
  const url = process.env.DATABASE_URL;
  if (!url) throw new UsageError('set DATABASE_URL to the gateway database (e.g. postgres://user@host:5432/gateway)');
  try {
    new URL(url);
  } catch {
    throw new UsageError('DATABASE_URL is not a URL (expected postgres://user@host:5432/gateway)');
  }
  await ensureDatabase(url);
  const orm = await openOrm(url, { poolMax: 1 });
  try {
    const applied = await migrate(orm);
    console.log(applied.length ? `applied: ${applied.join(', ')}` : 'up to date');
  } finally {
    await orm.close();
  }
});
