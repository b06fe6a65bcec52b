// The PostgreSQL client tools docs/DEPLOYMENT.md's backup and restore run, found where the guide
// says to look for them: a pg_dump and pg_restore of the server's major version or newer.
import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);

export async function serverMajor(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ server_version_num: string }>('show server_version_num');
    return Math.floor(Number(rows[0].server_version_num) / 10000);
  } finally {
    await client.end();
  }
}

/**
 * The folder of a pg_dump and pg_restore of `major` or newer: PG_BINDIR, Debian's
 * /usr/lib/postgresql/N/bin (newest first), then PATH.
 */
export async function clientTools(major: number): Promise<string | undefined> {
  const debian = existsSync('/usr/lib/postgresql')
    ? readdirSync('/usr/lib/postgresql')
        .sort((a, b) => Number(b) - Number(a))
        .map((v) => `/usr/lib/postgresql/${v}/bin`)
    : [];
  const dirs = [process.env.PG_BINDIR, ...debian, ...(process.env.PATH ?? '').split(delimiter)].filter(Boolean);
  for (const dir of dirs as string[]) {
    if (!existsSync(join(dir, 'pg_dump')) || !existsSync(join(dir, 'pg_restore'))) continue;
    const { stdout } = await run(join(dir, 'pg_dump'), ['--version']);
    const version = Number(/(\d+)\.\d+/.exec(stdout)?.[1]);
    if (version >= major) return dir;
  }
  return undefined;
}
