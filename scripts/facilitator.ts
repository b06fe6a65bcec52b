// `npm run facilitator -- accounts add|list|deactivate | keystore create | certs ca|issue`: the
// operator's tool for the facilitator's accounts and secrets. An account is a client
// certificate (by SHA-256 fingerprint) with its guardrails.
//
//   accounts add --cert FILE --name NAME [--kind NETWORK:ASSET]... [--max-per-tx N] [--daily-ceiling N]
//   accounts list [--json]
//   accounts deactivate ID_OR_FINGERPRINT | --cert FILE
//   keystore create --out FILE --password-file FILE
//   certs ca --out DIR [--name NAME]
//   certs issue --name NAME [--host HOST]... [--ca-cert FILE --ca-key FILE] [--out DIR]
//
// The database is FACILITATOR_DATABASE_URL (or --database-url); without either, the one
// `npm start` runs (embedded PostgreSQL on EMBEDDED_PG_PORT, default 5433). The default kind
// is (base, TOKEN_ADDRESS), or the local token of `npm start` when TOKEN_ADDRESS is unset.
// Limits are in the token's smallest unit; an omitted limit uses the deployment default.
// `keystore create` makes the gas wallet a deployment's facilitator worker decrypts; `certs`
// issues from the operator's CA (--ca-cert, --ca-key), or from the dev CA of `npm start`
// (DATA_DIR/pki) for a local system. Nothing here ever prints a private key.
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Wallet, getAddress } from 'ethers';
import { openFacilitatorPool } from '../facilitator/db/pool.ts';
import { migrateFacilitator } from '../facilitator/db/migrations.ts';
import {
  addAccount,
  deactivateAccount,
  listAccounts,
  type Account,
  type AccountKind,
} from '../facilitator/accounts.ts';
import { certFingerprint256, createCaFiles, devCaFiles, issueCertFiles } from './dev/pki.ts';
import { usageToday, type DailyUsage } from '../facilitator/store/reservations.ts';
import { guardrailDefaults } from '../facilitator/config.ts';
import { DEV_TOKEN_ADDRESS } from './dev/chain.ts';
import { parseCommand, reportUncaught, runCommand, usageExit, UsageError } from './lib/cli.ts';
import { announceDataDir, dataDir } from './lib/secrets.ts';

const USAGE = `usage:
  npm run facilitator -- accounts add --cert FILE --name NAME [--kind NETWORK:ASSET]... [--max-per-tx N] [--daily-ceiling N]
    (default kind: FACILITATOR_NETWORK, else base, and TOKEN_ADDRESS; required with a deployment's database)
  npm run facilitator -- accounts list [--json]
  npm run facilitator -- accounts deactivate ID_OR_FINGERPRINT | --cert FILE
  npm run facilitator -- keystore create --out FILE --password-file FILE
  npm run facilitator -- certs ca --out DIR [--name NAME]
  npm run facilitator -- certs issue --name NAME [--host HOST]... [--ca-cert FILE --ca-key FILE] [--out DIR]
options: --database-url URL (default: FACILITATOR_DATABASE_URL, else the npm start database)
  keystore create: a new gas wallet as an ethers JSON keystore (scrypt), encrypted with the
    password in --password-file (as FACILITATOR_KEYSTORE_PASSWORD_FILE is read: surrounding
    whitespace ignored), written to FILE (0600, never overwritten); prints the wallet's address,
    never its key
  certs ca: a CA for the facilitator's mutual TLS (ECDSA P-256, 5 years, CN NAME), written to
    DIR as ca-cert.pem and ca-key.pem (0600, never overwritten)
  certs issue: an ECDSA P-256 certificate, written to DIR as NAME-cert.pem and NAME-key.pem (0600,
    never overwritten): a client certificate (clientAuth) for a facilitator account (register it
    with accounts add), or with --host a server certificate (serverAuth; every --host, a DNS
    name or an IP address, as a subject alternative name) for FACILITATOR_TLS_CERT. Issued from
    --ca-cert/--ca-key (your CA, unencrypted PEM key: ECDSA P-256/P-384 or RSA; DIR defaults to
    the current folder), else from npm start's dev CA (DATA_DIR/pki; DIR defaults to
    DATA_DIR/pki/clients)`;

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
    host: { type: 'string', multiple: true },
    'ca-cert': { type: 'string' },
    'ca-key': { type: 'string' },
    'password-file': { type: 'string' },
  },
});
if (positionals[0] === 'certs') await certs();
if (positionals[0] === 'keystore') await createKeystore();
if (positionals[0] !== 'accounts') fail(positionals[0] ? `unknown command ${positionals[0]}` : 'name a command');

/** A certificate's or CA's file name part: letters, digits, dots, dashes, underscores. */
function fileName(flag: string, name: string): string {
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(name) || name.startsWith('.'))
    fail(`${flag} ${name}: 1-64 letters, digits, dots, dashes or underscores`);
  return name;
}

/** `certs ca --out DIR` and `certs issue --name NAME ...`. */
async function certs(): Promise<never> {
  const action = positionals[1];
  if (positionals.length > 2 || (action !== 'issue' && action !== 'ca'))
    fail('the certs commands are: certs ca --out DIR, certs issue --name NAME');
  if (action === 'ca') {
    if (!values.out) fail('certs ca needs --out DIR');
    const out = resolve(values.out);
    const name = values.name ?? 'x402 facilitator CA';
    return runCommand('facilitator', async () => {
      const ca = await createCaFiles(out, name).catch(usage);
      process.stdout.write(
        `created ${ca.certFile} (FACILITATOR_TLS_CA, SETTLEMENT_CA_FILE)
        ${ca.keyFile} (keep it offline)
`,
      );
    });
  }
  const name = values.name;
  if (!name) fail('certs issue needs --name NAME');
  fileName('--name', name);
  if (Boolean(values['ca-cert']) !== Boolean(values['ca-key'])) fail('--ca-cert and --ca-key go together');
  const hosts = values.host ?? [];
  for (const host of hosts)
    if (!/^[A-Za-z0-9.:-]{1,253}$/.test(host)) fail(`--host ${host}: a DNS name or an IP address`);
  return runCommand('facilitator', async () => {
    let caFiles: { certFile: string; keyFile: string };
    let out: string;
    if (values['ca-cert'] && values['ca-key']) {
      caFiles = { certFile: resolve(values['ca-cert']), keyFile: resolve(values['ca-key']) };
      out = resolve(values.out ?? '.');
    } else {
      const dir = dataDir();
      announceDataDir('facilitator', dir);
      const pkiDir = join(dir, 'pki');
      caFiles = await devCaFiles(pkiDir).catch(usage);
      out = resolve(values.out ?? join(pkiDir, 'clients'));
    }
    const issued = await issueCertFiles(caFiles, name, out, hosts).catch(usage);
    const next = hosts.length
      ? `use it: FACILITATOR_TLS_CERT=${issued.certFile} FACILITATOR_TLS_KEY=${issued.keyFile}\n`
      : `register it: npm run facilitator -- accounts add --cert ${issued.certFile} --name ${name}\n`;
    process.stdout.write(
      `issued ${issued.certFile}\n       ${issued.keyFile}\n    sha256 ${certFingerprint256(issued.certPem)}\n${next}`,
    );
  });
}

/** A mistake in what the operator named (a file, a CA): one line, exit 2. */
function usage(err: Error): never {
  throw new UsageError(err.message);
}

/** `keystore create --out FILE --password-file FILE`: a new gas wallet, encrypted; its address, never its key. */
async function createKeystore(): Promise<never> {
  if (positionals[1] !== 'create' || positionals.length > 2)
    fail('the keystore command is: keystore create --out FILE --password-file FILE');
  const out = values.out;
  const passwordFile = values['password-file'];
  if (!out || !passwordFile) fail('keystore create needs --out FILE and --password-file FILE');
  return runCommand('facilitator', async () => {
    let password: string;
    try {
      // Read as the facilitator worker reads FACILITATOR_KEYSTORE_PASSWORD_FILE.
      password = readFileSync(passwordFile, 'utf8').trim();
    } catch (err) {
      throw new UsageError(`--password-file ${passwordFile}: cannot read it (${(err as NodeJS.ErrnoException).code})`);
    }
    if (password.length < 12)
      throw new UsageError(`--password-file ${passwordFile}: the password must be at least 12 characters`);
    const wallet = new Wallet(`0x${randomBytes(32).toString('hex')}`);
    const json = await wallet.encrypt(password);
    try {
      // 'wx': never replaces a keystore, which may hold the only copy of a funded wallet's key.
      writeFileSync(out, json, { mode: 0o600, flag: 'wx' });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new UsageError(
        code === 'EEXIST'
          ? `--out ${out} exists already: choose another file`
          : `--out ${out}: cannot write it (${code})`,
      );
    }
    process.stdout.write(
      `created ${resolve(out)}\n address ${wallet.address}\n` +
        `fund it with gas, then give the facilitator worker FACILITATOR_KEYSTORE_FILE and FACILITATOR_KEYSTORE_PASSWORD_FILE\n`,
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
  // The facilitator's own kind: its network and token. The token `npm start` deploys lands at
  // dev account 0's first contract address, but a deployment's database never gets that guess.
  const deployment = Boolean(values['database-url'] || process.env.FACILITATOR_DATABASE_URL);
  const token = process.env.TOKEN_ADDRESS || (deployment ? undefined : DEV_TOKEN_ADDRESS);
  if (!values.kind && !token)
    fail(
      'accounts add needs the kind the account settles: TOKEN_ADDRESS (and FACILITATOR_NETWORK) as the facilitator has them, or --kind NETWORK:ASSET',
    );
  const given = values.kind ?? [`${process.env.FACILITATOR_NETWORK || 'base'}:${token}`];
  return given.map((k) => {
    const [network, asset] = k.split(':');
    if (!network || !/^0x[0-9a-fA-F]{40}$/.test(asset ?? '')) fail(`--kind ${k}: expected NETWORK:0xASSET`);
    return { network, asset: getAddress(asset) };
  });
}

/** The account with its effective limits (its own, else the deployment's default, said so) and today's usage. */
function show(a: Account, usage: DailyUsage = { reserved: 0n, failedGasWei: 0n, ownFailedGasWei: 0n }): string {
  const defaults = guardrailDefaults();
  const limit = (own: bigint | null, fallback: bigint) => (own === null ? `${fallback} (default)` : `${own}`);
  const limits = `max/tx ${limit(a.maxPerTx, defaults.maxPerTx)}, daily ${limit(a.dailyCeiling, defaults.dailyCeiling)}`;
  const kindList = a.allowedKinds.map((k) => `${k.network}:${k.asset}`).join(' ');
  const budget = defaults.failedGasDailyWei;
  const today = `today (UTC): ${usage.reserved} of the daily ceiling reserved; failed gas burned: ${usage.failedGasWei} of ${budget} wei by payers' settlements, ${usage.ownFailedGasWei} of ${budget} wei by its own (claims, settles)`;
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
        ownFailedGasTodayWei: (usage.get(a.id)?.ownFailedGasWei ?? 0n).toString(),
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
