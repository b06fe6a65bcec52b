// `npm run facilitator -- accounts add|list|deactivate | certs issue`: the operator's tool for
// facilitator accounts. An account is a client certificate (by SHA-256 fingerprint) with its
// guardrails.
//
//   accounts add --cert FILE --name NAME [--kind NETWORK:ASSET]... [--max-per-tx N] [--daily-ceiling N]
//   accounts list [--json]
//   accounts deactivate ID_OR_FINGERPRINT | --cert FILE
//   certs issue --name NAME [--out DIR]
//
// The database is FACILITATOR_DATABASE_URL (or --database-url); without either, the one
// `npm start` runs (embedded PostgreSQL on EMBEDDED_PG_PORT, default 5433). The default kind
// is (base, TOKEN_ADDRESS), or the local token of `npm start` when TOKEN_ADDRESS is unset.
// Limits are in the token's smallest unit; an omitted limit uses the deployment default.
// `certs issue` signs a client certificate with the dev CA of `npm start` (DATA_DIR/pki), for a
// local system only: a deployment's certificates come from its own CA.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { getAddress } from 'ethers';
import { openFacilitatorPool } from '../facilitator/db/pool.ts';
import { migrateFacilitator } from '../facilitator/db/migrations.ts';
import {
  addAccount,
  deactivateAccount,
  listAccounts,
  type Account,
  type AccountKind,
} from '../facilitator/accounts.ts';
import { certFingerprint256, issueClientCertFiles } from './dev/pki.ts';
import { usageToday } from '../facilitator/store/claims.ts';
import { guardrailDefaults } from '../facilitator/config.ts';
import { DEV_TOKEN_ADDRESS } from './dev/chain.ts';
import { parseCommand, reportUncaught, runCommand, usageExit, UsageError } from './lib/cli.ts';
import { announceDataDir, dataDir } from './lib/secrets.ts';

const USAGE = `usage:
  npm run facilitator -- accounts add --cert FILE --name NAME [--kind NETWORK:ASSET]... [--max-per-tx N] [--daily-ceiling N]
  npm run facilitator -- accounts list [--json]
  npm run facilitator -- accounts deactivate ID_OR_FINGERPRINT | --cert FILE
  npm run facilitator -- certs issue --name NAME [--out DIR]
options: --database-url URL (default: FACILITATOR_DATABASE_URL, else the npm start database)
  certs issue: a client certificate for NAME from npm start's dev CA (DATA_DIR/pki), written to
  DIR (default DATA_DIR/pki/clients) as NAME-cert.pem and NAME-key.pem; register it with accounts add`;

function fail(message: string): never {
  return usageExit(USAGE, message);
}

const { values, positionals } = parseCommand({
  usage: USAGE,
  allowPositionals: true,
  options: {
    cert: { type: 'string' },
    name: { type: 'string' },
    kind: { type: 'string', multiple: true },
    'max-per-tx': { type: 'string' },
    'daily-ceiling': { type: 'string' },
    'database-url': { type: 'string' },
    json: { type: 'boolean' },
    out: { type: 'string' },
  },
});
if (positionals[0] === 'certs') await issueCert();
if (positionals[0] !== 'accounts') fail(positionals[0] ? `unknown command ${positionals[0]}` : 'name a command');

/** `certs issue --name NAME [--out DIR]`: a client certificate from the dev CA of npm start. */
async function issueCert(): Promise<never> {
  if (positionals[1] !== 'issue' || positionals.length > 2) fail('the certs command is: certs issue --name NAME');
  const name = values.name;
  if (!name) fail('certs issue needs --name NAME');
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(name) || name.startsWith('.'))
    fail(`--name ${name}: 1-64 letters, digits, dots, dashes or underscores`);
  return runCommand('facilitator', async () => {
    const dir = dataDir();
    announceDataDir('facilitator', dir);
    const pkiDir = join(dir, 'pki');
    const issued = await issueClientCertFiles(pkiDir, name, resolve(values.out ?? join(pkiDir, 'clients'))).catch(
      (err: Error) => {
        throw new UsageError(err.message);
      },
    );
    process.stdout.write(
      `issued ${issued.certFile}\n       ${issued.keyFile}\n    sha256 ${certFingerprint256(issued.certPem)}\n` +
        `register it: npm run facilitator -- accounts add --cert ${issued.certFile} --name ${name}\n`,
    );
  });
}

reportUncaught('facilitator');

const databaseUrl =
  values['database-url'] ??
  process.env.FACILITATOR_DATABASE_URL ??
  `postgres://postgres:postgres@127.0.0.1:${process.env.EMBEDDED_PG_PORT ?? 5433}/gateway_facilitator`;

function amount(flag: string, value: string | undefined): bigint | null {
  if (value === undefined) return null;
  if (!/^[0-9]{1,78}$/.test(value)) fail(`--${flag} must be a decimal integer (token smallest units)`);
  return BigInt(value);
}

function kinds(): AccountKind[] {
  // The token `npm start` deploys lands at dev account 0's first contract address.
  const fallback = process.env.TOKEN_ADDRESS ?? DEV_TOKEN_ADDRESS;
  const given = values.kind ?? [`base:${fallback}`];
  return given.map((k) => {
    const [network, asset] = k.split(':');
    if (!network || !/^0x[0-9a-fA-F]{40}$/.test(asset ?? '')) fail(`--kind ${k}: expected NETWORK:0xASSET`);
    return { network, asset: getAddress(asset) };
  });
}

type Usage = { reserved: bigint; failedGasWei: bigint };

/** The account with its effective limits (its own, else the deployment's default, said so) and today's usage. */
function show(a: Account, usage: Usage = { reserved: 0n, failedGasWei: 0n }): string {
  const defaults = guardrailDefaults();
  const limit = (own: bigint | null, fallback: bigint) => (own === null ? `${fallback} (default)` : `${own}`);
  const limits = `max/tx ${limit(a.maxPerTx, defaults.maxPerTx)}, daily ${limit(a.dailyCeiling, defaults.dailyCeiling)}`;
  const kindList = a.allowedKinds.map((k) => `${k.network}:${k.asset}`).join(' ');
  const today = `today (UTC): ${usage.reserved} of the daily ceiling reserved, ${usage.failedGasWei} of ${defaults.failedGasDailyWei} wei of failed-gas budget burned`;
  return `${a.id}  ${a.active ? 'active  ' : 'inactive'}  ${a.name}\n    sha256 ${a.certFingerprint}\n    kinds ${kindList}; ${limits}\n    ${today}`;
}

const pool = openFacilitatorPool(databaseUrl, 2);
try {
  await migrateFacilitator(pool);
  const action = positionals[1];
  if (action === 'add') {
    if (!values.cert || !values.name) fail('accounts add needs --cert and --name');
    let certPem: string;
    try {
      certPem = readFileSync(values.cert, 'utf8');
      certFingerprint256(certPem);
    } catch {
      fail(`--cert ${values.cert}: not a readable PEM certificate`);
    }
    const account = await addAccount(pool, {
      name: values.name,
      certPem,
      allowedKinds: kinds(),
      maxPerTx: amount('max-per-tx', values['max-per-tx']),
      dailyCeiling: amount('daily-ceiling', values['daily-ceiling']),
    }).catch((err: { code?: string }) => {
      if (err.code === '23505') fail('an account with this certificate already exists');
      throw err;
    });
    process.stdout.write(`added\n${show(account)}\n`);
  } else if (action === 'list') {
    const [accounts, usage] = await Promise.all([listAccounts(pool), usageToday(pool)]);
    if (values.json) {
      const defaults = guardrailDefaults();
      const plain = accounts.map((a) => ({
        ...a,
        maxPerTx: a.maxPerTx?.toString() ?? null,
        dailyCeiling: a.dailyCeiling?.toString() ?? null,
        effectiveMaxPerTx: (a.maxPerTx ?? defaults.maxPerTx).toString(),
        effectiveDailyCeiling: (a.dailyCeiling ?? defaults.dailyCeiling).toString(),
        usedToday: (usage.get(a.id)?.reserved ?? 0n).toString(),
        failedGasTodayWei: (usage.get(a.id)?.failedGasWei ?? 0n).toString(),
      }));
      process.stdout.write(`${JSON.stringify(plain, null, 2)}\n`);
    } else {
      process.stdout.write(
        accounts.length ? `${accounts.map((a) => show(a, usage.get(a.id))).join('\n')}\n` : 'no accounts\n',
      );
    }
  } else if (action === 'deactivate') {
    const target = values.cert ? certFingerprint256(readFileSync(values.cert, 'utf8')) : positionals[2];
    if (!target) fail('accounts deactivate needs an account id, a fingerprint or --cert');
    const account = await deactivateAccount(pool, target);
    if (!account) fail('no account matches');
    process.stdout.write(`deactivated\n${show(account)}\n`);
  } else {
    fail('unknown accounts action');
  }
} finally {
  await pool.end();
}
